"""Monotone submodular objectives as pure pytrees.

Shape legend: Q queries, N candidates (= items to cover), M a block of candidates.

Every objective is a frozen pytree dataclass (`jaxsel._pytree`) whose array fields are leaves, so a
whole objective passes through `jax.jit` and `jax.vmap` (a batch of objectives is the
same class with a leading axis on every leaf). The interface mirrors optax's
`(init, update)` pairs:

* `init()` -> state: the incremental state of the empty set;
* `gains(state, idx=None)` -> `[N]` (or `[M]` for `idx` `[M]`): marginal gains
  `f(S + j) - f(S)` of every candidate (or of a block), in one pass over the data;
* `update(state, j)` -> state after adding candidate `j`;
* `state_value(state)` -> `f(S)`; `value(selected)` -> `f` of any bool mask `[N]`.

Similarities must be non-negative: with negative entries these functions are neither
monotone nor submodular. Use `nonnegative` (or `cosine_similarity`, which clips by default).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsel import _checks, _native, _pytree

Array = jax.Array

_NEG_FIX = ("Make them non-negative first, e.g. `jaxsel.nonnegative(x, method='clip')`, or "
            "build them with `jaxsel.cosine_similarity` (clips by default).")


def nonnegative(x, *, method: str = "clip") -> Array:
  """Maps similarities to non-negative values, as the submodular guarantee needs.

  Methods:
    * ``"clip"`` (the default): ``max(x, 0)``. Positive similarities keep their value,
      so relevance × similarity products and saturation thresholds stay in cosine units,
      and anti-correlated items count as unrelated rather than as slightly related.
    * ``"shift"``: ``(x + 1) / 2``, maps cosines from ``[-1, 1]`` to ``[0, 1]``. Keeps the
      order of all pairs, but every pair then looks at least half similar.
    * ``"minmax"``: ``(x - min) / (max - min)`` over the whole array. Scale-free, but a value
      then depends on every other entry of the matrix.
    * ``"square"``: ``x ** 2``, the similarity apricot uses for ``metric="cosine"``.
  """
  x = jnp.asarray(x)
  if method == "clip":
    return jnp.maximum(x, 0)
  if method == "shift":
    return (x + 1) / 2
  if method == "minmax":
    lo, hi = jnp.min(x), jnp.max(x)
    return (x - lo) / jnp.where(hi > lo, hi - lo, 1)
  if method == "square":
    return x * x
  raise ValueError(f"Unknown `method` {method!r}; use one of 'clip', 'shift', 'minmax', 'square'.")


def cosine_similarity(a, b=None, *, nonneg: Optional[str] = "clip", eps: float = 1e-12) -> Array:
  """Cosine similarity between the rows of `a` `[..., N, D]` and of `b` `[..., M, D]`.

  With `b=None` it is `a` against itself, `[..., N, N]`. `nonneg` is passed to
  `nonnegative` as its method (default ``"clip"``); ``None`` keeps raw cosines in ``[-1, 1]``.
  """
  a = _checks.as_float_array(a, "a")
  if a.ndim < 2:
    raise ValueError(f"`a` must be [..., N, D] (rows are vectors), got shape {a.shape}.")
  _checks.check_finite(a, "a")
  if b is None:
    b = a
  else:
    b = _checks.as_float_array(b, "b")
    if b.ndim < 2 or b.shape[-1] != a.shape[-1]:
      raise ValueError(f"`b` must be [..., M, {a.shape[-1]}] to match `a`'s dimension, got {b.shape}.")
    _checks.check_finite(b, "b")
  out_shape = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-2])
  _checks.check_fits(out_shape, jnp.result_type(a, b), 1 if nonneg is None else 2,
                     "The similarity matrix")
  an = a / jnp.maximum(jnp.linalg.norm(a, axis=-1, keepdims=True), eps)
  bn = b / jnp.maximum(jnp.linalg.norm(b, axis=-1, keepdims=True), eps)
  sim = jnp.einsum("...nd,...md->...nm", an, bn, precision=jax.lax.Precision.HIGHEST)
  return sim if nonneg is None else nonnegative(sim, method=nonneg)


class CoverState(NamedTuple):
  """Incremental state of facility location / coverage."""
  cover: Array  # [Q, N] max_{j in S} r_qj * s_ij (0 for the empty set)


class SaturationState(NamedTuple):
  """Incremental state of saturated coverage."""
  best: Array  # [N] max_{j in S} s_ij (0 for the empty set)


_GATHER_MIN_N = 5000  # on CPU, rows at least this long are gathered into a block, not streamed


def _explicitly_sharded(x) -> bool:
  """Whether `x` lives on a mesh with explicit axes (`jax.sharding.AxisType.Explicit`), where
  a custom call would gather the batch onto one device; the XLA path keeps it sharded."""
  mesh = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
  return jax.sharding.AxisType.Explicit in tuple(getattr(mesh, "axis_types", None) or ())


def _native_applies(sim_t: Array) -> bool:
  """Whether the C++ kernels of `csrc/greedy.cc` serve this matrix: CPU, float32/64, not on
  a mesh with explicit axes (use `jaxsel.sharded_greedy` there: inside its `shard_map` each
  device runs the kernel on its own problems), and the kernel built."""
  return (jax.default_backend() == "cpu" and sim_t.dtype in (jnp.float32, jnp.float64)
          and not _explicitly_sharded(sim_t)
          and _native.load("greedy", {"jaxsel_cover_gains": "JaxselCoverGains",
                                      "jaxsel_cover_greedy": "JaxselCoverGreedy"}) is not None)


def _native_cover_gains(sim_t: Array, cover: Array, relevance: Optional[Array],
                        idx: Optional[Array]) -> Optional[Array]:
  """Facility-location gains from the C++ kernel (`csrc/greedy.cc`), or None where it does
  not apply: not on CPU, not float32/float64, or the kernel is off or failed to build.

  The kernel reduces each row `Σ_q Σ_i relu(r_qj s_ji − c_qi)` on XLA's thread pool, both
  cores on a 2-core machine, where XLA's own reduce fusion runs single-threaded at about
  1.8 G elements/s (bench/README.md, "Greedy")."""
  if not _native_applies(sim_t):
    return None
  if idx is None:  # every row; rows may be a block [M, N] of candidates (jaxsel.large)
    idx = jnp.arange(sim_t.shape[-2], dtype=jnp.int32)
  idx = idx.astype(jnp.int32)
  weighted = relevance is not None
  w = jnp.take(relevance, idx, axis=-1) if weighted else jnp.ones((1, idx.shape[-1]), sim_t.dtype)  # [Q, M]
  return _cover_gains_call(weighted, sim_t, cover.astype(sim_t.dtype), w.astype(sim_t.dtype), idx)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cover_gains_call(weighted: bool, sim_t, cover, w, idx):
  call = jax.ffi.ffi_call("jaxsel_cover_gains", jax.ShapeDtypeStruct(idx.shape, sim_t.dtype),
                          vmap_method="expand_dims")
  return call(sim_t, cover, w, idx, weighted=weighted)


def _cover_row_gains(rows: Array, r: Optional[Array], cover: Array) -> Array:
  """Facility-location gains `[M]` of candidate rows `[M, N]` with weights `r` `[Q, M]` (None:
  coverage) against `cover` `[Q, N]`, in XLA: the XLA path's gains, and what the kernel's
  reverse-mode derivative is taken from."""
  if r is None:
    # Reduce along the contiguous (item) axis: one streaming pass over the rows.
    return jnp.sum(jax.nn.relu(rows - cover[0]), axis=-1)
  if r.shape[0] == 1:  # one query: a plain [M, N] row reduction, which vectorises best
    return jnp.sum(jax.nn.relu(r[0][:, None] * rows - cover[0]), axis=-1)
  return jnp.sum(jax.nn.relu(r.T[:, :, None] * rows[:, None, :] - cover[None]), axis=(-2, -1))


def _cover_gains_fwd(weighted, sim_t, cover, w, idx):
  return _cover_gains_call(weighted, sim_t, cover, w, idx), (sim_t, cover, w, idx)


def _cover_gains_bwd(weighted, res, g):
  sim_t, cover, w, idx = res
  _, vjp = jax.vjp(lambda s, c, ww: _cover_row_gains(jnp.take(s, idx, axis=-2), ww if weighted else None, c),
                   sim_t, cover, w)
  return (*vjp(g), None)


_cover_gains_call.defvjp(_cover_gains_fwd, _cover_gains_bwd)


def _block_gains(row_gains, sim_t: Array, relevance: Optional[Array], idx: Array) -> Array:
  """Gains `[M]` of the candidates `idx` `[M]` from `row_gains(rows [M, N], r [Q, M] | None)`.

  Accelerators, and CPUs for rows of at least `_GATHER_MIN_N` entries, reduce a gathered
  `[M, N]` block, which XLA spreads over the cores. Shorter rows on CPU are streamed one at a
  time (`lax.map` of a dynamic row slice), which costs less than gathering them. Measured on
  an idle 2-core CPU, lazy greedy with k = 100: N = 4000, streamed 0.055 s / gathered 0.066 s;
  N = 6000, 0.147 / 0.125 s; N = 10000, 0.387 / 0.29 s (bench/README.md)."""
  if jax.default_backend() != "cpu" or sim_t.shape[-1] >= _GATHER_MIN_N:
    r = None if relevance is None else jnp.take(relevance, idx, axis=-1)
    return row_gains(jnp.take(sim_t, idx, axis=0), r)

  def one(j):
    row = lax.dynamic_index_in_dim(sim_t, j, keepdims=True)  # [1, N]
    r = None if relevance is None else lax.dynamic_index_in_dim(relevance, j, axis=-1, keepdims=True)
    return row_gains(row, r)[0]

  return lax.map(one, idx)


@_pytree.dataclass
class FacilityLocation:
  """`f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`; coverage is the case `Q = 1, r = 1`.

  Build it with `jaxsel.facility_location` or `jaxsel.coverage`.
  """
  sim_t: Array  # [N, N] candidate-major: sim_t[j, i] = s_ij, zero on invalid rows/columns
  relevance: Optional[Array]  # [Q, N] r_qj (zero on invalid j), or None for coverage
  valid: Array  # [N] bool

  @property
  def num_candidates(self) -> int:
    return self.sim_t.shape[-1]

  def init(self) -> CoverState:
    q = 1 if self.relevance is None else self.relevance.shape[-2]
    return CoverState(jnp.zeros((q, self.num_candidates), self.sim_t.dtype))

  def gains(self, state: CoverState, idx: Optional[Array] = None) -> Array:
    row_gains = lambda rows, r: _cover_row_gains(rows, r, state.cover)
    native = _native_cover_gains(self.sim_t, state.cover, self.relevance, idx)
    if native is not None:
      return native
    if idx is None:
      return row_gains(self.sim_t, self.relevance)
    return _block_gains(row_gains, self.sim_t, self.relevance, idx)

  def update(self, state: CoverState, j: Array) -> CoverState:
    row = self.sim_t[j]  # [N]
    contrib = row[None] if self.relevance is None else self.relevance[:, j, None] * row[None]
    return CoverState(jnp.maximum(state.cover, contrib))

  def state_value(self, state: CoverState) -> Array:
    return jnp.sum(state.cover)

  def value(self, selected: Array) -> Array:
    """`f` of a bool mask `[N]`; invalid candidates in the mask are ignored."""
    sel = jnp.asarray(selected, bool) & self.valid
    r = jnp.ones((1, self.num_candidates), self.sim_t.dtype) if self.relevance is None else self.relevance
    contrib = jnp.where(sel[None, :, None], r[:, :, None] * self.sim_t[None], 0)  # [Q, N(j), N(i)]
    return jnp.sum(jnp.max(contrib, axis=1, initial=0))


@_pytree.dataclass
class SaturatedCoverage:
  """`f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`: item i needs only r_qi of coverage.

  Build it with `jaxsel.saturated_coverage`.
  """
  sim_t: Array  # [N, N] candidate-major, zero on invalid rows/columns
  relevance: Array  # [Q, N] r_qi, the saturation level of item i (zero on invalid i)
  valid: Array  # [N] bool

  @property
  def num_candidates(self) -> int:
    return self.sim_t.shape[-1]

  def init(self) -> SaturationState:
    return SaturationState(jnp.zeros((self.num_candidates,), self.sim_t.dtype))

  def gains(self, state: SaturationState, idx: Optional[Array] = None) -> Array:
    capped = jnp.minimum(self.relevance, state.best[None])  # [Q, N]

    def row_gains(rows, _):  # rows [M, N]
      return jnp.sum(
          jax.nn.relu(jnp.minimum(self.relevance[None], rows[:, None, :]) - capped[None]), axis=(-2, -1))

    if idx is None:
      return row_gains(self.sim_t, None)
    return _block_gains(row_gains, self.sim_t, None, idx)

  def update(self, state: SaturationState, j: Array) -> SaturationState:
    return SaturationState(jnp.maximum(state.best, self.sim_t[j]))

  def state_value(self, state: SaturationState) -> Array:
    return jnp.sum(jnp.minimum(self.relevance, state.best[None]))

  def value(self, selected: Array) -> Array:
    sel = jnp.asarray(selected, bool) & self.valid
    best = jnp.max(jnp.where(sel[:, None], self.sim_t, 0), axis=0, initial=0)
    return self.state_value(SaturationState(best))


_HOST_BLOCK = 512  # rows per block of the host-side transpose (cache-sized tiles)


def _host_candidate_major(sim: np.ndarray, valid: Optional[np.ndarray], dtype: np.dtype) -> Array:
  """`sim` `[..., N, N]` (NumPy, item-major) as a candidate-major device array, zeroed on
  invalid rows and columns, in one host copy.

  On the CPU backend the transpose is written tile by tile into a 64-byte aligned buffer,
  which `jax.device_put` then shares instead of copying: at N = 10000 that is one 0.3 s
  pass instead of a device copy plus an XLA transpose (about 1.5 s together). `dtype` is the
  device dtype (`_checks.host_float_dtype`)."""
  n = sim.shape[-1]
  out = _checks.aligned_empty(sim.shape, dtype)
  with np.errstate(over="ignore"):  # a float64 value beyond float32 is caught just below
    for i in range(0, n, _HOST_BLOCK):
      out[..., :, i:i + _HOST_BLOCK] = np.swapaxes(sim[..., i:i + _HOST_BLOCK, :], -1, -2)
  if dtype != sim.dtype:  # float64 → float32 without x64: a huge finite value may become inf
    _checks.check_finite(out, "similarity (as float32)")
  if valid is not None and not valid.all():
    np.multiply(out, valid[..., :, None], out=out)  # in place, broadcast: no [N, N] mask
    np.multiply(out, valid[..., None, :], out=out)
  return jax.device_put(out)


def _prepare(similarity, relevance, valid, *, need_relevance: bool):
  """Validates inputs; returns candidate-major similarity, [.., Q, N] relevance and mask."""
  on_host = isinstance(similarity, np.ndarray) and jax.default_backend() == "cpu"
  if on_host:  # checks and transpose on the host: no device copy of the untransposed matrix
    host_dtype = _checks.host_float_dtype(similarity, "similarity")
    sim = similarity
  else:
    sim = _checks.as_float_array(similarity, "similarity")
  if sim.ndim < 2 or sim.shape[-1] != sim.shape[-2]:
    raise ValueError(
        f"`similarity` must be square, [N, N] (or [..., N, N] for a batch), got shape {sim.shape}.")
  n = sim.shape[-1]
  batch = sim.shape[:-2]
  # The candidate-major copy (and, on the device, the masked one) must fit.
  _checks.check_fits(sim.shape, host_dtype if on_host else sim.dtype,
                     1 + (not on_host and valid is not None),
                     "The candidate-major copy of `similarity`")
  if not (on_host and sim.size and _checks._min_max_ok(sim, 0)):  # one min/max answers both
    _checks.check_finite(sim, "similarity")
    _checks.check_nonnegative(sim, "similarity", _NEG_FIX)
  v = _checks.check_valid(valid, n, batch_shape=batch)
  rel = None
  if relevance is None:
    if need_relevance:
      raise TypeError("`relevance` is required: [Q, N] query–candidate relevance, or [N] for one query.")
  else:
    rel = _checks.as_float_array(relevance, "relevance")
    if rel.ndim == sim.ndim - 1:
      rel = rel[..., None, :]
    if rel.ndim != sim.ndim or rel.shape[-1] != n or rel.shape[:-2] != batch:
      raise ValueError(
          f"`relevance` must be [Q, {n}] or [{n}] (with the same leading batch axes as "
          f"`similarity` {sim.shape}), got {jnp.shape(relevance)}.")
    _checks.check_finite(rel, "relevance")
    _checks.check_nonnegative(rel, "relevance", _NEG_FIX)
  if on_host:
    sim_t = _host_candidate_major(sim, None if valid is None else np.asarray(v), host_dtype)
  else:
    sim_t = jnp.swapaxes(sim, -1, -2)
    if valid is not None:
      sim_t = jnp.where(v[..., :, None] & v[..., None, :], sim_t, 0)
  if rel is not None:
    rel = rel.astype(sim_t.dtype)
    if valid is not None:
      rel = jnp.where(v[..., None, :], rel, 0)
  return sim_t, rel, v


def facility_location(similarity, relevance=None, *, valid=None) -> FacilityLocation:
  """Multi-query facility location `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`.

  Args:
    similarity: `[N, N]` non-negative, `s_ij` = how well candidate j represents item i
      (rows are the covered items, columns the candidates; symmetric for cosine).
    relevance: `[Q, N]` (or `[N]`) non-negative query–candidate relevance `r_qj`;
      `None` gives plain coverage.
    valid: bool `[N]`; padded candidates are never selected and never counted.
  Leading batch axes `[B, ...]` on every argument give a batch of objectives for `vmap`.
  """
  sim_t, rel, v = _prepare(similarity, relevance, valid, need_relevance=False)
  return FacilityLocation(sim_t=sim_t, relevance=rel, valid=v)


def coverage(similarity, *, valid=None) -> FacilityLocation:
  """Text selection: `f(S) = Σ_i max_{j∈S} sim_ij`. `similarity` `[N, N]`, `valid` `[N]`."""
  return facility_location(similarity, None, valid=valid)


def saturated_coverage(similarity, relevance, *, valid=None) -> SaturatedCoverage:
  """Saturated coverage `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`.

  Args:
    similarity: `[N, N]` non-negative passage–passage similarity.
    relevance: `[Q, N]` (or `[N]`) non-negative; item i is worth at most `r_qi` to query q,
      so once an item is covered that well, more of it adds nothing.
    valid: bool `[N]`.
  """
  sim_t, rel, v = _prepare(similarity, relevance, valid, need_relevance=True)
  return SaturatedCoverage(sim_t=sim_t, relevance=rel, valid=v)
