"""CORAG over whole-paragraph `Features` (`training/hop_features.py`), batched, for sweeps.

Shape legend: B questions of a batch, N candidates (padded), D embedding dimension.

`select(features, scorer, budget=...)` runs the Pipeline's compiled CORAG solve (the registry
scorer or a builder `(request) -> scorer`, the relevance top-up) for many questions at once
under one `jax.vmap` per candidate bucket, and `naive` is NaiveRAG (relevance order, skip
what no longer fits). Picks are candidate indices in order. Metrics: strict joint
recall (every gold paragraph picked; a paragraph is one candidate here) and recall.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxsel._src import methods
from jaxsel._src.pipeline import solve as solve_lib


def pad_batch(feats: Sequence, n: int) -> dict:
  """Host arrays of a batch, every question padded to `n` candidates."""
  b, d = len(feats), feats[0].emb.shape[1]
  out = {"query": np.zeros((b, 1, d), np.float32), "emb": np.zeros((b, n, d), np.float32),
         "costs": np.zeros((b, n), np.float32),
         "valid": np.zeros((b, n), bool), "links": np.zeros((b, n, n), np.float32),
         "mentioned": np.zeros((b, n), np.float32), "entities": np.zeros((b, n, n), np.float32),
         "groups": np.tile(np.arange(n, dtype=np.int32), (b, 1))}
  for r, f in enumerate(feats):
    m = len(f.passages)
    out["query"][r, 0] = f.query
    out["emb"][r, :m] = f.emb
    out["costs"][r, :m] = f.costs
    out["valid"][r, :m] = True
    out["links"][r, :m, :m] = f.signals.links
    out["mentioned"][r, :m] = f.signals.mentioned
    out["entities"][r, :m, :m] = f.signals.entities
    out["groups"][r, :m] = f.signals.groups
  return out


def request_of(x: dict) -> methods.Request:
  """The `methods.Request` of one padded question of `pad_batch` (as the Pipeline builds it)."""
  return methods.request(x["query"], x["emb"], costs=x["costs"], links=x["links"],
                         mentioned=x["mentioned"], entities=x["entities"], groups=x["groups"],
                         valid=x["valid"])


def select(feats: Sequence, scorer, *, budget: float, iterations: int = 15,
           exploration: float = 2.0, cost_penalty: float = 0.2, top_up: bool = True) -> list:
  """CORAG picks (candidate indices in order) of every question: the Pipeline's compiled solve
  (`pipeline.solve`), `jax.vmap`-ed over the questions of each candidate bucket."""
  out = [None] * len(feats)
  by_n = {}
  for i, f in enumerate(feats):
    by_n.setdefault(solve_lib.bucket(len(f.passages)), []).append(i)
  settings = solve_lib.Settings.of(budget=budget, min_gain=None, discount=0.9,
                                   exploration=exploration, cost_penalty=cost_penalty, diversity=0.3)
  for n, rows in sorted(by_n.items()):
    inputs = solve_lib.stack([solve_lib.pad_inputs(feats[i].query[None], feats[i].emb, feats[i].emb,
                                                   feats[i].costs, feats[i].signals, n=n, q=1)
                              for i in rows])
    cfg = solve_lib.SolveConfig(method="corag", k=n, depth=n, scorer=scorer, iterations=iterations,
                                top_up=top_up)
    res = solve_lib.run(inputs, solve_lib.stack([settings] * len(rows)), cfg, batched=True)
    for r, i in enumerate(rows):
      out[i] = [int(j) for j in res.order[r][:int(res.count[r])]]
  return out


def naive(feats: Sequence, *, budget: float) -> list:
  """NaiveRAG: by decreasing relevance (ties to the lower index), skipping what does not fit."""
  out = []
  for f in feats:
    rel = np.clip(f.emb @ f.query, 0, None)
    order = np.argsort(-rel, kind="stable")
    spent, picks = 0.0, []
    for j in order:
      if spent + f.passages[j].tokens <= budget:
        picks.append(int(j))
        spent += f.passages[j].tokens
    out.append(picks)
  return out


def strict_joint(feats: Sequence, picks: Sequence) -> np.ndarray:
  """`[Q]` 1.0 where every gold paragraph is picked (whole: one candidate per paragraph)."""
  return np.asarray([float(all(j in set(p) for j in np.nonzero(f.gold)[0]))
                     for f, p in zip(feats, picks)])


def recall(feats: Sequence, picks: Sequence) -> np.ndarray:
  return np.asarray([np.mean([j in set(p) for j in np.nonzero(f.gold)[0]]) for f, p in zip(feats, picks)])


def oracle(feats: Sequence, *, budget: float) -> np.ndarray:
  """Whole gold paragraphs, cheapest first, while they fit: 1.0 when all fit."""
  return np.asarray([float(np.sort(f.costs[f.gold]).sum() <= budget) for f in feats])
