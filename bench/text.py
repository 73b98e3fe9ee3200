"""Benchmark: `jaxsel.split_text` throughput (MB/s) on long documents.

Not a test. Two documents of the same real text (the bundled HotpotQA/Wikipedia paragraphs,
repeated): one with its headings, paragraphs and lines as written, and the same words as a
single line (no line breaks at all). Each is split into sentences (no `max_tokens`) and into
passages (`max_tokens` 128) with the default rule tokenizer and, when the offline
all-MiniLM-L6-v2 is installed, with its Hugging Face tokenizer. Times are the best of
`--repeats` runs. Run from the repository root:

  .venv/bin/python bench/text.py                 # 5 MB documents
  .venv/bin/python bench/text.py --mb 1          # smaller, quicker
"""

from __future__ import annotations

import argparse
import os
import timeit
from pathlib import Path

from jaxsel import split_text

DOC = Path(__file__).resolve().parents[1] / "jaxsel" / "data" / "hotpotqa_wiki.md"


def documents(size: int) -> dict:
  """The bundled document repeated to `size` characters: as written, and as one line."""
  text = DOC.read_text("utf-8")
  line = " ".join(text.split())
  repeat = lambda t: ((t + "\n\n") * (size // len(t) + 1))[:size]
  return {"multi-line": repeat(text), "single-line": repeat(line).replace("\n", " ")}


def tokenizers() -> dict:
  out = {"rule": None}
  try:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers import AutoTokenizer
    from jaxsel._src.encoders.loading import default_encoder_path
    path = default_encoder_path()
    if path is not None:
      out["MiniLM"] = AutoTokenizer.from_pretrained(str(path))
  except ImportError:
    pass
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--mb", type=float, default=5.0, help="document size in millions of characters")
  p.add_argument("--repeats", type=int, default=2)
  args = p.parse_args(argv)
  docs = documents(int(args.mb * 1e6))
  print(f"split_text on {args.mb:g} M-character documents (best of {args.repeats}); "
        f"load average {os.getloadavg()[0]:.1f}")
  print(f"| tokenizer | document | unit | pieces | seconds | MB/s |\n|---|---|---|---:|---:|---:|")
  for tok_name, tok in tokenizers().items():
    for doc_name, doc in docs.items():
      for unit in ("sentence", "passage"):
        pieces = len(split_text(doc, unit=unit, tokenizer=tok))
        s = min(timeit.repeat(lambda: split_text(doc, unit=unit, tokenizer=tok), number=1,
                              repeat=args.repeats))
        mb = len(doc.encode("utf-8")) / 1e6
        print(f"| {tok_name} | {doc_name} | {unit} | {pieces} | {s:.2f} | {mb / s:.1f} |", flush=True)


if __name__ == "__main__":
  main()
