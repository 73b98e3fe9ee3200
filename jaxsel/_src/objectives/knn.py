"""Sparse kNN objectives: facility location and saturated coverage on a kNN similarity graph,
for N in the hundreds of thousands, and the exact blocked kNN graph.

Shape legend: N candidates (= items to cover), D embedding dimension, Q queries,
M a block of candidates, m neighbours kept per candidate.

Candidate j keeps only its `m` most similar items, `neighbors` `[N, m]` and `similarities`
`[N, m]`, built by an exact blocked top-m (`knn_graph`) or taken from a vector index; gains
are gathers over `[N, m]` and an update is a scatter-max, so memory is `O(N·m)`. Pairs outside
the graph count as similarity 0; with `m = N` the objective equals the dense one. The selection
is exact for the graph it is given.
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from jaxsel._src import checks, pytree
from jaxsel._src.numerics import NEGATIVE_FIX, nonnegative
from jaxsel._src.objectives.blocks import (Blocked, check_block, check_nonneg_method,
                                           checked_relevance, map_blocks, unit_embeddings)
from jaxsel._src.objectives.dense import CoverState, SaturationState

Array = jax.Array


class KnnGraph(NamedTuple):
  """Sparse similarity: candidate j covers items `neighbors[j]` with `similarities[j]`."""
  neighbors: Array  # [N, m] int32 item ids (-1 or any id where the similarity is 0: none)
  similarities: Array  # [N, m] non-negative s_{i j} for i = neighbors[j, t]



@pytree.dataclass
class KnnFacilityLocation(Blocked):
  """Facility location on a sparse kNN similarity: `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`
  with `s_ij = 0` unless i is one of j's `m` neighbours. Build it with
  `knn_facility_location`."""
  neighbors: Array  # [N, m] int32
  similarities: Array  # [N, m] zero on invalid candidates and items
  relevance: Optional[Array]  # [Q, N] r_qj, zero on invalid j
  valid: Array  # [N] bool
  block: int = pytree.field(static=True, default=4096)
  # Items covered (= N); static because no item-side array holds it once candidates are sharded.
  num_items: int = pytree.field(static=True, default=0)
  candidate_axes: ClassVar = {"neighbors": 0, "similarities": 0, "relevance": 1, "valid": 0}

  def init(self) -> CoverState:
    q = 1 if self.relevance is None else self.relevance.shape[-2]
    return CoverState(jnp.zeros((q, self.num_items), self.similarities.dtype))

  def _contrib(self, ids):  # [M, Q, m] what candidate ids would give its neighbours
    s = jnp.take(self.similarities, ids, axis=0)[:, None, :]
    if self.relevance is None:
      return s
    return jnp.take(self.relevance, ids, axis=-1).T[:, :, None] * s

  def _block_gains(self, state, ids):
    nb = jnp.take(self.neighbors, ids, axis=0)  # [M, m]
    cur = jnp.moveaxis(state.cover[:, nb], 0, 1)  # [M, Q, m]
    return jnp.sum(jax.nn.relu(self._contrib(ids) - cur), axis=(-2, -1))

  def _block_update(self, state, ids, take):
    c = jnp.where(take[:, None, None], self._contrib(ids), 0)  # [M, Q, m]
    nb = jnp.take(self.neighbors, ids, axis=0)
    return CoverState(state.cover.at[:, nb].max(jnp.moveaxis(c, 1, 0)))

  def update(self, state, j):
    return self._block_update(state, jnp.reshape(j, (1,)), jnp.ones((1,), bool))

  def state_value(self, state) -> Array:
    return jnp.sum(state.cover)


@pytree.dataclass
class KnnSaturatedCoverage(Blocked):
  """Saturated coverage on a sparse kNN similarity: `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`.
  Build it with `knn_saturated_coverage`."""
  neighbors: Array  # [N, m] int32
  similarities: Array  # [N, m]
  relevance: Array  # [Q, N] r_qi (item side), zero on invalid i
  valid: Array  # [N] bool
  block: int = pytree.field(static=True, default=4096)
  candidate_axes: ClassVar = {"neighbors": 0, "similarities": 0, "relevance": None, "valid": 0}

  def init(self) -> SaturationState:
    return SaturationState(jnp.zeros((self.relevance.shape[-1],), self.similarities.dtype))

  def _block_gains(self, state, ids):
    nb = jnp.take(self.neighbors, ids, axis=0)  # [M, m]
    s = jnp.take(self.similarities, ids, axis=0)  # [M, m]
    r = self.relevance[:, nb]  # [Q, M, m]
    before = jnp.minimum(r, state.best[nb][None])
    return jnp.sum(jax.nn.relu(jnp.minimum(r, s[None]) - before), axis=(0, 2))

  def _block_update(self, state, ids, take):
    s = jnp.where(take[:, None], jnp.take(self.similarities, ids, axis=0), 0)
    nb = jnp.take(self.neighbors, ids, axis=0)
    return SaturationState(state.best.at[nb].max(s))

  def update(self, state, j):
    return self._block_update(state, jnp.reshape(j, (1,)), jnp.ones((1,), bool))

  def state_value(self, state) -> Array:
    return jnp.sum(jnp.minimum(self.relevance, state.best[None]))



def _knn_block(cand, items, item_valid, *, m, nonneg):
  s = nonnegative(jnp.einsum("md,nd->mn", cand, items, precision=lax.Precision.HIGHEST),
                  method=nonneg)
  top, ids = lax.top_k(jnp.where(item_valid[None], s, -jnp.inf), m)
  return ids.astype(jnp.int32), jnp.where(top > -jnp.inf, top, 0)


def knn_graph(embeddings, *, m: int, valid=None, nonneg: str = "clip",
              block: int = 1024) -> KnnGraph:
  """Exact top-`m` cosine neighbours of every candidate, computed in blocks of `block`
  rows (memory `O(N·m + block·N)`).

  Returns:
    `KnnGraph(neighbors [N, m] int32, similarities [N, m])`: `similarities[j, t]` is the
    non-negative similarity (`nonneg` method) of candidate j to item `neighbors[j, t]`,
    sorted descending; a candidate is its own first neighbour. Invalid items are never
    neighbours (similarity 0 fills the slots when fewer than `m` are valid) and invalid
    candidates have all similarities 0.
  """
  check_nonneg_method(nonneg)
  block = check_block(block)
  e = unit_embeddings(embeddings)
  n = e.shape[0]
  v = checks.check_valid(valid, n)
  if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= max(n, 1):
    raise ValueError(f"`m` (neighbours per candidate) must be an int in [1, N={n}], got {m!r}.")
  return _knn_graph(e, v, m=min(m, n), nonneg=nonneg, block=block)


@functools.partial(jax.jit, static_argnames=("m", "nonneg", "block"))
def _knn_graph(e, v, *, m, nonneg, block):
  def one(ids):
    return _knn_block(jnp.take(e, ids, axis=0), e, v, m=m, nonneg=nonneg)
  nb, s = map_blocks(one, jnp.arange(e.shape[0], dtype=jnp.int32), block)
  return KnnGraph(nb, jnp.where(v[:, None], s, 0))


def _graph(graph_or_embeddings, m, valid, nonneg, block):
  """A checked `KnnGraph` (given, or built from embeddings) and the `[N]` valid mask."""
  block = check_block(block)
  g = graph_or_embeddings
  if not isinstance(g, KnnGraph):
    if m is None:
      raise TypeError("`m` (neighbours per candidate) is required when building the graph "
                      "from embeddings; or pass a `jaxsel.KnnGraph`.")
    g = knn_graph(g, m=m, valid=valid, nonneg=nonneg, block=block)
    return g, checks.check_valid(valid, g.neighbors.shape[0]), block
  if m is not None and m != g.neighbors.shape[-1]:
    raise ValueError(f"`m`={m} disagrees with the graph's {g.neighbors.shape[-1]} neighbours; "
                     "leave `m` out when passing a graph.")
  nb = jnp.asarray(g.neighbors)
  if not jnp.issubdtype(nb.dtype, jnp.integer):
    raise TypeError(f"`neighbors` must hold integer item ids, got dtype {nb.dtype}.")
  if nb.ndim != 2:
    raise ValueError(f"`neighbors` must be [N, m], got shape {nb.shape}.")
  n = nb.shape[0]
  if checks.is_concrete(nb) and nb.size and (int(nb.min()) < -1 or int(nb.max()) >= n):
    raise ValueError(f"`neighbors` must be item ids in [0, N={n}) or -1 (no neighbour), got "
                     f"range [{int(nb.min())}, {int(nb.max())}].")
  s = checks.as_float_array(g.similarities, "similarities")
  if s.shape != nb.shape:
    raise ValueError(f"`similarities` must have the shape of `neighbors` {nb.shape}, got {s.shape}.")
  # -1 marks an empty slot (an index's missing hit, score -inf): similarity 0 to item 0.
  s = jnp.where(nb >= 0, s, 0)
  nb = jnp.maximum(nb, 0)
  checks.check_finite(s, "similarities")
  checks.check_nonnegative(s, "similarities", NEGATIVE_FIX)
  v = checks.check_valid(valid, n)
  s = s.astype(jnp.promote_types(s.dtype, jnp.float32))
  s = jnp.where(v[:, None] & v[nb.astype(jnp.int32)], s, 0)
  return KnnGraph(nb.astype(jnp.int32), s), v, block


def knn_facility_location(graph_or_embeddings, relevance=None, *, m: Optional[int] = None,
                          valid=None, nonneg: str = "clip", block: int = 1024
                          ) -> KnnFacilityLocation:
  """Facility location on a sparse kNN similarity, for N in the hundreds of thousands.

  Args:
    graph_or_embeddings: a `KnnGraph` (`neighbors` `[N, m]`, `similarities` `[N, m]`, e.g.
      from a vector index's top-m search of its own vectors; id -1 = no neighbour) or
      embeddings `[N, D]`, from which the exact top-`m` cosine graph is built (`knn_graph`).
    relevance: `[Q, N]` (or `[N]`) non-negative query–candidate relevance; `None` gives
      coverage.
    m: neighbours per candidate, needed with embeddings. `m = N` is the dense objective.
    valid: bool `[N]`.
    nonneg: as in `jaxsel.nonnegative` (``"clip"``, ``"shift"``, ``"square"``), used when
      building the graph.
    block: rows per block when building the graph and when evaluating gains.
  """
  g, v, block = _graph(graph_or_embeddings, m, valid, nonneg, block)
  rel = checked_relevance(relevance, g.neighbors.shape[0], v, g.similarities.dtype, required=False)
  return KnnFacilityLocation(neighbors=g.neighbors, similarities=g.similarities,
                             relevance=rel, valid=v, block=block, num_items=v.shape[-1])


def knn_saturated_coverage(graph_or_embeddings, relevance, *, m: Optional[int] = None,
                           valid=None, nonneg: str = "clip", block: int = 1024
                           ) -> KnnSaturatedCoverage:
  """Saturated coverage on a sparse kNN similarity; arguments as in
  `knn_facility_location`, with `relevance` `[Q, N]` (the saturation levels) required."""
  g, v, block = _graph(graph_or_embeddings, m, valid, nonneg, block)
  rel = checked_relevance(relevance, g.neighbors.shape[0], v, g.similarities.dtype, required=True)
  return KnnSaturatedCoverage(neighbors=g.neighbors, similarities=g.similarities,
                              relevance=rel, valid=v, block=block)
