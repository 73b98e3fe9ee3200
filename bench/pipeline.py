"""Per-query latency of `Pipeline.select` and the throughput of `Pipeline.select_many`.

    .venv/bin/python bench/pipeline.py [--requests 64] [--repeats 3] [--methods default,corag,...]
        [--granularity passage,sentence] [--documents] [--fresh-counts]

Requests: the first `--requests` MuSiQue training questions (/work/shared/data/train/musique),
each with its 20 paragraphs as `jaxsel.Passage`s (`"title: paragraph"`, `Passage.title` set,
costs in all-MiniLM-L6-v2 word pieces), budget 256 tokens, the offline all-MiniLM-L6-v2.
Embeddings are cached (the Pipeline's cache holds every request's) and every program is
compiled before timing (one untimed pass), so the rows time the selection itself.

Rows, in one process:

* `select`: the median (and 90th percentile) latency of one `pipe.select(question, passages,
  budget=256)`, over the requests, and their total;
* `select_many`: one `pipe.select_many(requests, budget=256)` over all of them (best of
  `--repeats`), its time per request, and the throughput ratio: the `select` total over the
  `select_many` time. Its picks are compared with `select`'s (the batched search can order a
  float tie differently: the column says in how many requests, and whether the sets agree).

Methods: the default (`Pipeline(enc)`: CORAG with the learned scorer for a question),
`facility_location` (greedy), NaiveRAG (`naive`), `corag` with the title-bridge scorer
(`corag_scorer="bridge"`), and the learned scorer alone: `corag` with one iteration (the root's
children scored in one batched call, then the relevance top-up), the scorer's cost without the
search. Each at every `--granularity` (`"sentence"`: the 20 paragraphs cut into ~100 sentence
candidates). `--documents` gives the paragraphs as plain strings (the Pipeline splits each
into passages and counts them, as for `select(question, [document, ...])`). `--fresh-counts`
adds, per row, the `select` median with the token-count cache emptied before each call (what
a request with texts never seen before pays for counting).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import jaxsel  # noqa: E402
from jaxsel._src.scorers import hops  # noqa: E402

DATA = Path("/work/shared/data/train/musique/train.jsonl")
BUDGET = 256
CANDIDATES = 20
METHODS = {
    "default": ("default (`corag`, `learned_hops`)", {}),
    "facility_location": ("`facility_location` (greedy)", {"method": "facility_location"}),
    "naive": ("NaiveRAG (`naive`)", {"method": "naive"}),
    "corag": ("`corag`, `corag_scorer=\"bridge\"`", {"method": "corag", "corag_scorer": "bridge"}),
    "scorer": ("learned scorer alone (`learned_hops`, 1 iteration)",
               {"method": "corag", "corag_scorer": "learned_hops", "iterations": 1}),
}


def requests(n: int, counter, documents: bool = False) -> list:
  """(question, [20 Passages]) of the first `n` MuSiQue questions with 20 paragraphs
  (`documents`: their texts as plain strings, which the Pipeline splits and counts)."""
  out = []
  with DATA.open() as f:
    for line in f:
      row = json.loads(line)
      paras = row["paragraphs"]
      if len(paras) != CANDIDATES:
        continue
      texts = [f"{p['title']}: {p['paragraph_text']}" for p in paras]
      costs = counter.count(texts)
      passages = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(c), title=p["title"])
                  for i, (t, c, p) in enumerate(zip(texts, costs, paras))]
      out.append((row["question"], texts if documents else passages))
      if len(out) == n:
        break
  return out


def bench(pipe, reqs, repeats: int, granularity: str, fresh_counts: bool) -> dict:
  kw = {"budget": BUDGET, "granularity": granularity}
  for q, ps in reqs:  # embeds (cached) and compiles
    pipe.select(q, ps, **kw)
  pipe.select_many(reqs, **kw)
  latencies, singles = [], []
  for q, ps in reqs:
    t = time.perf_counter()
    singles.append(pipe.select(q, ps, **kw))
    latencies.append(time.perf_counter() - t)
  fresh = []
  for q, ps in reqs if fresh_counts else ():
    pipe.tokenizer.clear_cache()
    t = time.perf_counter()
    pipe.select(q, ps, **kw)
    fresh.append(time.perf_counter() - t)
  many = []
  for _ in range(repeats):
    t = time.perf_counter()
    batch = pipe.select_many(reqs, **kw)
    many.append(time.perf_counter() - t)
  differ = [i for i, (a, b) in enumerate(zip(singles, batch))
            if not np.array_equal(a.indices, b.indices)]
  sets = all(set(singles[i].indices) == set(batch[i].indices) for i in differ)
  same = "yes" if not differ else (f"order differs in {len(differ)} of {len(reqs)}"
                                   f"{' (same sets)' if sets else ''}")
  total, best = sum(latencies), min(many)
  return {"median_ms": 1e3 * statistics.median(latencies),
          "fresh_ms": 1e3 * statistics.median(fresh) if fresh else None,
          "p90_ms": 1e3 * float(np.percentile(latencies, 90)), "total_s": total,
          "many_s": best, "many_ms_per": 1e3 * best / len(reqs), "ratio": total / best,
          "same": same}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--requests", type=int, default=64)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--methods", default=",".join(METHODS))
  p.add_argument("--granularity", default="passage", help="passage, sentence or both")
  p.add_argument("--documents", action="store_true",
                 help="the paragraphs as plain strings (split and counted by the Pipeline)")
  p.add_argument("--fresh-counts", action="store_true",
                 help="also time select with the token-count cache emptied before each call")
  args = p.parse_args(argv)
  # Loaded outside any trace: a first load inside the compiled solve caches traced arrays
  # that a later trace then leaks (hops.load_hop_params is an lru_cache).
  hops.load_hop_params()
  enc = jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")
  base = jaxsel.Pipeline(enc, progress=False, cache_size=4 * args.requests + 8)
  reqs = requests(args.requests, base.tokenizer, args.documents)
  load = [os.getloadavg()[0]]
  print(f"{len(reqs)} requests x {CANDIDATES} candidates, budget {BUDGET}; load average "
        f"{load[0]:.1f} on {os.cpu_count()} cores", file=sys.stderr)
  rows = []
  for name in args.methods.split(","):
    for granularity in args.granularity.split(","):
      label, settings = METHODS[name]
      r = bench(base.replace(**settings), reqs, args.repeats, granularity, args.fresh_counts)
      rows.append((label, granularity, r))
      print(f"{name} {granularity}: {r}", file=sys.stderr)
  load.append(os.getloadavg()[0])
  fresh = " | `select` median ms, counts not cached" if args.fresh_counts else ""
  print(f"| method ({len(reqs)} requests, {CANDIDATES} paragraphs, {BUDGET} tokens) "
        f"| granularity | `select` median ms (p90){fresh} "
        "| `select_many`, s (ms per request) | throughput ratio | same picks |")
  print(f"|---|---|---:{'|---:' if fresh else ''}|---:|---:|---|")
  for label, granularity, r in rows:
    cell = f" | {r['fresh_ms']:.1f}" if fresh else ""
    print(f"| {label} | {granularity} | {r['median_ms']:.1f} ({r['p90_ms']:.1f}){cell} "
          f"| {r['many_s']:.3f} ({r['many_ms_per']:.1f}) "
          f"| {r['ratio']:.1f}x | {r['same']} |")
  print(f"\nload average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end, on "
        f"{os.cpu_count()} cores")
  return 0


if __name__ == "__main__":
  sys.exit(main())
