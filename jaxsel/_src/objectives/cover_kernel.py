"""The greedy kernels of `native/csrc/` as JAX functions, beside their XLA reference
(`rows`): facility-location gains of a block of candidate rows (differentiable: the backward
pass differentiates the XLA gains of `rows`), a whole dense or lazy (CELF) greedy run in one
call, and the symmetry test of a similarity matrix. `native` only loads the compiled library;
the `ffi_call`s, the `custom_vjp` and the dispatch (`applies`) live here.

Shape legend: Q queries, N candidates, M a block of candidates, K picks.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import native
from jaxsel._src.base import Selection
from jaxsel._src.objectives import rows

Array = jax.Array


def applies(sim_t: Array, backend: str) -> bool:
  """Whether the kernels serve this candidate-major matrix: `backend` allows them, they are
  loaded, the backend is the CPU, the dtype float32/64, and the array is not on a mesh with
  explicit axes (use `jaxsel.sharded_greedy` there: inside its `shard_map` each device runs
  the kernel on its own problems)."""
  return (jax.default_backend() == "cpu" and sim_t.dtype in (jnp.float32, jnp.float64)
          and native.wanted(backend) and not native.explicitly_sharded(sim_t))


def cover_gains(sim_t: Array, cover: Array, relevance: Optional[Array],
                idx: Optional[Array]) -> Array:
  """Facility-location gains of the candidate rows `idx` `[M]` (None: all) of `sim_t`
  `[N, N]` (or a block `[M, N]`), weights `relevance` `[Q, N]` (None: coverage), against
  `cover` `[Q, N]`; each row reduced on XLA's thread pool. Check `applies` first."""
  if idx is None:
    idx = jnp.arange(sim_t.shape[-2], dtype=jnp.int32)
  idx = idx.astype(jnp.int32)
  weighted = relevance is not None
  w = jnp.take(relevance, idx, axis=-1) if weighted else jnp.ones((1, idx.shape[-1]), sim_t.dtype)
  return _cover_gains(weighted, sim_t, cover.astype(sim_t.dtype), w.astype(sim_t.dtype), idx)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cover_gains(weighted: bool, sim_t, cover, w, idx):
  call = jax.ffi.ffi_call("jaxsel_cover_gains", jax.ShapeDtypeStruct(idx.shape, sim_t.dtype),
                          vmap_method="expand_dims")
  return call(sim_t, cover, w, idx, weighted=weighted)


def _cover_gains_fwd(weighted, sim_t, cover, w, idx):
  return _cover_gains(weighted, sim_t, cover, w, idx), (sim_t, cover, w, idx)


def _cover_gains_bwd(weighted, res, g):
  sim_t, cover, w, idx = res
  _, vjp = jax.vjp(
      lambda s, c, ww: rows.cover_row_gains(jnp.take(s, idx, axis=-2), ww if weighted else None, c),
      sim_t, cover, w)
  return (*vjp(g), None)


_cover_gains.defvjp(_cover_gains_fwd, _cover_gains_bwd)


# From this N on, lazy float32 problems bound stale candidates from bytes (bench/RESULTS.md).
BYTE_BOUNDS_MIN_N = 2048


