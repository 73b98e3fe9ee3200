"""The greedy kernels of `native/csrc/greedy.cc` as JAX functions, beside their XLA
reference (`rows`): facility-location gains of a block of candidate rows (differentiable: the
backward pass differentiates the XLA gains of `rows`), and a whole dense or lazy (CELF)
greedy run in one call. `native` only loads the compiled library; the `ffi_call`s, the
`custom_vjp` and the dispatch (`applies`) live here.

Shape legend: Q queries, N candidates, M a block of candidates, K picks.
"""

from __future__ import annotations

import ctypes
import functools
import os
from concurrent.futures import ThreadPoolExecutor
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
  call = jax.ffi.ffi_call(
      "jaxsel_cover_greedy",
      (jax.ShapeDtypeStruct((k,), jnp.int32), jax.ShapeDtypeStruct((k,), dtype),
       jax.ShapeDtypeStruct((k,), dtype), jax.ShapeDtypeStruct((), jnp.int32),
       jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), dtype)),
      vmap_method="expand_dims")
  indices, gains, values, count, cost, bound = call(
      sim_t, w, valid, costs, budget, floor,
      weighted=weighted, lazy=lazy, has_costs=has_costs, ratio=ratio, saturated=saturated,
      item_major=item_major)
  return Selection(indices, gains, values, count, cost, bound, jnp.zeros_like(bound))


# ----------------------------------------------------------------------------- host arrays
# `JaxselHostPrepare` / `JaxselHostSymmetric` in native/csrc/greedy.cc are plain C functions,
# called through ctypes on NumPy memory (the GIL is released during the call): the input checks
# and the candidate-major copy of a similarity matrix in one pass, on a few threads.

_HOST_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_ROWS_PER_TASK = 256
_pool: Optional[ThreadPoolExecutor] = None


def _host_fn(name: str):
  fn = native.host_function(name)
  if fn is not None and not getattr(fn, "_jaxsel_typed", False):
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    fn.restype = i32
    fn.argtypes = {
        "JaxselHostPrepare": [vp, i32, vp, i32, i64, i64, i64, i64, i32, vp, ctypes.POINTER(ctypes.c_double)],
        "JaxselHostSymmetric": [vp, i32, i64, i64, i64, i64, vp, ctypes.POINTER(ctypes.c_double)],
        "JaxselHostSymmetryHash": [vp, vp, i64, i64, i64, vp, vp, vp, ctypes.POINTER(ctypes.c_double)],
    }[name]
    fn._jaxsel_typed = True
  return fn


def host_applies(sim: np.ndarray, dtype) -> bool:
  """Whether the host kernels take this NumPy matrix `[..., N, N]` to `dtype`: they are loaded,
  the input is C-contiguous float32/64, and the output float32 (or float64 from float64)."""
  return (native.available() and isinstance(sim, np.ndarray) and sim.flags.c_contiguous
          and sim.dtype in _HOST_DTYPES and np.dtype(dtype) in _HOST_DTYPES
          and not (sim.dtype == np.float32 and np.dtype(dtype) == np.float64)
          and _host_fn("JaxselHostPrepare") is not None)


def _map(fn, tasks):
  global _pool
  tasks = list(tasks)
  if len(tasks) <= 1:
    return [fn(t) for t in tasks]
  if _pool is None:
    _pool = ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="jaxsel-host")
  return list(_pool.map(fn, tasks))


