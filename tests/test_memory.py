"""Host buffers: large aligned buffers come from recycled mappings (`memory.recycler`), handed
out again only once nothing uses them, jax arrays that share one included."""

import gc
import time

import jax
import numpy as np
import pytest

import jaxsel
from jaxsel._src import memory

MIB = 1 << 20


@pytest.fixture
def small_recycling(monkeypatch):
  """Buffers of 1 MiB and up recycled, and no idle mapping left over from other tests."""
  monkeypatch.setattr(memory, "RECYCLE_FROM_BYTES", MIB)
  memory.recycler.release()
  yield memory.recycler
  memory.recycler.release()


def _wait_idle(recycler, at_least: int, timeout: float = 10.0) -> None:
  """jax lets go of a host buffer it shares asynchronously: wait until it has."""
  deadline = time.monotonic() + timeout
  while recycler.idle_bytes < at_least and time.monotonic() < deadline:
    gc.collect()
    time.sleep(0.02)
  assert recycler.idle_bytes >= at_least


@pytest.mark.skipif(not memory.recycler.works, reason="anonymous mappings with MADV_FREE: Linux/BSD only")
def test_a_freed_buffer_is_recycled_and_a_live_one_never(small_recycling):
  a = memory.aligned_empty((2048, 1024), np.float32)  # 8 MiB
  assert a.shape == (2048, 1024) and a.dtype == np.float32 and a.flags.writeable
  assert a.flags.c_contiguous and a.ctypes.data % 64 == 0
  a[:] = 1.0
  b = memory.aligned_empty((2048, 1024), np.float32)
  assert b.ctypes.data != a.ctypes.data  # `a` is alive
  b[:] = 3.0
  where = a.ctypes.data
  del a
  assert small_recycling.idle_bytes >= 8 * MIB
  c = memory.aligned_empty((2000, 1024), np.float32)  # a little smaller: the same mapping
  assert c.ctypes.data == where
  c[:] = 2.0
  np.testing.assert_array_equal(b, 3.0)  # untouched by c
  del c
  d = memory.aligned_empty((256, 1024), np.float32)  # 1 MiB, under half the idle mapping: a new one
  assert d.ctypes.data != where


@pytest.mark.skipif(not memory.recycler.works, reason="anonymous mappings with MADV_FREE: Linux/BSD only")
def test_a_buffer_a_jax_array_shares_waits_for_that_array(small_recycling):
  a = memory.aligned_empty((512, 1024), np.float32)
  a[:] = np.arange(a.size, dtype=np.float32).reshape(a.shape)
  j = jax.device_put(a)
  shared = j.unsafe_buffer_pointer()
  if jax.default_backend() == "cpu":
    assert shared == a.ctypes.data  # shared, not copied
  del a
  gc.collect()
  b = memory.aligned_empty((512, 1024), np.float32)
  assert b.ctypes.data != shared  # the jax array still uses it
  b[:] = -1.0
  np.testing.assert_array_equal(np.asarray(j), np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024))
  idle = small_recycling.idle_bytes
  del j
  _wait_idle(small_recycling, idle + 2 * MIB)


@pytest.mark.skipif(not memory.recycler.works, reason="anonymous mappings with MADV_FREE: Linux/BSD only")
def test_idle_mappings_are_capped(small_recycling, monkeypatch):
  monkeypatch.setattr(small_recycling, "max_idle_bytes", 6 * MIB)
  arrays = [memory.aligned_empty((1024, 1024), np.float32) for _ in range(3)]
  del arrays
  assert 0 < small_recycling.idle_bytes <= 6 * MIB  # one 4 MiB mapping kept, two unmapped


def test_objectives_built_in_a_loop_each_keep_their_own_matrix(small_recycling):
  """Candidate-major copies of NumPy matrices (the host path writes them into recycled
  buffers): objectives alive at once never share one, and one built after others were freed
  holds its own values."""
  rng = np.random.default_rng(0)
  mats = [rng.random((600, 600), dtype=np.float32) for _ in range(5)]
  objs = [jaxsel.facility_location(m, symmetric=False) for m in mats[:3]]
  del objs[1]
  gc.collect()
  objs += [jaxsel.facility_location(m, symmetric=False) for m in mats[3:]]
  for obj, m in zip(objs, [mats[0], mats[2], mats[3], mats[4]]):
    np.testing.assert_array_equal(np.asarray(obj.sim_t), m.T)
  sel = jaxsel.greedy(objs[-1], k=5, method="dense")
  ref = jaxsel.greedy(jaxsel.facility_location(mats[4], symmetric=False, backend="xla"), k=5,
                      method="dense", backend="xla")
  np.testing.assert_array_equal(sel.indices, ref.indices)


@pytest.mark.skipif(not memory.recycler.works, reason="anonymous mappings with MADV_FREE: Linux/BSD only")
def test_a_buffer_freed_while_the_recycler_is_busy_is_queued_not_waited_for(small_recycling):
  """A `__del__` may run inside `take` on the same thread (the garbage collector): handing
  back then queues the mapping instead of waiting for the lock (which would never come)."""
  a = memory.aligned_empty((1024, 1024), np.float32)
  where = a.ctypes.data
  with small_recycling._lock:
    del a  # would deadlock if it waited
    assert small_recycling.idle_bytes == 0
  b = memory.aligned_empty((1024, 1024), np.float32)
  assert b.ctypes.data == where
