"""The caller's host arrays and the kernels' scratch: `facility_location` from NumPy memory that
XLA cannot share (16-byte aligned, strided rows, Fortran order) checks, tests symmetry and
copies in one pass (`cover_kernel.check_copy`) with the picks, certificate and errors of the
transposing path; the lazy steps' scratch is kept between calls in a bounded, thread-safe
cache (`csrc/scratch.h`) that `native.clear_scratch()` empties."""

import gc
import threading

import jax
import numpy as np
import pytest

import jaxsel
from jaxsel._src import native
from jaxsel._src.objectives import cover_kernel

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels not built")


def _sim(n, seed=0, symmetric=True):
  rng = np.random.default_rng(seed)
  e = rng.normal(size=(n, 16)).astype(np.float32)
  e /= np.linalg.norm(e, axis=1, keepdims=True)
  s = np.clip(e @ e.T, 0, None)
  if not symmetric:
    s = s * rng.random(n, dtype=np.float32)[None, :]
  return s


def _unaligned(s, offset=16):
  """A C-ordered copy of `s` whose data starts `offset` bytes past a 64-byte boundary."""
  raw = np.empty(s.nbytes + 128, np.uint8)
  start = (-raw.ctypes.data) % 64 + offset
  out = raw[start:start + s.nbytes].view(np.float32).reshape(s.shape)
  out[...] = s
  return out


def _same(a, b):
  np.testing.assert_array_equal(np.asarray(a.indices), np.asarray(b.indices))
  np.testing.assert_array_equal(np.asarray(a.gains), np.asarray(b.gains))
  np.testing.assert_array_equal(np.asarray(a.bound), np.asarray(b.bound))


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("layout", ["unaligned", "strided", "fortran", "fortran-unaligned"])
def test_host_layouts_pick_as_the_transposing_path(symmetric, layout):
  s = _sim(67, seed=1, symmetric=symmetric)
  ref = jaxsel.greedy(jaxsel.facility_location(s, symmetric=False, backend="xla"), k=9, method="dense")
  if layout == "unaligned":
    x = _unaligned(s)
  elif layout == "strided":
    x = np.zeros((67, 80), np.float32)[:, 5:72]
    x[...] = s
  elif layout == "fortran":
    x = np.asfortranarray(s)
  else:
    x = _unaligned(np.ascontiguousarray(s.T)).T
  assert x.ctypes.data % 64 or not x.flags.c_contiguous
  assert cover_kernel.host_rows(x) is not None
  for method in ("lazy", "dense"):
    got = jaxsel.greedy(jaxsel.facility_location(x), k=9, method=method)
    np.testing.assert_array_equal(np.asarray(got.indices), np.asarray(ref.indices))
    _same(got, jaxsel.greedy(jaxsel.facility_location(s, symmetric=False), k=9, method=method))


def test_check_copy_copies_and_tests():
  s = _sim(131, seed=2)
  x = _unaligned(s, 48)
  out = np.empty_like(s)
  assert cover_kernel.check_copy(x, out) == (True, 0.0, True)
  np.testing.assert_array_equal(out, s)
  y = x.copy()
  y[3, 100] += 1e-6
  assert cover_kernel.check_copy(y, None)[0] is False
  y = x.copy()
  y[130, 129] = np.inf
  assert cover_kernel.check_copy(y, None)[2] is False
  y = x.copy()
  y[0, 0] = -2.0
  assert cover_kernel.check_copy(y, None)[1] == -2.0


@pytest.mark.parametrize("bad, error", [(np.nan, "finite"), (-0.5, "negative")])
def test_host_errors_as_before(bad, error):
  s = _sim(40)
  s[7, 3] = bad
  for x in (_unaligned(s), np.asfortranarray(s)):
    with pytest.raises(ValueError, match=error):
      jaxsel.facility_location(x)


def test_scratch_kept_bounded_and_cleared():
  n = cover_kernel.BYTE_BOUNDS_MIN_N  # the least N whose lazy steps use the byte bounds
  s = _sim(n, seed=3)
  obj = jaxsel.facility_location(s)
  limit = native.scratch_limit()
  try:
    native.clear_scratch()
    first = jaxsel.greedy(obj, k=5)
    kept = native.scratch_idle_bytes()
    assert kept >= n * n
    _same(jaxsel.greedy(obj, k=5), first)  # the kept buffer serves the next call
    assert native.scratch_idle_bytes() == kept
    assert native.clear_scratch() == kept and native.scratch_idle_bytes() == 0
    native.scratch_limit(n * n // 2)  # smaller than one buffer: none is kept
    _same(jaxsel.greedy(obj, k=5), first)
    assert native.scratch_idle_bytes() == 0
    with pytest.raises(ValueError, match="limit"):
      native.scratch_limit(-1)
  finally:
    native.scratch_limit(limit)


def test_scratch_thread_safe():
  n = cover_kernel.BYTE_BOUNDS_MIN_N
  objs = [jaxsel.facility_location(_sim(n, seed=4 + i)) for i in range(2)]
  want = [np.asarray(jaxsel.greedy(o, k=5).indices) for o in objs]
  got, errors = {}, []

  def run(t):
    try:
      for r in range(3):
        got[t, r] = np.asarray(jaxsel.greedy(objs[t % 2], k=5).indices)
    except Exception as e:  # pragma: no cover - reported below
      errors.append(e)

  threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  for (t, _), picks in got.items():
    np.testing.assert_array_equal(picks, want[t % 2])
  assert native.scratch_idle_bytes() <= native.scratch_limit()


def test_host_copy_lent_by_the_cache_until_the_objective_is_gone():
  s = _sim(300, seed=6)
  x = _unaligned(s)  # memory XLA cannot share: the objective holds an aligned copy
  ref = jaxsel.greedy(jaxsel.facility_location(s, symmetric=False, backend="xla"), k=7, method="dense")
  limit = native.scratch_limit()
  try:
    gc.collect()
    native.clear_scratch()
    obj = jaxsel.facility_location(x)
    assert native.scratch_idle_bytes() == 0  # lent while the objective holds it
    picks = jaxsel.greedy(obj, k=7, method="dense")
    del obj, picks
    gc.collect()
    assert native.scratch_idle_bytes() == s.nbytes  # given back
    obj = jaxsel.facility_location(x)  # the next copy of that size reuses it
    assert native.scratch_idle_bytes() == 0
    np.testing.assert_array_equal(np.asarray(jaxsel.greedy(obj, k=7, method="dense").indices),
                                  np.asarray(ref.indices))
    view = np.asarray(obj.sim_t)
    del obj
    gc.collect()
    assert native.scratch_idle_bytes() == 0  # a view still holds it
    np.testing.assert_array_equal(view, s)
    del view
    gc.collect()
    assert native.scratch_idle_bytes() == s.nbytes
  finally:
    native.scratch_limit(limit)
    native.clear_scratch()


def test_host_buffer_aligned_shared_and_given_back():
  gc.collect()
  native.clear_scratch()
  a = native.host_buffer((33, 65), np.float32)
  assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and a.flags.writeable
  a[...] = 2.0
  x = jax.device_put(a)
  assert x.unsafe_buffer_pointer() == a.ctypes.data  # shared, not copied
  del a
  gc.collect()
  assert native.scratch_idle_bytes() == 0
  assert float(x.sum()) == 2.0 * 33 * 65
  del x
  gc.collect()
  assert native.scratch_idle_bytes() == 33 * 65 * 4
  assert native.host_buffer((0, 5), np.float32) is None
  native.clear_scratch()