def _tasks(shape):
  """(first problem, problem count, row lo, row hi) pieces of a `[..., N, N]` batch: runs of
  whole problems when there are several, row ranges of a single one."""
  n = shape[-1]
  problems = int(np.prod(shape[:-2], dtype=np.int64))
  if problems == 1:
    return [(0, 1, lo, min(lo + _ROWS_PER_TASK, n)) for lo in range(0, n, _ROWS_PER_TASK)]
  per = max(1, -(-problems * n // (8 * _ROWS_PER_TASK)))  # about 8 * 256 rows a piece
  return [(b, min(per, problems - b), 0, n) for b in range(0, problems, per)]


def host_symmetric(sim: np.ndarray):
  """(symmetric, least entry, any NaN/inf) of a C-contiguous float32/64 NumPy `[..., N, N]`:
  each problem's `s_ij == s_ji`, in one pass that compares 8 x 8 tiles in registers and stops
  at the first difference (then the statistics are None: the copy computes them)."""
  fn = _host_fn("JaxselHostSymmetric")
  n = sim.shape[-1]
  flat = sim.reshape(-1, n, n)
  stop = np.zeros(1, np.int32)
  f64 = int(sim.dtype == np.float64)

  def run(task):
    b, count, lo, hi = task
    m = ctypes.c_double()
    r = fn(flat[b].ctypes.data, f64, n, count, lo, hi, stop.ctypes.data, ctypes.byref(m))
    if r & 4:
      stop[0] = 1
    return r, m.value

  out = _map(run, _tasks(sim.shape))
  if stop[0] or any(r & 4 for r, _ in out):
    return False, None, None
  return True, min((m for _, m in out), default=np.inf), any(r & 1 for r, _ in out)


def hash_applies(sim: np.ndarray, dtype) -> bool:
  """Whether `host_symmetry_hash` takes this matrix: one C-contiguous float32 `[N, N]` problem
  kept in float32, with the host kernels loaded."""
  return (host_applies(sim, dtype) and sim.ndim == 2 and sim.dtype == np.float32
          and np.dtype(dtype) == np.float32 and _host_fn("JaxselHostSymmetryHash") is not None)


def host_symmetry_hash(sim: np.ndarray, out: Optional[np.ndarray]):
  """(symmetric, least entry, any NaN/inf) of a float32 `[N, N]` (`hash_applies`), in one pass
  that also copies it straight into `out` (None: no copy). Symmetry is tested by Freivalds'
  method on the entries' bit patterns (`JaxselHostSymmetryHash`, fresh random weights from the
  operating system each call): a symmetric matrix always passes, any other fails except with
  probability below 2^-32, and a mix of +0.0 and -0.0 at mirrored places counts as asymmetric."""
  fn = _host_fn("JaxselHostSymmetryHash")
  n = sim.shape[-1]
  a = np.random.default_rng().integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
  rows = np.empty(n, np.uint64)
  tasks = _tasks(sim.shape)
  cols = np.zeros((len(tasks), n), np.uint64)

  def run(t):
    i, (_, _, lo, hi) = t
    m = ctypes.c_double()
    r = fn(sim.ctypes.data, None if out is None else out.ctypes.data, n, lo, hi, a.ctypes.data,
           rows.ctypes.data, cols[i].ctypes.data, ctypes.byref(m))
    return r, m.value

  res = _map(run, list(enumerate(tasks)))
  col = cols.sum(axis=0, dtype=np.uint64)  # wraps mod 2^64, as the kernel's sums do
  return (bool(np.array_equal(rows, col)), min((m for _, m in res), default=np.inf),
          any(r & 1 for r, _ in res))


def host_copy(sim: np.ndarray, out: Optional[np.ndarray], *, transpose: bool,
              valid: Optional[np.ndarray]):
  """Writes `sim` `[..., N, N]` (transposed per problem where `transpose`; zero in invalid rows
  and columns where `valid` `[..., N]`) into `out` (same shape, float32 or float64; None: only
  check) in one pass; returns (least input entry, any input NaN/inf, any output NaN/inf)."""
  fn = _host_fn("JaxselHostPrepare")
  n = sim.shape[-1]
  src = sim.reshape(-1, n, n)
  dst = src if out is None else out.reshape(-1, n, n)
  v = None if valid is None else np.ascontiguousarray(valid, np.uint8).reshape(-1, n)
  fin, fout = int(sim.dtype == np.float64), int(dst.dtype == np.float64)

  def run(task):
    b, count, lo, hi = task
    m = ctypes.c_double()
    r = fn(src[b].ctypes.data, fin, None if out is None else dst[b].ctypes.data, fout, n, count, lo,
           hi, int(transpose),
           None if v is None else v[b].ctypes.data, ctypes.byref(m))
    return r, m.value

  tasks = _tasks(sim.shape)
  if out is None:  # one problem a call: the kernel offsets only a real output pointer
    tasks = [(b + i, 1, lo, hi) for b, count, lo, hi in tasks for i in range(count)]
  res = _map(run, tasks)
  return (min((m for _, m in res), default=np.inf), any(r & 1 for r, _ in res),
          any(r & 2 for r, _ in res))
