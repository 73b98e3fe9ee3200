"""How good greedy's picks provably are: the certified share of the optimum
(`SelectionResult.certified`, the online bound of `jaxsel.greedy`) on the README demo and on
HotpotQA requests, through `jaxsel.Pipeline` as a user calls it.

Rows: the README demo (the bundled document, its first question) and the first `--questions`
questions of HotpotQA dev (`/work/shared/data/hotpotqa/dev_subsampled.jsonl`, each with its
ten paragraphs as documents, "title: paragraph"), with the real all-MiniLM-L6-v2, at
`--budget` tokens (the encoder's word pieces), for each method of `--methods`: median, 10th
percentile and least certified ratio, and how many requests were certified optimal (≥ 99.95%).
Run from the repository root:

    .venv/bin/python bench/certificate.py [--questions 200] [--budget 256]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import jaxsel

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "jaxsel" / "data"
HOTPOTQA = Path("/work/shared/data/hotpotqa/dev_subsampled.jsonl")


def _row(name, certified) -> str:
  c = np.asarray(certified, np.float64)
  return (f"| {name} | {len(c)} | {100 * np.median(c):.1f}% | {100 * np.percentile(c, 10):.1f}% | "
          f"{100 * c.min():.1f}% | {int((c >= 0.9995).sum())} |")


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--questions", type=int, default=200)
  ap.add_argument("--budget", type=float, default=256)
  ap.add_argument("--methods", default="facility_location,saturated_coverage")
  ap.add_argument("--data", type=Path, default=HOTPOTQA)
  args = ap.parse_args(argv)

  enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
  document = (DEMO / "hotpotqa_wiki.md").read_text("utf-8")
  demo_q = json.loads((DEMO / "hotpotqa_questions.jsonl").read_text("utf-8").splitlines()[0])
  rows = [l for l in args.data.read_text("utf-8").splitlines() if l.strip()][:args.questions]
  requests = []
  for line in rows:
    ex = json.loads(line)
    requests.append(([ex["question_text"]],
                     [f"{c['title']}: {c['paragraph_text']}" for c in ex["contexts"]]))

  print(f"budget {args.budget:g} tokens (all-MiniLM-L6-v2 word pieces), {len(requests)} HotpotQA "
        f"dev questions from {args.data.name}\n")
  print("| request | n | median | 10th pct | least | certified optimal |")
  print("|---|---:|---:|---:|---:|---:|")
  for method in args.methods.split(","):
    pipe = jaxsel.Pipeline(enc, method=method)
    demo = pipe.select(demo_q["question_text"], [document], budget=args.budget)
    print(_row(f"README demo, {method} ({demo.certificate})", [demo.certified]))
    results = []
    for i in range(0, len(requests), 50):
      results += pipe.select_many(requests[i:i + 50], budget=args.budget)
    print(_row(f"HotpotQA dev, {method}", [r.certified for r in results]))


if __name__ == "__main__":
  main()
