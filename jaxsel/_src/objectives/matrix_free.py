"""Matrix-free objectives: facility location and saturated coverage on the cosine similarity
of embeddings, without the `[N, N]` matrix.

Shape legend: N candidates (= items to cover), D embedding dimension, Q queries,
M a block of candidates.

Only the unit-norm embeddings `[N, D]` are stored; similarity rows are recomputed for blocks
of `block` candidates at a time (`lax.map`), so memory is `O(N·D + block·Q·N)` and the result
equals the dense objective built from `jaxsel.cosine_similarity` (up to float rounding).
Each block is a dense objective restricted to those candidates, so the native gain kernel
serves it where `backend` allows. Dense and lazy greedy on the CPU go further where the
whole `[N, N]` similarity takes at most `max_dense_bytes`: they compute it once, candidate-major
(one XLA matrix product; no transpose, no input pass over a matrix), and run the native greedy
kernel on it, which re-reads a stored row for a fraction of the cost of recomputing it
(bench/greedy.py); larger problems, other methods and accelerators recompute rows. Leading batch axes are not supported by the constructors:
build one objective per instance and stack them (`jax.tree.map(jnp.stack, ...)`) for `vmap`.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel._src import checks, native, pytree
from jaxsel._src.numerics import nonnegative
from jaxsel._src.objectives import cover_kernel
from jaxsel._src.objectives.blocks import (Blocked, check_block, check_nonneg_method,
                                           checked_relevance, embeddings_shape, max_state,
                                           unit_embeddings)
from jaxsel._src.objectives.dense import CoverState, FacilityLocation, SaturatedCoverage, SaturationState

Array = jax.Array

# The default `max_dense_bytes`: N = 8192 in float32.
DENSE_GREEDY_BYTES = 256 << 20


@pytree.dataclass
class _EmbeddingObjective(Blocked):
  """The embeddings of both sides, and the dense objective of a block of candidates."""
  candidates: Array  # [N, D] unit-norm rows (candidate side; sharded by candidate parallelism)
  items: Array  # [N, D] unit-norm rows (item side; the same array as `candidates` when built)
  item_valid: Array  # [N] bool, items that count
  relevance: Optional[Array]  # [Q, N]
  valid: Array  # [N] bool, candidates that may be picked
  block: int = pytree.field(static=True, default=256)
  nonneg: str = pytree.field(static=True, default="clip")
  backend: str = pytree.field(static=True, default="auto")
  max_dense_bytes: int = pytree.field(static=True, default=DENSE_GREEDY_BYTES)

  def with_backend(self, backend: str):
    return self.replace(backend=backend)

  def fused_greedy(self, costs, budget, min_gain, *, k, lazy, ratio):
    """A whole dense or lazy greedy run in the native kernel on the similarity computed at
    once, where it takes at most `max_dense_bytes` (per problem, under `vmap` too); else None
    (greedy recomputes rows block by block)."""
    n, items = self.num_candidates, self.items.shape[-2]
    if not (k and n and n == items and n * items * self.items.dtype.itemsize <= self.max_dense_bytes
            and cover_kernel.applies(self.items, self.backend)):
      return None
    return self._dense(jnp.arange(n, dtype=jnp.int32)).fused_greedy(
        costs, budget, min_gain, k=k, lazy=lazy, ratio=ratio)

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
    return max_state(state, jax.vmap(lambda t: d.update(state, t))(jnp.arange(ids.shape[0])), take)

  def update(self, state, j: Array):
    return self._dense(jnp.reshape(j, (1,))).update(state, 0)

  def state_value(self, state) -> Array:
    return self._dense(jnp.zeros((0,), jnp.int32)).state_value(state)


@pytree.dataclass
class EmbeddingFacilityLocation(_EmbeddingObjective):
  """Matrix-free `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij` with `s` the (non-negative) cosine
  similarity of the embeddings. Build it with `facility_location_from_embeddings`."""
  candidate_axes: ClassVar = {"candidates": 0, "items": None, "item_valid": None,
                              "relevance": 1, "valid": 0}

  def init(self) -> CoverState:
    q = 1 if self.relevance is None else self.relevance.shape[-2]
    return CoverState(jnp.zeros((q, self.items.shape[-2]), self.items.dtype))

  def _dense(self, idx):
    r = None if self.relevance is None else jnp.take(self.relevance, idx, axis=-1)
    return FacilityLocation(sim_t=self.rows(idx), relevance=r, valid=jnp.take(self.valid, idx),
                            backend=self.backend)


@pytree.dataclass
class EmbeddingSaturatedCoverage(_EmbeddingObjective):
  """Matrix-free `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`. Build it with
  `saturated_coverage_from_embeddings`."""
  candidate_axes: ClassVar = {"candidates": 0, "items": None, "item_valid": None,
                              "relevance": None, "valid": 0}

  def init(self) -> SaturationState:
    return SaturationState(jnp.zeros((self.items.shape[-2],), self.items.dtype))

  def _dense(self, idx):
    return SaturatedCoverage(sim_t=self.rows(idx), relevance=self.relevance,
                             valid=jnp.take(self.valid, idx), backend=self.backend)


def _from_embeddings(cls, embeddings, relevance, valid, nonneg, block, backend, max_dense_bytes,
                     *, required):
  check_nonneg_method(nonneg)
  native.check_backend(backend)
  block = check_block(block)
  max_dense_bytes = checks.static_int(max_dense_bytes, "max_dense_bytes")
  # The size check reads shapes only: it runs before anything is normalised or compiled.
  (n, _), dtype = embeddings_shape(embeddings)
  q = np.shape(relevance)[0] if np.ndim(relevance) == 2 else 1
  itemsize = jax.dtypes.canonicalize_dtype(jnp.promote_types(dtype, jnp.float32)).itemsize
  checks.fits(2 * min(block, n) * q * n * itemsize, "block", block,  # a block's rows and gains
              what=f"the similarity rows of one block (`[block, Q, N]`, N={n:,})",
              fix="lower `block` (candidates whose similarity rows are in memory at once; "
              "the default is 256)")
  e = unit_embeddings(embeddings)
  v = checks.check_valid(valid, n)
  rel = checked_relevance(relevance, n, v, e.dtype, required=required)
  return cls(candidates=e, items=e, item_valid=v, relevance=rel, valid=v, block=block,
             nonneg=nonneg, backend=backend, max_dense_bytes=max_dense_bytes)


def facility_location_from_embeddings(embeddings, relevance=None, *, valid=None,
                                      nonneg: str = "clip", block: int = 256,
                                      backend: str = "auto",
                                      max_dense_bytes: int = DENSE_GREEDY_BYTES
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
    backend: where each block's gains are computed (as in `jaxsel.facility_location`).
    max_dense_bytes: dense and lazy `jaxsel.greedy` on the CPU compute the whole `[N, N]`
      similarity once, for the native greedy kernel, where it takes at most this many bytes
      (default 256 MiB, N = 8192 in float32; per problem under `vmap`); 0 never does.
      The fastest path from embeddings; the picks are those of the blocked path up to float
      rounding.
  """
  return _from_embeddings(EmbeddingFacilityLocation, embeddings, relevance, valid, nonneg,
                          block, backend, max_dense_bytes, required=False)


def saturated_coverage_from_embeddings(embeddings, relevance, *, valid=None,
                                       nonneg: str = "clip", block: int = 256,
                                       backend: str = "auto",
                                       max_dense_bytes: int = DENSE_GREEDY_BYTES
                                       ) -> EmbeddingSaturatedCoverage:
  """Matrix-free saturated coverage: `jaxsel.saturated_coverage` on the cosine similarity
  of `embeddings` `[N, D]` without the `[N, N]` matrix. Arguments as in
  `facility_location_from_embeddings`; `relevance` `[Q, N]` is required."""
  return _from_embeddings(EmbeddingSaturatedCoverage, embeddings, relevance, valid, nonneg,
                          block, backend, max_dense_bytes, required=True)
