"""Sparse kNN objectives: facility location and saturated coverage on a kNN similarity graph,
for N in the hundreds of thousands to millions, and `knn_graph`, which builds the graph.

Shape legend: N candidates (= items to cover), D embedding dimension, Q queries,
M a block of candidates, m neighbours kept per candidate.

Candidate j keeps only its `m` most similar items, `neighbors` `[N, m]` and `similarities`
`[N, m]`, built by `knn_graph` (exact: `knn_exact` on the host, `lax.top_k` blocks on a
device; approximate: faiss, `ann`) or taken from a vector index; gains are gathers over
`[N, m]` and an update is a scatter-max, so memory is `O(N·m)`. Pairs outside the graph count
as similarity 0; with `m = N` the objective equals the dense one. The selection is exact for
the graph it is given.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, pytree
from jaxsel._src.numerics import NEGATIVE_FIX, nonnegative
from jaxsel._src.objectives import ann, knn_exact
from jaxsel._src.objectives.blocks import (Blocked, check_block, check_nonneg_method,
                                           checked_relevance, embeddings_shape, map_blocks,
                                           unit_embeddings)
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



GRAPH_METHODS = ("exact", "ivf", "hnsw")
_PROGRESS_MIN_N = 20_000  # builds from here on take seconds: a bar by default


def knn_graph(embeddings, *, m: int, method: str = "exact", valid=None, nonneg: str = "clip",
              block: int = 2048, progress: Optional[bool] = None,
              options: Optional[Mapping[str, Any]] = None) -> KnnGraph:
  """The top-`m` cosine neighbours of every candidate.

  Args:
    embeddings: `[N, D]`, normalised here.
    m: neighbours per candidate, an int in `[1, N]`.
    method: ``"exact"`` (default), or an approximate index of faiss (``pip install
      'jaxsel[ann]'``): ``"ivf"`` (inverted lists over k-means cells, a few cells searched
      per item) or ``"hnsw"`` (a navigable small-world graph). Objectives built on an
      approximate graph are exact for that graph; bench/RESULTS.md ("Scale") has their recall
      and the value of their picks against the exact graph's.
    valid: bool `[N]`; invalid items are never neighbours, invalid candidates have none.
    nonneg: as in `jaxsel.nonnegative` (``"clip"``, ``"shift"``, ``"square"``), applied
      before ranking.
    block: tile side of the exact build: `block × block` tiles on the host, blocks of
      `block` rows against all N on an accelerator or under `jit`.
    progress: a tqdm bar over the build; None shows it from N = 20,000 on.
    options: settings of the approximate index (defaults in `jaxsel._src.objectives.ann`):
      ``"ivf"``: ``nlist``, ``nprobe``, ``train_size``, ``train_iters``; ``"hnsw"``: ``M``,
      ``ef_construction``, ``ef_search``.

  Returns:
    `KnnGraph(neighbors [N, m] int32, similarities [N, m])`: row j holds its neighbours by
    non-negative similarity (`nonneg`) descending, ties to the lowest index, so a candidate is
    its own first neighbour (unless it has duplicates of lower index). Slots beyond the valid
    items, and every slot of an invalid candidate, hold -1 with similarity 0.

  The exact graph, on CPU with concrete embeddings, multiplies each tile of the upper triangle
  of `E @ E.T` once with BLAS (half the `O(N²·D)` product) and keeps the entries reaching a
  row's running top-m threshold (`jaxsel._src.objectives.knn_exact`); on an accelerator or
  under `jit` it is `lax.top_k` over blocks of rows. Both are the exact top-m of the float32
  similarities with ties to the lowest index; their values differ by float32 rounding (the
  products are summed in different orders), so near-ties may order differently.
  """
  check_nonneg_method(nonneg)
  block = check_block(block)
  checks.choice(method, "method", GRAPH_METHODS)
  if options is not None and method == "exact":
    raise ValueError("`options` set an approximate index; the exact graph takes none.")
  if progress is not None and not isinstance(progress, bool):
    raise TypeError(f"`progress` must be True, False or None, got {progress!r}.")
  traced = not checks.is_concrete(embeddings) or not checks.is_concrete(valid)
  if traced or (method == "exact" and jax.default_backend() != "cpu"):
    if method != "exact":
      raise TypeError(f"`method={method!r}` builds an index on the host: it needs concrete "
                      "embeddings (call it outside `jit`).")
    (n, _), _ = embeddings_shape(embeddings)
    _check_m(m, n)  # from the shapes, before anything is normalised
    e = unit_embeddings(embeddings)
    return _knn_graph(e, checks.check_valid(valid, n), m=m, nonneg=nonneg, block=block)
  e = checks.as_host_float32(embeddings, "embeddings")
  if e.ndim != 2:
    unit_embeddings(e)  # raises the shared [N, D] error
  n = e.shape[0]
  _check_m(m, n)
  v = np.asarray(checks.check_valid(valid, n))
  ann_settings = None if method == "exact" else ann.settings(method, options, int(v.sum()))
  show = progress if progress is not None else n >= _PROGRESS_MIN_N
  ids = np.flatnonzero(v)
  if method == "exact":
    index, value = knn_exact.exact_top_m(e, ids, m, nonneg, tile=block, progress=show)
  else:
    index, value = ann.approximate_top_m(e, ids, m, nonneg, method=method, settings=ann_settings,
                                         progress=show)
  neighbors = np.full((n, m), -1, np.int32)
  similarities = np.zeros((n, m), np.float32)
  found = index >= 0
  neighbors[ids] = np.where(found, ids[np.maximum(index, 0)], -1)
  similarities[ids] = np.where(found, value, 0)
  return KnnGraph(jnp.asarray(neighbors), jnp.asarray(similarities))


def _check_m(m, n: int) -> None:
  if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= max(n, 1):
    raise ValueError(f"`m` (neighbours per candidate) must be an int in [1, N={n}], got {m!r}.")
  # The graph's ids and similarities [N, m], as built, as returned and on the device.
  checks.fits(24 * n * m, "m", m, what=f"a graph of N={n:,} × m neighbours",
              fix="lower `m` (neighbours per candidate; 10–50 usually suffice)")


def _knn_block(cand, items, item_valid, *, m, nonneg):
  s = nonnegative(jnp.einsum("md,nd->mn", cand, items, precision=lax.Precision.HIGHEST),
                  method=nonneg)
  top, ids = lax.top_k(jnp.where(item_valid[None], s, -jnp.inf), m)
  found = top > -jnp.inf
  return jnp.where(found, ids, -1).astype(jnp.int32), jnp.where(found, top, 0)


@functools.partial(jax.jit, static_argnames=("m", "nonneg", "block"))
def _knn_graph(e, v, *, m, nonneg, block):
  """The device build: blocks of `block` rows against all N, `lax.top_k` (ties: lowest index)."""
  def one(ids):
    return _knn_block(jnp.take(e, ids, axis=0), e, v, m=m, nonneg=nonneg)
  if e.shape[0] < m:  # fewer items than slots: -1 fills the rest
    e = jnp.pad(e, ((0, m - e.shape[0]), (0, 0)))
    nb, s = _knn_graph(e, jnp.pad(v, (0, m - v.shape[0])), m=m, nonneg=nonneg, block=block)
    return KnnGraph(nb[:v.shape[0]], s[:v.shape[0]])
  nb, s = map_blocks(one, jnp.arange(e.shape[0], dtype=jnp.int32), block)
  return KnnGraph(jnp.where(v[:, None], nb, -1), jnp.where(v[:, None], s, 0))


def _graph(graph_or_embeddings, m, valid, nonneg, block):
  """A checked `KnnGraph` (given, or built from embeddings) with ids in `[0, N)` (an empty
  slot: item 0 with similarity 0), and the `[N]` valid mask."""
  block = check_block(block)
  g = graph_or_embeddings
  if not isinstance(g, KnnGraph):
    if m is None:
      raise TypeError("`m` (neighbours per candidate) is required when building the graph "
                      "from embeddings; or pass a `jaxsel.KnnGraph`.")
    g = knn_graph(g, m=m, valid=valid, nonneg=nonneg)
  elif m is not None and m != np.shape(g.neighbors)[-1]:
    raise ValueError(f"`m`={m} disagrees with the graph's {np.shape(g.neighbors)[-1]} "
                     "neighbours; leave `m` out when passing a graph.")
  host = all(checks.is_concrete(x) for x in (g.neighbors, g.similarities, valid))
  xp = np if host else jnp
  nb = xp.asarray(g.neighbors)
  if not xp.issubdtype(nb.dtype, xp.integer):
    raise TypeError(f"`neighbors` must hold integer item ids, got dtype {nb.dtype}.")
  if nb.ndim != 2:
    raise ValueError(f"`neighbors` must be [N, m], got shape {nb.shape}.")
  n = nb.shape[0]
  if checks.is_concrete(nb) and nb.size and (int(nb.min()) < -1 or int(nb.max()) >= n):
    raise ValueError(f"`neighbors` must be item ids in [0, N={n}) or -1 (no neighbour), got "
                     f"range [{int(nb.min())}, {int(nb.max())}].")
  s = checks.as_float_array(g.similarities, "similarities")
  if s.shape != nb.shape:
    raise ValueError(f"`similarities` must have the shape of `neighbors` {nb.shape}, got "
                     f"{s.shape}.")
  v = checks.check_valid(valid, n)
  dtype = jnp.promote_types(s.dtype, jnp.float32)
  if host:  # NumPy: no device op compiled per shape, no device copies of N·m arrays
    s, v = np.asarray(s), np.asarray(v)
  # -1 marks an empty slot (an index's missing hit, score -inf): similarity 0 to item 0.
  s = xp.where(nb >= 0, s, 0)
  nb = xp.maximum(nb, 0).astype(xp.int32)
  checks.check_finite(s, "similarities")
  checks.check_nonnegative(s, "similarities", NEGATIVE_FIX)
  keep = v[:, None] if host and v.all() else v[:, None] & v[nb]
  s = xp.where(keep, s, 0).astype(dtype)
  return KnnGraph(jnp.asarray(nb), jnp.asarray(s)), jnp.asarray(v), block


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
    block: candidates per block when evaluating gains (the graph is built with
      `knn_graph`'s default tiles; build it yourself to choose them, or an approximate one).
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