def cover_greedy(sim_t: Array, relevance: Optional[Array], valid: Array, costs: Optional[Array],
                 budget: Array, min_gain: Optional[Array], *, k: int, lazy: bool,
                 ratio: bool, saturated: bool, item_major: bool = False) -> Selection:
  """Greedy on facility location / coverage (`saturated=False`) or saturated coverage as one
  C++ call: dense steps, or lazy ones (CELF with a heap), with or without costs, by the rules
  of `jaxsel.greedy`'s own loop and the same gain code as `cover_gains`, so dense and lazy
  picks agree exactly. `sim_t` `[N, N]` candidate-major, or item-major (`s_ij` at `[i, j]`)
  with `item_major`: a batch of small problems is then solved from it directly with dense
  steps (all gains at once, each candidate in a vector lane; `lazy` too while k <= 16 and
  N·k <= 2048, returning dense greedy's certificate), a larger one transposed first;
  `relevance` `[Q, N]` or None. The kernel also returns the run's certificate (the
  `bound` of `jaxsel.greedy`'s loop, from the gains it evaluates; `certified` is left to the
  caller, which combines the runs)."""
  n = sim_t.shape[-1]
  dtype = sim_t.dtype
  weighted = relevance is not None
  w = relevance.astype(dtype) if weighted else jnp.zeros((1, 1), dtype)
  has_costs = costs is not None
  costs = costs.astype(jnp.float32) if has_costs else jnp.zeros((n,), jnp.float32)
  budget = jnp.asarray(budget, jnp.float32)  # inf: no budget (greedy's `NO_BUDGET`)
  floor = jnp.asarray(-jnp.inf if min_gain is None else min_gain, dtype)
  # A large lazy float32 problem bounds stale candidates from its rows rounded up to bytes
  # (csrc/byte_bounds.h), in scratch the kernel keeps between calls (csrc/scratch.h).
  byte_bounds = lazy and not saturated and dtype == jnp.float32 and n >= BYTE_BOUNDS_MIN_N
  call = jax.ffi.ffi_call(
      "jaxsel_cover_greedy",
      (jax.ShapeDtypeStruct((k,), jnp.int32), jax.ShapeDtypeStruct((k,), dtype),
       jax.ShapeDtypeStruct((k,), dtype), jax.ShapeDtypeStruct((), jnp.int32),
       jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), dtype)),
      vmap_method="expand_dims")
  indices, gains, values, count, cost, bound = call(
      sim_t, w, valid, costs, budget, floor,
      weighted=weighted, lazy=lazy, has_costs=has_costs, ratio=ratio, saturated=saturated,
      item_major=item_major, byte_bounds=byte_bounds)
  return Selection(indices, gains, values, count, cost, bound, jnp.zeros_like(bound))


# ------------------------------------------------------------------------------- symmetry

def symmetry_applies(sim, dtype) -> bool:
  """Whether `symmetry_check` takes this concrete matrix: one float32 `[N, N]` problem kept in
  float32 on the CPU, with the kernels loaded."""
  return (native.available() and jax.default_backend() == "cpu" and sim.ndim == 2
          and sim.dtype == np.float32 and np.dtype(dtype) == np.float32)


@jax.jit
def _symmetry_check(x: Array, seed: Array):
  call = jax.ffi.ffi_call(
      "jaxsel_symmetry_check",
      (jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.float32),
       jax.ShapeDtypeStruct((), jnp.bool_)))
  return call(x, seed)


def symmetry_check(x: Array):
  """(symmetric, least entry, all finite) of a float32 `[N, N]` CPU array (`symmetry_applies`)
  in one pass: symmetry by a randomized test on the entries' bits (fresh weights each call; a
  symmetric matrix always passes, another fails except with probability below 2^-32; see
  `csrc/symmetry.cc`)."""
  seed = np.random.default_rng().integers(0, 2**32, 2, dtype=np.uint32)
  sym, least, finite = _symmetry_check(x, seed)
  return bool(sym), float(least), bool(finite)


def host_rows(sim: np.ndarray) -> Optional[tuple[np.ndarray, bool]]:
  """`(rows, flipped)` where `check_copy` reads a float32 `[N, N]` host array in place: its rows
  (`rows = sim`), or, for Fortran order, its columns as the rows of `rows = sim.T` (`flipped`);
  None where neither lies in memory with unit stride."""
  for rows, flipped in ((sim, False), (sim.T, True)):
    st = rows.strides
    if st[1] == 4 and st[0] % 4 == 0 and st[0] >= 4 * rows.shape[1]:
      return rows, flipped
  return None


def check_copy(rows: np.ndarray, out: Optional[np.ndarray]):
  """(symmetric, least entry, all finite) of float32 `[N, N]` host memory `rows` (unit stride
  along a row, any alignment: `host_rows`), as `symmetry_check` finds them, in one pass that
  also writes `rows` into `out` (C-contiguous float32 `[N, N]`, None: no copy) while each row
  is in the cache: for NumPy's own arrays, which XLA cannot share (it takes 64-byte aligned
  memory only), the checks, the symmetry test and the copy XLA needs in one read
  (`csrc/symmetry.cc`, `JaxselCheckCopy`, on this process's CPUs, outside XLA)."""
  fn = native.host_function("JaxselCheckCopy", None, (
      ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_uint32,
      ctypes.c_uint32, ctypes.c_int32, ctypes.c_void_p))
  seed = np.random.default_rng().integers(0, 2**32, 2, dtype=np.uint32)
  result = np.zeros(3, np.float32)
  n = rows.shape[0]
  fn(rows.ctypes.data, n, rows.strides[0] // 4, None if out is None else out.ctypes.data,
     int(seed[0]), int(seed[1]), native.host_threads(), result.ctypes.data)
  return bool(result[0]), float(result[2]), bool(result[1])
