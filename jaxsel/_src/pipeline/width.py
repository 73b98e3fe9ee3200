"""The CORAG search's width: which candidates of a large request the tree search runs over.

Shape legend: Q queries, N candidates, D embedding dimension, W the search width.

The learned second-hop scorer values ordered pairs (`scorers.hops`): its features, the text
signals (`bridge`, plain Python) and the search's tree grow with the square of the candidates
it sees, while a reranking request holds up to 1,000 documents and a sentence request
thousands of sentences. A request of more than `width` candidates (`PipelineConfig.
search_width`) is therefore searched over `width` of them: the pinned, then the best by a
cheap first pass (`first_pass`), and the search's answer is topped up from all of them
(`solve._top_up`, `granularity.fill`). A request of at most `width` candidates is searched
over all of them, as before; the search's memory and time then no longer grow with N beyond
the request's `[N, D]` embeddings and `[N, N]` similarity.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

# Reformulated-relevance rows: the first pass's second-hop ranking looks from this many of the
# most relevant candidates.
HOP_SOURCES = 3


def _unit(x: np.ndarray) -> np.ndarray:
  """Rows of `x` scaled to unit length (by their largest entry first: no overflow or
  underflow of the norm); zero rows stay zero."""
  x = np.asarray(x, np.float64)
  top = np.max(np.abs(x), axis=-1, keepdims=True)
  x = x / np.where(top > 0, top, 1.0)
  norm = np.linalg.norm(x, axis=-1, keepdims=True)
  return x / np.where(norm > 0, norm, 1.0)


def first_pass(query_emb: np.ndarray, passage_emb: np.ndarray, sym_emb: np.ndarray, *,
               valid: Optional[np.ndarray] = None, hops: int = HOP_SOURCES) -> np.ndarray:
  """`[N]` int64: every candidate, best first, for the search's width.

  Two rankings, interleaved (each candidate once): relevance `r_j = max_q cos(q, p_j)`
  (clipped at 0), and the reformulated relevance from the `hops` most relevant candidates i,
  `max_i (r_j + s_ij) / sqrt(2 + 2 r_i)` (`hops.reformulated_relevance`: the relevance of j to
  the query moved towards i), so a second hop that does not resemble the question still
  reaches the search. `hops=0`: relevance alone. Invalid candidates come last. Ties go to
  the lower index."""
  p = _unit(passage_emb)
  r = np.clip(_unit(query_emb) @ p.T, 0, None).max(axis=0) if len(query_emb) else np.zeros(len(p))
  n = len(r)
  ok = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  r = np.where(ok, r, -np.inf)
  by_rel = np.argsort(-r, kind="stable")
  if hops <= 0 or n < 2:
    return by_rel
  src = by_rel[:min(hops, n)]
  s = _unit(sym_emb)
  sim = np.clip(s[src] @ s.T, 0, None)  # [H, N]
  r0 = np.where(ok, r, 0.0)
  r2 = (r0[None, :] + sim) / np.sqrt(2.0 + 2.0 * r0[src])[:, None]
  r2[np.arange(len(src)), src] = -np.inf  # not from itself
  hop = np.where(ok, r2.max(axis=0), -np.inf)
  by_hop = np.argsort(-hop, kind="stable")
  both = np.empty(2 * n, np.int64)
  both[0::2], both[1::2] = by_rel, by_hop
  _, first = np.unique(both, return_index=True)
  return both[np.sort(first)]


def searched(query_emb, passage_emb, sym_emb, *, width: int, pinned=(),
             skip: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
  """`[W']` int32 the candidates a CORAG search of `width` runs over, in candidate order (the
  pinned first, in their order): the pinned, then the best by `first_pass` that are not to be
  skipped (`skip` `[N]`: repeated texts) — or None when the request has at most `width`
  candidates (the search runs over all of them)."""
  n = len(passage_emb)
  if n <= width:
    return None
  pinned = [int(i) for i in pinned]
  ok = None if skip is None else ~np.asarray(skip, bool)
  order = first_pass(query_emb, passage_emb, sym_emb, valid=ok, hops=HOP_SOURCES)
  taken = set(pinned)
  rest = [int(i) for i in order if i not in taken and (ok is None or ok[i])]
  return np.asarray(pinned + sorted(rest[:max(width - len(pinned), 0)]), np.int32)
