"""The passage guide's cost (`PipelineConfig.guide`): `Pipeline(enc).select(question, paragraphs,
budget=256)` on HotpotQA-hard questions (10 paragraphs each, sentence granularity), nothing
cached (`cache_size=0`: every request embeds its texts), with the guide (the default), with it
but no search for a further passage (`guide_extra=0`) and without it (`guide=0`), interleaved
request by request; two rounds over the same questions, the first compiling the shapes it
meets, the second what a warm process pays. `--index`: every
question's paragraphs in one `VectorIndex` (`Pipeline.build_index`, built first and not timed),
each question selecting from it (its hits, cut into sentences; the guide searches the hits with
the embeddings the index holds).

    python bench/guide.py [--questions 36] [--index]
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import jaxsel
from jaxsel import defaults

DATA = Path(__file__).resolve().parents[2] / "shared/data/train/hotpotqa_hard/train.jsonl"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--questions", type=int, default=36)
  ap.add_argument("--index", action="store_true", help="select from one index of the paragraphs")
  args = ap.parse_args()
  rows = [json.loads(line) for line in open(DATA)][400:400 + args.questions]
  enc = jaxsel.load_encoder(str(defaults.default_encoder_path()))
  pipes = {"guide=2 (default)": jaxsel.Pipeline(enc, cache_size=0),
           "guide=2, guide_extra=0": jaxsel.Pipeline(enc, cache_size=0, guide_extra=0),
           "guide=0": jaxsel.Pipeline(enc, cache_size=0, guide=0)}
  print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cpu "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.2f}")
  index = None
  if args.index:
    index = jaxsel.Pipeline(enc).build_index(
        ["".join(s) for r in rows for _, s in r["context"]])
    print(f"one index of {len(index)} passages")
  print("| round | pipeline | median ms | mean ms |\n|---|---|---|---|")
  for round_ in ("first (compiles)", "second (warm)"):
    times = {k: [] for k in pipes}
    for r in rows:
      docs = ["".join(s) for _, s in r["context"]]
      for name, pipe in pipes.items():
        t0 = time.perf_counter()
        pipe.select(r["question"], docs if index is None else index, budget=256)
        times[name].append(time.perf_counter() - t0)
    for name, t in times.items():
      print(f"| {round_} | {name} | {np.median(t) * 1000:.0f} | {np.mean(t) * 1000:.0f} |")


if __name__ == "__main__":
  main()
