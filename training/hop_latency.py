"""Median wall time of `Pipeline.select` with whole paragraphs as `Passage`s (embeddings cached).

Questions with 20 paragraphs (MuSiQue), untitled, budget 256, each scorer compiled once first:

    python -m training latency --scorers bridge,learned_hops --n 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from training import hop_features  # noqa: E402


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--scorers", default="bridge,learned_hops")
  p.add_argument("--n", type=int, default=20, help="questions")
  p.add_argument("--set", default="musique")
  p.add_argument("--form", default="untitled")
  p.add_argument("--budget", type=int, default=256)
  args = p.parse_args(argv)
  enc = hop_features.encoder_for(args.set, args.form)
  examples = hop_features.load_examples(args.set, limit=args.n)
  inputs = [(ex.question, hop_features.paragraph_passages(ex, args.form, enc.tokenizer)) for ex in examples]
  for scorer in args.scorers.split(","):
    pipe = jaxsel.Pipeline(enc, method="corag", corag_scorer=scorer, cache_size=0)
    pipe.select(*inputs[0], budget=args.budget)  # compile
    ms = []
    for q, ps in inputs:
      t0 = time.perf_counter()
      pipe.select(q, ps, budget=args.budget)
      ms.append((time.perf_counter() - t0) * 1000)
    n = sorted({len(ps) for _, ps in inputs})
    print(f"{scorer}: median {np.median(ms):.0f} ms, p90 {np.percentile(ms, 90):.0f} ms over {len(ms)} "
          f"selects ({n} candidates, budget {args.budget})", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
