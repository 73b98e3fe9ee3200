"""Dense monotone submodular objectives: facility location, coverage, saturated coverage.

Shape legend: Q queries, N candidates (= items to cover), M a block of candidates.

Every objective implements `jaxsel.Objective` (`jaxsel._src.base`) as a frozen pytree whose
array fields are leaves, so a whole objective passes through `jax.jit` and `jax.vmap` (a batch
of objectives is the same class with a leading axis on every leaf). The interface mirrors
optax's `(init, update)` pairs:

* `init()` -> state: the incremental state of the empty set;
* `gains(state, idx=None)` -> `[N]` (or `[M]` for `idx` `[M]`): marginal gains
  `f(S + j) - f(S)` of every candidate (or of a block), in one pass over the data;
* `update(state, j)` -> state after adding candidate `j`;
* `state_value(state)` -> `f(S)`; `value(selected)` -> `f` of any bool mask `[N]`.

The similarity is stored candidate-major (`sim_t[j, i] = s_ij`), so a candidate's gain reads
one contiguous row. On the CPU the gains, and whole greedy runs (`fused_greedy`), go to the
native kernels where `backend` allows (their wrapper: `cover_kernel`); the arithmetic is
`rows` either way. `with_backend` and `fused_greedy` are the kernel hooks of
`base.KernelObjective`, which `greedy` tests for (the kNN objectives have none).

Similarities must be non-negative: with negative entries these functions are neither
monotone nor submodular. Use `nonnegative` (or `cosine_similarity`, which clips by default).
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import checks, native, pytree
from jaxsel._src.base import Objective, Selection
from jaxsel._src.numerics import NEGATIVE_FIX, check_fits
from jaxsel._src.objectives import cover_kernel, rows

Array = jax.Array


class CoverState(NamedTuple):
  """Incremental state of facility location / coverage."""
  cover: Array  # [Q, N] max_{j in S} r_qj * s_ij (0 for the empty set)


class SaturationState(NamedTuple):
  """Incremental state of saturated coverage."""
  best: Array  # [N] max_{j in S} s_ij (0 for the empty set)


class _Dense(Objective):
  """What the two dense objectives share: the candidate-major matrix and its backend."""

  @property
  def num_candidates(self) -> int:
    return self.sim_t.shape[-1]

  def with_backend(self, backend: str):
    return self.replace(backend=backend)

  def fused_greedy(self, costs, budget, min_gain, *, k, lazy, ratio) -> Optional[Selection]:
    n = self.num_candidates
    if not (k and n and self.sim_t.shape[-2] == n and cover_kernel.applies(self.sim_t, self.backend)):
      return None
    sim = self.sim_t
    if self.item_major_input:
      # `sim_t` is the constructor's transpose of a traced item-major input: transposing it
      # back folds the two away in XLA, so the kernel reads the input as it came (small
      # problems directly, larger ones transposed in cache) instead of XLA writing a copy.
      sim = jnp.swapaxes(sim, -1, -2)
    return cover_kernel.cover_greedy(
        sim, self.relevance, self.valid, costs, budget, min_gain, k=k, lazy=lazy,
        ratio=ratio, saturated=isinstance(self, SaturatedCoverage), item_major=self.item_major_input)


@pytree.dataclass
class FacilityLocation(_Dense):
  """`f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`; coverage is the case `Q = 1, r = 1`.

  Build it with `jaxsel.facility_location` or `jaxsel.coverage`.
  """
  sim_t: Array  # [N, N] candidate-major: sim_t[j, i] = s_ij, zero on invalid rows/columns
  relevance: Optional[Array]  # [Q, N] r_qj (zero on invalid j), or None for coverage
  valid: Array  # [N] bool
  backend: str = pytree.field(static=True, default="auto")
  # True when the constructor ran inside a trace and `sim_t` is its transpose of the item-major
  # input (a hint for the native kernel; `sim_t` is candidate-major either way).
  item_major_input: bool = pytree.field(static=True, default=False)
  candidate_axes: ClassVar = {"sim_t": 0, "relevance": 1, "valid": 0}

  def init(self) -> CoverState:
    q = 1 if self.relevance is None else self.relevance.shape[-2]
    return CoverState(jnp.zeros((q, self.num_candidates), self.sim_t.dtype))

  @pytree.jit_when_eager
  def gains(self, state: CoverState, idx: Optional[Array] = None) -> Array:
    if cover_kernel.applies(self.sim_t, self.backend):
      return cover_kernel.cover_gains(self.sim_t, state.cover, self.relevance, idx)
    row_gains = lambda r_rows, r: rows.cover_row_gains(r_rows, r, state.cover)
    if idx is None:
      return row_gains(self.sim_t, self.relevance)
    return rows.block_gains(row_gains, self.sim_t, self.relevance, idx)

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


@pytree.dataclass
class SaturatedCoverage(_Dense):
  """`f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`: item i needs only r_qi of coverage.

  Build it with `jaxsel.saturated_coverage`.
  """
  sim_t: Array  # [N, N] candidate-major, zero on invalid rows/columns
  relevance: Array  # [Q, N] r_qi, the saturation level of item i (zero on invalid i)
  valid: Array  # [N] bool
  backend: str = pytree.field(static=True, default="auto")
  # True when the constructor ran inside a trace and `sim_t` is its transpose of the item-major
  # input (a hint for the native kernel; `sim_t` is candidate-major either way).
  item_major_input: bool = pytree.field(static=True, default=False)
  candidate_axes: ClassVar = {"sim_t": 0, "relevance": None, "valid": 0}  # r is item-side

  def init(self) -> SaturationState:
    return SaturationState(jnp.zeros((self.num_candidates,), self.sim_t.dtype))

  @pytree.jit_when_eager
  def gains(self, state: SaturationState, idx: Optional[Array] = None) -> Array:
    row_gains = lambda r_rows, _: rows.saturated_row_gains(r_rows, self.relevance, state.best)
    if idx is None:
      return row_gains(self.sim_t, None)
    return rows.block_gains(row_gains, self.sim_t, None, idx)

  def update(self, state: SaturationState, j: Array) -> SaturationState:
    return SaturationState(jnp.maximum(state.best, self.sim_t[j]))

  def state_value(self, state: SaturationState) -> Array:
    return jnp.sum(jnp.minimum(self.relevance, state.best[None]))

  def value(self, selected: Array) -> Array:
    sel = jnp.asarray(selected, bool) & self.valid
    best = jnp.max(jnp.where(sel[:, None], self.sim_t, 0), axis=0, initial=0)
    return self.state_value(SaturationState(best))


_HOST_BLOCK = 512  # rows per block of the NumPy fallback's transpose (cache-sized tiles)


def _host_view(similarity) -> Optional[np.ndarray]:
  """`similarity` as a NumPy array in host memory where the host path can take it on the CPU
  backend: a NumPy array, or a concrete single-device CPU `jax.Array` (a view, no copy)."""
  if jax.default_backend() != "cpu":
    return None
  if isinstance(similarity, np.ndarray):
    return similarity
  if (isinstance(similarity, jax.Array) and checks.is_concrete(similarity)
      and similarity.is_fully_addressable and len(similarity.devices()) == 1
      and next(iter(similarity.devices())).platform == "cpu"
      and jnp.issubdtype(similarity.dtype, jnp.floating)):
    return np.asarray(similarity)
  return None


def _check_host(sim: np.ndarray, least: Optional[float] = None, finite: Optional[bool] = None) -> None:
  """The input checks of a host matrix: from the least entry and finiteness where a kernel has
  found them, else from NumPy's min and max (two passes; min and max propagate NaN, so finite
  extremes with a least entry >= 0 mean every entry is finite and >= 0). The checks' own
  errors where something is wrong."""
  if least is None:
    least, most = float(np.min(sim)), float(np.max(sim))
    finite = bool(np.isfinite(least) and np.isfinite(most))
  if not finite or not least >= 0:
    checks.check_finite(sim, "similarity")
    checks.check_nonnegative(sim, "similarity", NEGATIVE_FIX)


def _host_candidate_major(sim: np.ndarray, valid: Optional[np.ndarray], dtype: np.dtype,
                          symmetric: Optional[bool], keep=None) -> Array:
  """Checks `sim` `[..., N, N]` (host memory, item-major; `keep`: the CPU jax.Array it views,
  if any) and returns it as a candidate-major device array, zeroed on invalid rows and columns.

  A symmetric matrix is its own candidate-major layout, so it needs no transpose. Where the
  device array can share the memory (a CPU jax.Array, or 64-byte aligned C-ordered NumPy), a
  promised one (`symmetric=True`) is used as it is, and `symmetric=None` finds out in the
  checking pass (`cover_kernel.symmetry_check`, a randomized test). Memory XLA cannot share
  (NumPy's own arrays, 16-byte aligned; rows with a stride; Fortran order) needs a copy: one
  float32 problem without a mask is checked, tested and copied in one pass
  (`cover_kernel.check_copy`). A failed test costs the transposed copy; everything else is
  transposed by NumPy into aligned memory that `jax.device_put` shares. `dtype` is the device
  dtype (`checks.host_float_dtype`)."""
  masked = valid is not None and not valid.all()
  if not sim.size:
    return jax.device_put(np.zeros(sim.shape, dtype))
  shared = keep is not None or (sim.ctypes.data % 64 == 0 and sim.flags.c_contiguous)
  if symmetric is None and not masked and shared and cover_kernel.symmetry_applies(sim, dtype):
    x = keep if keep is not None else jax.device_put(sim)  # shared: no copy
    sym, least, finite = cover_kernel.symmetry_check(x)
    _check_host(sim, least, finite)
    return x if sym else _numpy_candidate_major(sim, None, dtype, transpose=True)
  rows = cover_kernel.host_rows(sim) if cover_kernel.symmetry_applies(sim, dtype) else None
  if not masked and not shared and symmetric is not False and rows is not None:
    # Memory XLA cannot share (NumPy's own arrays are 16-byte aligned; XLA takes 64): one pass
    # checks it, tests symmetry and writes the copy XLA needs. Symmetric (or promised), the
    # copy is the candidate-major layout; so it is, symmetric or not, for Fortran order (the
    # pass read the columns); otherwise the transpose is written over it.
    rows, flipped = rows
    out = _aligned_empty(sim.shape, dtype)
    sym, least, finite = cover_kernel.check_copy(rows, out)
    _check_host(sim, least, finite)
    if sym or symmetric or flipped:
      return jax.device_put(out)
    return _numpy_candidate_major(sim, None, dtype, transpose=True, out=out)
  _check_host(sim)
  if symmetric and not masked and sim.dtype == dtype:
    return keep if keep is not None else jax.device_put(sim)
  return _numpy_candidate_major(sim, valid if masked else None, dtype, transpose=not symmetric)


def _aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
  """An uninitialised NumPy array whose data starts on an `align`-byte boundary, which
  `jax.device_put` on the CPU shares instead of copying: from the kernels' scratch cache where
  they are loaded (`native.host_buffer`: memory given back when the objective holding it is
  gone, so the next call's copy writes into pages already in memory), else NumPy's."""
  out = native.host_buffer(shape, dtype)
  if out is not None:
    return out
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  raw = np.empty(nbytes + align, np.uint8)
  start = (-raw.ctypes.data) % align
  return raw[start:start + nbytes].view(dtype).reshape(shape)


def _numpy_candidate_major(sim: np.ndarray, valid: Optional[np.ndarray], dtype: np.dtype, *,
                           transpose: bool, out: Optional[np.ndarray] = None) -> Array:
  """`sim` (checked) as a candidate-major device array: transposed tile by tile (where
  `transpose`) into aligned memory that `jax.device_put` shares (`out`, or new), masked by
  `valid`."""
  n = sim.shape[-1]
  out = _aligned_empty(sim.shape, dtype) if out is None else out
  with np.errstate(over="ignore"):  # a float64 value beyond float32 is caught just below
    if transpose:
      for i in range(0, n, _HOST_BLOCK):
        out[..., :, i:i + _HOST_BLOCK] = np.swapaxes(sim[..., i:i + _HOST_BLOCK, :], -1, -2)
    else:
      out[...] = sim
  if dtype != sim.dtype:  # float64 → float32 without x64: a huge finite value may become inf
    checks.check_finite(out, "similarity (as float32)")
  if valid is not None:
    np.multiply(out, valid[..., :, None], out=out)  # in place, broadcast: no [N, N] mask
    np.multiply(out, valid[..., None, :], out=out)
  return jax.device_put(out)


def _prepare(similarity, relevance, valid, *, need_relevance: bool, symmetric: Optional[bool]):
  """Validates inputs; returns candidate-major similarity, [.., Q, N] relevance, the mask,
  and whether `sim_t` is a traced transpose of an item-major input (`item_major_input`)."""
  if symmetric is not None and not isinstance(symmetric, (bool, np.bool_)):
    raise TypeError(f"`symmetric` must be None, True or False, got {symmetric!r}.")
  host = _host_view(similarity)
  if host is not None:  # checks and layout on the host: no device copy of the untransposed matrix
    host_dtype = checks.host_float_dtype(host, "similarity")
    sim = host
  else:
    sim = checks.as_float_array(similarity, "similarity")
  if sim.ndim < 2 or sim.shape[-1] != sim.shape[-2]:
    raise ValueError(
        f"`similarity` must be square, [N, N] (or [..., N, N] for a batch), got shape {sim.shape}.")
  n = sim.shape[-1]
  batch = sim.shape[:-2]
  # The candidate-major copy (and, on the device, the masked one) must fit.
  check_fits(sim.shape, host_dtype if host is not None else sim.dtype,
                    1 + (host is None and valid is not None),
                    "The candidate-major copy of `similarity`")
  if host is None:
    checks.check_finite(sim, "similarity")
    checks.check_nonnegative(sim, "similarity", NEGATIVE_FIX)
  v = checks.check_valid(valid, n, batch_shape=batch)
  rel = None
  if relevance is None:
    if need_relevance:
      raise TypeError("`relevance` is required: [Q, N] query–candidate relevance, or [N] for one query.")
  else:
    rel = checks.as_float_array(relevance, "relevance")
    if rel.ndim == sim.ndim - 1:
      rel = rel[..., None, :]
    if rel.ndim != sim.ndim or rel.shape[-1] != n or rel.shape[:-2] != batch:
      raise ValueError(
          f"`relevance` must be [Q, {n}] or [{n}] (with the same leading batch axes as "
          f"`similarity` {sim.shape}), got {jnp.shape(relevance)}.")
    checks.check_finite(rel, "relevance")
    checks.check_nonnegative(rel, "relevance", NEGATIVE_FIX)
  item_major_input = False
  if host is not None:
    keep = similarity if isinstance(similarity, jax.Array) else None
    sim_t = _host_candidate_major(host, None if valid is None else np.asarray(v), host_dtype,
                                  symmetric, keep)
  else:
    if valid is not None:  # v_i & v_j is symmetric: masking before the transpose is the same
      sim = jnp.where(v[..., :, None] & v[..., None, :], sim, 0)
    if symmetric:
      sim_t = sim
    else:
      sim_t = jnp.swapaxes(sim, -1, -2)
      item_major_input = not checks.is_concrete(sim_t)
  if rel is not None:
    rel = rel.astype(sim_t.dtype)
    if valid is not None:
      rel = jnp.where(v[..., None, :], rel, 0)
  return sim_t, rel, v, item_major_input


def facility_location(similarity, relevance=None, *, valid=None, symmetric: Optional[bool] = None,
                      backend: str = "auto") -> FacilityLocation:
  """Multi-query facility location `f(S) = Σ_q Σ_i max_{j∈S} r_qj · s_ij`.

  Args:
    similarity: `[N, N]` non-negative, `s_ij` = how well candidate j represents item i
      (rows are the covered items, columns the candidates; symmetric for cosine).
    relevance: `[Q, N]` (or `[N]`) non-negative query–candidate relevance `r_qj`;
      `None` gives plain coverage.
    valid: bool `[N]`; padded candidates are never selected and never counted.
    symmetric: whether `s_ij = s_ji` (cosine similarity is), which saves the candidate-major
      copy. ``True`` is the caller's promise, not verified (a matrix that is not symmetric
      then gives the objective of its transpose); ``None`` (default) finds out on concrete
      inputs where that saves the copy: a single float32 `[N, N]` without a mask, a CPU
      `jax.Array` or NumPy memory aligned to 64 bytes, by a randomized test in the checking
      pass (Freivalds' test on the entries' bits: a symmetric matrix always passes, another
      one fails except with probability below 2^-32); otherwise it transposes. ``False``
      always transposes.
    backend: where gains are computed: ``"auto"`` (the native CPU kernels where they apply),
      ``"native"`` or ``"xla"`` (`jaxsel.greedy(backend=...)` can override it).
  Leading batch axes `[B, ...]` on every argument give a batch of objectives for `vmap`.
  """
  native.check_backend(backend)
  sim_t, rel, v, item_major = _prepare(similarity, relevance, valid, need_relevance=False,
                                       symmetric=symmetric)
  return FacilityLocation(sim_t=sim_t, relevance=rel, valid=v, backend=backend,
                          item_major_input=item_major)


def coverage(similarity, *, valid=None, symmetric: Optional[bool] = None,
             backend: str = "auto") -> FacilityLocation:
  """Text selection: `f(S) = Σ_i max_{j∈S} sim_ij`. `similarity` `[N, N]`, `valid` `[N]`;
  `symmetric` and `backend` as in `facility_location`."""
  return facility_location(similarity, None, valid=valid, symmetric=symmetric, backend=backend)


def saturated_coverage(similarity, relevance, *, valid=None, symmetric: Optional[bool] = None,
                       backend: str = "auto") -> SaturatedCoverage:
  """Saturated coverage `f(S) = Σ_q Σ_i min(r_qi, max_{j∈S} s_ij)`.

  Args:
    similarity: `[N, N]` non-negative passage–passage similarity.
    relevance: `[Q, N]` (or `[N]`) non-negative; item i is worth at most `r_qi` to query q,
      so once an item is covered that well, more of it adds nothing.
    valid: bool `[N]`.
    symmetric, backend: as in `facility_location`.
  """
  native.check_backend(backend)
  sim_t, rel, v, item_major = _prepare(similarity, relevance, valid, need_relevance=True,
                                       symmetric=symmetric)
  return SaturatedCoverage(sim_t=sim_t, relevance=rel, valid=v, backend=backend,
                           item_major_input=item_major)
