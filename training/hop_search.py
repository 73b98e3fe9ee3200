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


def pad_batch(feats: Sequence, n: int):
  """A batch of questions padded to `n` candidates, by the Pipeline's own padding
  (`jaxsel.contrib.registry.pad_batch`: one query each, the passage embeddings for similarity too)."""
  return jaxsel.contrib.registry.pad_batch(
      [(f.query[None], f.emb, f.emb, f.costs, f.signals) for f in feats], n=n, q=1)


def select(feats: Sequence, scorer, *, encoder, budget: float, iterations: int = 15,
           exploration: float = 2.0, cost_penalty: float = 0.2, top_up: bool = True) -> list:
  """CORAG picks (candidate indices in order) of every question, by `Pipeline.select_many`
  (so each equals `select`'s: the same padding, request, scorer, search and top-up) over the
  questions' whole-paragraph `Passage`s. `encoder` is the `CachedEncoder` the features were
  embedded with (`hop_features.encoder_for`), so nothing is embedded again; `scorer` is a
  registry name or a builder `(request) -> scorer`."""
  pipe = jaxsel.Pipeline(encoder, method="corag", corag_scorer=scorer, iterations=iterations,
                         exploration=exploration, cost_penalty=cost_penalty, top_up=top_up)
  results = pipe.select_many([(f.example.question, f.passages) for f in feats], budget=budget,
                             granularity="passage")
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
