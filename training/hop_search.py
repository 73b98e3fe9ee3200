"""CORAG over whole-paragraph `Features` (`training/hop_features.py`), batched, for sweeps.

Shape legend: B questions of a batch, N candidates (padded), D embedding dimension.

`select(features, scorer, encoder=..., budget=...)` is `Pipeline.select_many` with CORAG (the
registry scorer or a builder `(request) -> scorer`, the relevance top-up) over many questions
at once, and `naive` is NaiveRAG (relevance order, skip
what no longer fits). Picks are candidate indices in order. Metrics: strict joint
recall (every gold paragraph picked; a paragraph is one candidate here) and recall.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

import jaxsel


def pad_batch(feats: Sequence, n: int) -> dict:
  """Host arrays of a batch, every question padded to `n` candidates."""
  b, d = len(feats), feats[0].emb.shape[1]
  out = {"query": np.zeros((b, 1, d), np.float32), "emb": np.zeros((b, n, d), np.float32),
         "costs": np.zeros((b, n), np.float32),
         "valid": np.zeros((b, n), bool), "links": np.zeros((b, n, n), np.float32),
         "mentioned": np.zeros((b, n), np.float32), "entities": np.zeros((b, n, n), np.float32),
         "groups": np.tile(np.arange(n, dtype=np.int32), (b, 1)),
         "overlap": np.zeros((b, n), np.float32), "covered": np.zeros((b, n, n), np.float32),
         "shared": np.zeros((b, n, n), np.float32)}
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
    out["overlap"][r, :m] = f.signals.overlap
    out["covered"][r, :m, :m] = f.signals.covered
    out["shared"][r, :m, :m] = f.signals.shared
  return out


def request_of(x: dict) -> jaxsel.registry.Request:
  """The `jaxsel.registry.Request` of one padded question of `pad_batch` (as the Pipeline builds it)."""
  return jaxsel.registry.request(x["query"], x["emb"], costs=x["costs"], links=x["links"],
                         mentioned=x["mentioned"], entities=x["entities"], groups=x["groups"],
                         valid=x["valid"], overlap=x["overlap"], covered=x["covered"],
                         shared=x["shared"])


def select(feats: Sequence, scorer, *, encoder, budget: float, iterations: int = 15,
           exploration: float = 2.0, cost_penalty: float = 0.2, top_up: bool = True) -> list:
  """CORAG picks (candidate indices in order) of every question, by `Pipeline.select_many`
  (so each equals `select`'s: the same padding, request, scorer, search and top-up) over the
  questions' whole-paragraph `Passage`s. `encoder` is the `CachedEncoder` the features were
  embedded with (`hop_features.encoder_for`), so nothing is embedded again; `scorer` is a
  registry name or a builder `(request) -> scorer`."""
  pipe = jaxsel.Pipeline(encoder, method="corag", corag_scorer=scorer, iterations=iterations,
                         exploration=exploration, cost_penalty=cost_penalty, top_up=top_up)
  results = pipe.select_many([(f.example.question, f.passages) for f in feats], budget=budget)
  return [[f.passages.index(p) for p in r.passages] for f, r in zip(feats, results)]


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
