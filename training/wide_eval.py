"""CORAG at the sizes users send: one question's paragraphs among N pooled from other questions.

Each question of a set keeps its own paragraphs and gets those of other questions of the same
set as distractors (a seeded draw), to N documents in all, shuffled; every paragraph is one
candidate `Passage` costing its tokens, with its MiniLM embedding (embedded once for the
pool). Per method and N: gold recall (every supporting paragraph in the context) and
answer in context, paired against NaiveRAG, at one budget.

  python -m training wide --sets hotpot_test,2wiki --limit 100 --sizes 10,100,250,1000

Methods: `naive`; `corag` (the default: the search over `search_width` candidates chosen by
the first pass of `jaxsel._src.pipeline.width`); `corag_rel` (that width, relevance alone as
first pass); `corag_all` (no width: the search over every candidate; only up to 250).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import jaxsel
from jaxsel._src.pipeline import width as width_lib
from training import qa_sets
from training.context_eval import ci, fmt_ci

METHODS = ("naive", "corag", "corag_rel", "corag_all")


def _requests(examples, n: int, seed: int):
  """Per question: (candidate ids into the pool, gold mask) for N documents."""
  pool_of = []
  for e, ex in enumerate(examples):
    pool_of.append([(e, j) for j in range(len(ex.passages))])
  flat = [x for xs in pool_of for x in xs]
  rng = np.random.default_rng(seed)
  out = []
  for e, ex in enumerate(examples):
    own = pool_of[e]
    others = [x for x in flat if x[0] != e]
    extra = max(n - len(own), 0)
    pick = rng.choice(len(others), size=min(extra, len(others)), replace=False)
    ids = own + [others[i] for i in pick]
    ids = [ids[i] for i in rng.permutation(len(ids))]
    out.append(ids)
  return out


def run(sets, *, limit: int, sizes, budget: int, seed: int = 0, methods=METHODS) -> dict:
  enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
  pipe = jaxsel.Pipeline(enc, method="corag")
  tok = pipe.tokenizer
  report = {}
  for name in sets:
    examples = qa_sets.load_set(name, limit=limit)
    texts = {(e, j): t for e, ex in enumerate(examples) for j, t in enumerate(ex.texts())}
    keys = list(texts)
    emb = pipe.embed([texts[k] for k in keys], "passage")
    row = {k: i for i, k in enumerate(keys)}
    costs = tok.count([texts[k] for k in keys])
    qemb = pipe.embed([ex.question for ex in examples], "query")
    for n in sizes:
      reqs = _requests(examples, n, seed)
      for m in methods:
        if m == "corag_all" and n > 250:
          continue
        p = pipe.replace(method="naive" if m == "naive" else "corag",
                         search_width=4096 if m == "corag_all" else 128)
        width_lib.HOP_SOURCES = 0 if m == "corag_rel" else 3
        gold_all, answer, secs = [], [], 0.0
        for e, (ex, ids) in enumerate(zip(examples, reqs)):
          ps = [jaxsel.Passage(text=texts[k], start=0, end=len(texts[k]), doc=d,
                               tokens=int(costs[row[k]]), title=examples[k[0]].titles[k[1]] or None)
                for d, k in enumerate(ids)]
          t0 = time.perf_counter()
          res = p.select(ex.question, ps, budget=budget, embeddings=emb[[row[k] for k in ids]],
                         query_embeddings=qemb[e:e + 1])
          secs += time.perf_counter() - t0
          picked = {ids[int(i)] for i in res.indices}
          gold = [(e, j) for j, g in enumerate(ex.gold) if g]
          gold_all.append(float(all(g in picked for g in gold)))
          ctx = " ".join(texts[ids[int(i)]] for i in res.indices).lower()
          answer.append(float(any(a.lower() in ctx for a in ex.answers if a)))
        report[(name, n, m)] = (np.asarray(gold_all), np.asarray(answer), secs / len(examples))
        width_lib.HOP_SOURCES = 3
      print(f"\n{name} ({len(examples)} questions), budget {budget}")
      _table(report, name, sizes, methods)
  return report


def _table(report, name, sizes, methods):
  print("| N | method | gold recall | Δ vs naive (95% CI) | answer in context | Δ vs naive | s / request |")
  print("|---:|---|---:|---|---:|---|---:|")
  for n in sizes:
    base = report.get((name, n, "naive"))
    for m in methods:
      if (name, n, m) not in report:
        continue
      g, a, s = report[(name, n, m)]
      dg = "" if m == "naive" else fmt_ci(ci(g, base[0]))
      da = "" if m == "naive" else fmt_ci(ci(a, base[1]))
      print(f"| {n} | {m} | {100 * g.mean():.1f} | {dg} | {100 * a.mean():.1f} | {da} | {s:.3f} |")


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sets", default="hotpot_test,2wiki")
  ap.add_argument("--limit", type=int, default=100)
  ap.add_argument("--sizes", default="10,100,250,1000")
  ap.add_argument("--budget", type=int, default=256)
  ap.add_argument("--methods", default=",".join(METHODS))
  args = ap.parse_args(argv)
  run(args.sets.split(","), limit=args.limit, sizes=[int(x) for x in args.sizes.split(",")],
      budget=args.budget, methods=args.methods.split(","))


if __name__ == "__main__":
  main()
