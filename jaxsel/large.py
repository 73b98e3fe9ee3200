"""Objectives for ground sets too large for a dense `[N, N]` similarity matrix.

Shape legend: N candidates (= items to cover), D embedding dimension, Q queries,
M a block of candidates, m neighbours kept per candidate.

A dense `[N, N]` float32 matrix is 40 GB at N = 100,000. Two forms avoid it, each with the
protocol of `jaxsel.objectives` (`num_candidates`, `valid`, `init()`, `gains(state, idx)`,
`update(state, j)`, `state_value(state)`, `value(selected)`), so `jaxsel.greedy` (dense,
lazy, stochastic, budgeted) runs on them unchanged:

* **matrix-free** (`facility_location_from_embeddings`, `saturated_coverage_from_embeddings`):
  only the unit-norm embeddings `[N, D]` are stored; similarity rows are recomputed for
  blocks of `block` candidates at a time (`lax.map`), so memory is `O(N·D + block·Q·N)` and
  the result equals the dense objective built from `jaxsel.cosine_similarity` exactly
  (up to float rounding);
* **sparse kNN** (`knn_facility_location`, `knn_saturated_coverage`): candidate j keeps only
  its `m` most similar items, `neighbors` `[N, m]` and `similarities` `[N, m]`, built by an
  exact blocked top-m (`knn_graph`) or taken from a vector index; gains are gathers over
  `[N, m]` and an update is a scatter-max, so memory is `O(N·m)`. Pairs outside the graph
  count as similarity 0; with `m = N` the objective equals the dense one.

Invalid (padded) candidates are never picked and invalid items are never counted, as in
the dense objectives. Leading batch axes are not supported by these constructors: build
one objective per instance and stack them (`jax.tree.map(jnp.stack, ...)`) for `vmap`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax

from jaxsel import _checks, _pytree
from jaxsel.objectives import (
    CoverState,
    FacilityLocation,
    SaturatedCoverage,
    SaturationState,
    _NEG_FIX,
    nonnegative,
)

Array = jax.Array

# `nonnegative` methods that act entry by entry; "minmax" needs the min and max of the
# whole N×N matrix, which is what these forms never build.
_ELEMENTWISE = ("clip", "shift", "square")


class KnnGraph(NamedTuple):
  """Sparse similarity: candidate j covers items `neighbors[j]` with `similarities[j]`."""
  neighbors: Array  # [N, m] int32 item ids (-1 or any id where the similarity is 0: none)
  similarities: Array  # [N, m] non-negative s_{i j} for i = neighbors[j, t]


def _map_blocks(fn, idx: Array, block: int) -> Array:
  """`fn(idx)` evaluated on blocks of at most `block` ids (`lax.map`): peak memory is one
  block's worth of rows, not `len(idx)`'s."""
  m = idx.shape[0]
  if m <= block:
    return fn(idx)
  nb = -(-m // block)
  # Padding ids are 0, a real row; their results are dropped.
  padded = jnp.pad(idx, (0, nb * block - m)).reshape(nb, block)
  out = lax.map(fn, padded)
  return jax.tree.map(lambda x: x.reshape((nb * block,) + x.shape[2:])[:m], out)


class _Blocked:
  """`num_candidates`, `gains` and `value` in terms of per-block pieces.

  Subclasses define `init`, `update`, `state_value`, `_block_gains(state, ids)` -> `[M]`
  and `_block_update(state, ids, take)`: the state after adding the candidates `ids` `[M]`
  where `take` `[M]` is true.
  """
  block: int

  @property
  def num_candidates(self) -> int:
    return self.valid.shape[-1]

  def gains(self, state, idx: Optional[Array] = None) -> Array:
    """Marginal gains `[N]`, or `[M]` for the candidates `idx` `[M]`."""
    if idx is None:
      idx = jnp.arange(self.num_candidates, dtype=jnp.int32)
    return _map_blocks(lambda ids: self._block_gains(state, ids), idx, self.block)

  def value(self, selected: Array) -> Array:
    """`f` of a bool mask `[N]`; invalid candidates in the mask are ignored."""
    n = self.num_candidates
    take = jnp.asarray(selected, bool) & self.valid
    if n == 0:
      return self.state_value(self.init())
    nb = -(-n // self.block)
    ids = jnp.arange(nb * self.block, dtype=jnp.int32)
    take = jnp.pad(take, (0, nb * self.block - n)).reshape(nb, self.block)
    ids = jnp.minimum(ids, n - 1).reshape(nb, self.block)

    def body(state, blk):
      return self._block_update(state, *blk), None

    state, _ = lax.scan(body, self.init(), (ids, take))
    return self.state_value(state)


def _max_state(state, new, take: Array):
  """Elementwise max of `state` and, over the rows of `new` `[M, ...]` where `take`, `new`."""
  def one(s, x):
    t = take.reshape(take.shape + (1,) * (x.ndim - 1))
    return jnp.maximum(s, jnp.max(jnp.where(t, x, 0), axis=0, initial=0))
  return jax.tree.map(one, state, new)


@_pytree.dataclass
class _EmbeddingObjective(_Blocked):
  candidates: Array  # [N, D] unit-norm rows (candidate side; sharded by candidate parallelism)
  items: Array  # [N, D] unit-norm rows (item side; the same array as `candidates` when built)
  item_valid: Array  # [N] bool, items that count
  relevance: Optional[Array]  # [Q, N]
  valid: Array  # [N] bool, candidates that may be picked
  block: int = _pytree.field(static=True, default=256)
  nonneg: str = _pytree.field(static=True, default="clip")

  def rows(self, idx: Array) -> Array:
    """Similarity rows `[M, N]` of the candidates `idx` `[M]`: `s_ij` for item i, the same
    numbers as `cosine_similarity(embeddings)[:, idx].T`, zero for invalid pairs."""
    c = jnp.take(self.candidates, idx, axis=0)
    s = jnp.einsum("md,nd->mn", c, self.items, precision=lax.Precision.HIGHEST)
    s = nonnegative(s, method=self.nonneg)
    ok = jnp.take(self.valid, idx)[:, None] & self.item_valid[None, :]
    return jnp.where(ok, s, 0)

  def _dense(self, idx: Array):
    """The dense objective restricted to candidates `idx`: rows `[M, N]` computed now."""
    raise NotImplementedError

  def _block_gains(self, state, ids):
    return self._dense(ids).gains(state)

  def _block_update(self, state, ids, take):
    d = self._dense(ids)
    return _max_state(state, jax.vmap(lambda t: d.update(state, t))(jnp.arange(ids.shape[0])), take)

  def update(self, state, j: Array):
    return self._dense(jnp.reshape(j, (1,))).update(state, 0)

  def state_value(self, state) -> Array:
    return self._dense(jnp.zeros((0,), jnp.int32)).state_value(state)


@_pytree.dataclass
class EmbeddingFacilityLocation(_EmbeddingObjective):
  """Matrix-free `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij` with `s` the (non-negative) cosine
  similarity of the embeddings. Build it with `facility_location_from_embeddings`."""

  def init(self) -> CoverState:
    q = 1 if self.relevance is None else self.relevance.shape[-2]
    return CoverState(jnp.zeros((q, self.items.shape[-2]), self.items.dtype))

  def _dense(self, idx):
    r = None if self.relevance is None else jnp.take(self.relevance, idx, axis=-1)
    return FacilityLocation(sim_t=self.rows(idx), relevance=r, valid=jnp.take(self.valid, idx))


@_pytree.dataclass
class EmbeddingSaturatedCoverage(_EmbeddingObjective):
  """Matrix-free `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`. Build it with
  `saturated_coverage_from_embeddings`."""

  def init(self) -> SaturationState:
    return SaturationState(jnp.zeros((self.items.shape[-2],), self.items.dtype))

  def _dense(self, idx):
    return SaturatedCoverage(sim_t=self.rows(idx), relevance=self.relevance,
                             valid=jnp.take(self.valid, idx))


@_pytree.dataclass
class KnnFacilityLocation(_Blocked):
  """Facility location on a sparse kNN similarity: `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`
  with `s_ij = 0` unless i is one of j's `m` neighbours. Build it with
  `knn_facility_location`."""
  neighbors: Array  # [N, m] int32
  similarities: Array  # [N, m] zero on invalid candidates and items
  relevance: Optional[Array]  # [Q, N] r_qj, zero on invalid j
  valid: Array  # [N] bool
  block: int = _pytree.field(static=True, default=4096)
  # Items covered (= N); static because no item-side array holds it once candidates are sharded.
  num_items: int = _pytree.field(static=True, default=0)

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


@_pytree.dataclass
class KnnSaturatedCoverage(_Blocked):
  """Saturated coverage on a sparse kNN similarity: `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`.
  Build it with `knn_saturated_coverage`."""
  neighbors: Array  # [N, m] int32
  similarities: Array  # [N, m]
  relevance: Array  # [Q, N] r_qi (item side), zero on invalid i
  valid: Array  # [N] bool
  block: int = _pytree.field(static=True, default=4096)

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


# ---------------------------------------------------------------------------------------
# Constructors: validation at the boundary, before anything is compiled.


def _check_nonneg_method(nonneg: str) -> None:
  if nonneg not in _ELEMENTWISE:
    raise ValueError(
        f"`nonneg` must be one of {', '.join(map(repr, _ELEMENTWISE))} for a matrix-free or "
        f"kNN objective, got {nonneg!r} ('minmax' needs the whole N×N matrix; build it "
        "densely with `jaxsel.cosine_similarity` if it fits).")


def _check_block(block, name: str = "block") -> int:
  if isinstance(block, bool) or not isinstance(block, int) or block < 1:
    raise ValueError(f"`{name}` must be a positive int (candidates per block), got {block!r}.")
  return block


def _embeddings(embeddings, eps: float = 1e-12) -> Array:
  """Checked unit-norm `[N, D]` float embeddings (float32 or wider)."""
  e = _checks.as_float_array(embeddings, "embeddings")
  if e.ndim != 2:
    raise ValueError(
        f"`embeddings` must be [N, D] (one row per candidate), got shape {e.shape}; for a batch "
        "build one objective per instance and stack them.")
  _checks.check_finite(e, "embeddings")
  e = e.astype(jnp.promote_types(e.dtype, jnp.float32))
  return e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), eps)


def _relevance(relevance, n: int, valid: Array, dtype, *, required: bool) -> Optional[Array]:
  if relevance is None:
    if required:
      raise TypeError("`relevance` is required: [Q, N] query–candidate relevance, or [N] for one query.")
    return None
  r = _checks.as_float_array(relevance, "relevance")
  if r.ndim == 1:
    r = r[None]
  if r.ndim != 2 or r.shape[-1] != n:
    raise ValueError(f"`relevance` must be [Q, {n}] or [{n}], got shape {jnp.shape(relevance)}.")
  _checks.check_finite(r, "relevance")
  _checks.check_nonnegative(r, "relevance", _NEG_FIX)
  return jnp.where(valid[None], r.astype(dtype), 0)


def _from_embeddings(cls, embeddings, relevance, valid, nonneg, block, *, required):
  _check_nonneg_method(nonneg)
  block = _check_block(block)
  e = _embeddings(embeddings)
  v = _checks.check_valid(valid, e.shape[0])
  rel = _relevance(relevance, e.shape[0], v, e.dtype, required=required)
  return cls(candidates=e, items=e, item_valid=v, relevance=rel, valid=v, block=block,
             nonneg=nonneg)


def facility_location_from_embeddings(embeddings, relevance=None, *, valid=None,
                                      nonneg: str = "clip", block: int = 256
                                      ) -> EmbeddingFacilityLocation:
  """Matrix-free facility location on the cosine similarity of `embeddings` `[N, D]`.

  The same objective as `jaxsel.facility_location(jaxsel.cosine_similarity(embeddings,
  nonneg=nonneg), relevance, valid=valid)` without the `[N, N]` matrix: memory is
  `O(N·D + block·Q·N)`; each full gain pass costs `O(N²·D)` flops.

  Args:
    embeddings: `[N, D]` candidate embeddings (normalised here).
    relevance: `[Q, N]` (or `[N]`) non-negative query–candidate relevance; `None` gives
      coverage.
    valid: bool `[N]`.
    nonneg: how cosines become non-negative: ``"clip"`` (default), ``"shift"`` or
      ``"square"`` (see `jaxsel.nonnegative`).
    block: candidates whose similarity rows are in memory at once (`[block, Q, N]`).
  """
  return _from_embeddings(EmbeddingFacilityLocation, embeddings, relevance, valid, nonneg,
                          block, required=False)


def saturated_coverage_from_embeddings(embeddings, relevance, *, valid=None,
                                       nonneg: str = "clip", block: int = 256
                                       ) -> EmbeddingSaturatedCoverage:
  """Matrix-free saturated coverage: `jaxsel.saturated_coverage` on the cosine similarity
  of `embeddings` `[N, D]` without the `[N, N]` matrix. Arguments as in
  `facility_location_from_embeddings`; `relevance` `[Q, N]` is required."""
  return _from_embeddings(EmbeddingSaturatedCoverage, embeddings, relevance, valid, nonneg,
                          block, required=True)


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
  _check_nonneg_method(nonneg)
  block = _check_block(block)
  e = _embeddings(embeddings)
  n = e.shape[0]
  v = _checks.check_valid(valid, n)
  if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= max(n, 1):
    raise ValueError(f"`m` (neighbours per candidate) must be an int in [1, N={n}], got {m!r}.")
  return _knn_graph(e, v, m=min(m, n), nonneg=nonneg, block=block)


@functools.partial(jax.jit, static_argnames=("m", "nonneg", "block"))
def _knn_graph(e, v, *, m, nonneg, block):
  def one(ids):
    return _knn_block(jnp.take(e, ids, axis=0), e, v, m=m, nonneg=nonneg)
  nb, s = _map_blocks(one, jnp.arange(e.shape[0], dtype=jnp.int32), block)
  return KnnGraph(nb, jnp.where(v[:, None], s, 0))


def _graph(graph_or_embeddings, m, valid, nonneg, block):
  """A checked `KnnGraph` (given, or built from embeddings) and the `[N]` valid mask."""
  block = _check_block(block)
  g = graph_or_embeddings
  if not isinstance(g, KnnGraph):
    if m is None:
      raise TypeError("`m` (neighbours per candidate) is required when building the graph "
                      "from embeddings; or pass a `jaxsel.KnnGraph`.")
    g = knn_graph(g, m=m, valid=valid, nonneg=nonneg, block=block)
    return g, _checks.check_valid(valid, g.neighbors.shape[0]), block
  if m is not None and m != g.neighbors.shape[-1]:
    raise ValueError(f"`m`={m} disagrees with the graph's {g.neighbors.shape[-1]} neighbours; "
                     "leave `m` out when passing a graph.")
  nb = jnp.asarray(g.neighbors)
  if not jnp.issubdtype(nb.dtype, jnp.integer):
    raise TypeError(f"`neighbors` must hold integer item ids, got dtype {nb.dtype}.")
  if nb.ndim != 2:
    raise ValueError(f"`neighbors` must be [N, m], got shape {nb.shape}.")
  n = nb.shape[0]
  if _checks.is_concrete(nb) and nb.size and (int(nb.min()) < -1 or int(nb.max()) >= n):
    raise ValueError(f"`neighbors` must be item ids in [0, N={n}) or -1 (no neighbour), got "
                     f"range [{int(nb.min())}, {int(nb.max())}].")
  s = _checks.as_float_array(g.similarities, "similarities")
  if s.shape != nb.shape:
    raise ValueError(f"`similarities` must have the shape of `neighbors` {nb.shape}, got {s.shape}.")
  # -1 marks an empty slot (an index's missing hit, score -inf): similarity 0 to item 0.
  s = jnp.where(nb >= 0, s, 0)
  nb = jnp.maximum(nb, 0)
  _checks.check_finite(s, "similarities")
  _checks.check_nonnegative(s, "similarities", _NEG_FIX)
  v = _checks.check_valid(valid, n)
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
  rel = _relevance(relevance, g.neighbors.shape[0], v, g.similarities.dtype, required=False)
  return KnnFacilityLocation(neighbors=g.neighbors, similarities=g.similarities,
                             relevance=rel, valid=v, block=block, num_items=v.shape[-1])


def knn_saturated_coverage(graph_or_embeddings, relevance, *, m: Optional[int] = None,
                           valid=None, nonneg: str = "clip", block: int = 1024
                           ) -> KnnSaturatedCoverage:
  """Saturated coverage on a sparse kNN similarity; arguments as in
  `knn_facility_location`, with `relevance` `[Q, N]` (the saturation levels) required."""
  g, v, block = _graph(graph_or_embeddings, m, valid, nonneg, block)
  rel = _relevance(relevance, g.neighbors.shape[0], v, g.similarities.dtype, required=True)
  return KnnSaturatedCoverage(neighbors=g.neighbors, similarities=g.similarities,
                              relevance=rel, valid=v, block=block)
