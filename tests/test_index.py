"""The embedded vector index: exact top-k against NumPy, save/load, crash safety, sharding."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxsel import index as index_lib
from jaxsel.index import VectorIndex


def _reference(x, q, k):
  xn = x / np.linalg.norm(x, axis=1, keepdims=True)
  qn = q / np.linalg.norm(q, axis=1, keepdims=True)
  s = qn @ xn.T
  order = np.argsort(-s, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(s, order, axis=1), order


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  return rng.normal(size=(150, 16)).astype(np.float32), rng.normal(size=(4, 16)).astype(np.float32)


def _filled(x, chunks=(0, 100, 150)):
  ix = VectorIndex(x.shape[1], info={"model": "test"})
  for a, b in zip(chunks[:-1], chunks[1:]):
    ids = ix.add(x[a:b], texts=[f"t{i}" for i in range(a, b)], metadata=[{"i": i} for i in range(a, b)])
    np.testing.assert_array_equal(ids, np.arange(a, b))
  return ix


@pytest.mark.parametrize("k", [1, 7, 150])
def test_top_k_matches_numpy(data, k):
  x, q = data
  ix = _filled(x)
  hits = ix.search(q, k)
  ref_s, ref_i = _reference(x, q, k)
  np.testing.assert_array_equal(np.asarray(hits.indices), ref_i)
  np.testing.assert_allclose(np.asarray(hits.scores), ref_s, atol=1e-5)
  one = ix.search(q[1], k)  # a single query gives [K]
  np.testing.assert_array_equal(np.asarray(one.indices), ref_i[1])


def test_k_above_size_pads_and_ties_go_to_the_lower_row():
  ix = VectorIndex(3)
  ix.add(np.array([[1, 0, 0], [0, 1, 0], [2, 0, 0], [1, 0, 0]], np.float32))
  hits = ix.search(np.array([1, 0, 0], np.float32), 6)
  np.testing.assert_array_equal(np.asarray(hits.indices), [0, 2, 3, 1, -1, -1])
  assert np.isneginf(np.asarray(hits.scores)[-2:]).all()
  ix2 = VectorIndex(3)
  ix2.add(np.eye(3, dtype=np.float32))
  hits = ix2.search(np.ones((2, 3), np.float32), 200)  # k above the storage capacity
  assert hits.indices.shape == (2, 200) and (np.asarray(hits.indices)[:, 3:] == -1).all()


def test_save_load_round_trip(data, tmp_path):
  x, q = data
  ix = _filled(x)
  path = tmp_path / "idx"
  ix.save(path)
  ix.save(path)  # a second save replaces the first generation's files
  assert sorted(f.name for f in path.iterdir()) == [
      "index.json", "records-000002.jsonl", "vectors-000002.safetensors"]
  back = VectorIndex.load(path)
  assert len(back) == 150 and back.dim == 16 and back.info == {"model": "test"}
  assert back.texts == ix.texts and back.metadata == ix.metadata
  np.testing.assert_array_equal(np.asarray(back.embeddings), np.asarray(ix.embeddings))
  np.testing.assert_array_equal(np.asarray(back.search(q, 5).indices), np.asarray(ix.search(q, 5).indices))
  back.add(x[:2], texts=["new", "newer"])  # a loaded index keeps growing
  assert len(back) == 152 and back.texts[-1] == "newer"
  empty = tmp_path / "empty"
  VectorIndex(4).save(empty)
  assert len(VectorIndex.load(empty)) == 0


def test_interrupted_save_leaves_the_old_index_readable(data, tmp_path, monkeypatch):
  x, q = data
  path = tmp_path / "idx"
  old = _filled(x[:50], chunks=(0, 50))
  old.save(path)
  before = np.asarray(VectorIndex.load(path).search(q, 5).indices)
  new = _filled(x)

  real_replace = os.replace
  calls = []

  def crash_on_manifest(src, dst):  # the process dies just before the commit point
    calls.append(os.path.basename(dst))
    if os.path.basename(dst) == index_lib.MANIFEST:
      raise KeyboardInterrupt("power cut")
    return real_replace(src, dst)

  monkeypatch.setattr(index_lib.os, "replace", crash_on_manifest)
  with pytest.raises(KeyboardInterrupt):
    new.save(path)
  assert calls[-1] == index_lib.MANIFEST
  monkeypatch.setattr(index_lib.os, "replace", real_replace)
  survivor = VectorIndex.load(path)
  assert len(survivor) == 50
  np.testing.assert_array_equal(np.asarray(survivor.search(q, 5).indices), before)

  def crash_mid_write(name, data):  # dies half-way through writing the vectors
    tmp = name.with_name(".tmp-0-" + name.name)
    tmp.write_bytes(data[:len(data) // 2])
    raise KeyboardInterrupt("killed")

  monkeypatch.setattr(index_lib, "_atomic_write", crash_mid_write)
  with pytest.raises(KeyboardInterrupt):
    new.save(path)
  monkeypatch.undo()
  assert len(VectorIndex.load(path)) == 50
  new.save(path)  # the next save succeeds and cleans up the leftovers
  assert len(VectorIndex.load(path)) == 150
  assert not [f for f in path.iterdir() if f.name.startswith(".tmp-")]


def test_killed_process_mid_save_leaves_the_old_index(tmp_path):
  """A real crash: a child process is killed (os._exit) while writing its new generation."""
  path = tmp_path / "idx"
  code = textwrap.dedent(f"""
      import os, numpy as np
      from jaxsel import index as m
      x = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
      ix = m.VectorIndex(8); ix.add(x[:10], texts=[str(i) for i in range(10)]); ix.save({str(path)!r})
      ix.add(x[10:], texts=[str(i) for i in range(10, 40)])
      real = m._atomic_write
      def dying(p, data):
        if p.name.startswith("records-"):
          with open(p.with_name(".tmp-x-" + p.name), "wb") as f:
            f.write(data[:7])
          os._exit(9)
        real(p, data)
      m._atomic_write = dying
      ix.save({str(path)!r})
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 9, r.stderr
  back = VectorIndex.load(path)
  assert len(back) == 10 and back.texts == [str(i) for i in range(10)]


def test_corrupt_files_are_named(data, tmp_path):
  x, _ = data
  path = tmp_path / "idx"
  _filled(x[:20], chunks=(0, 20)).save(path)
  man = json.loads((path / "index.json").read_text())
  vec = path / man["vectors"]
  raw = vec.read_bytes()
  vec.write_bytes(raw[:-10])
  with pytest.raises(ValueError, match="vectors-000001.safetensors.*checksum"):
    VectorIndex.load(path)
  vec.write_bytes(raw)
  (path / man["records"]).unlink()
  with pytest.raises(ValueError, match="records-000001.jsonl.*missing"):
    VectorIndex.load(path)
  (path / "index.json").write_text("{not json")
  with pytest.raises(ValueError, match="not valid JSON"):
    VectorIndex.load(path)
  with pytest.raises(FileNotFoundError, match="No jaxsel index"):
    VectorIndex.load(tmp_path / "nowhere")


def test_bad_input(data):
  x, q = data
  ix = VectorIndex(16)
  with pytest.raises(ValueError, match=r"\[M, 16\]"):
    ix.add(np.ones((3, 8)))
  with pytest.raises(ValueError, match="all-zero"):
    ix.add(np.zeros((1, 16)))
  with pytest.raises(ValueError, match="NaN"):
    ix.add(np.full((1, 16), np.nan))
  with pytest.raises(ValueError, match="one entry per embedding"):
    ix.add(x[:3], texts=["a"])
  with pytest.raises(TypeError, match="JSON"):
    ix.add(x[:1], metadata=[object()])
  ix.add(x[:3])
  with pytest.raises(ValueError, match="dimension 16.*Embed the queries"):
    ix.search(np.ones((2, 8)), 2)
  with pytest.raises(ValueError, match="`k`"):
    ix.search(q, 0)
  with pytest.raises(ValueError, match="dim"):
    VectorIndex(0)


def test_sharded_over_8_devices_matches_numpy(tmp_path):
  code = textwrap.dedent(f"""
      import numpy as np, jax
      from jaxsel.index import VectorIndex
      assert jax.device_count() == 8
      rng = np.random.default_rng(0)
      x = rng.normal(size=(203, 16)).astype(np.float32); q = rng.normal(size=(5, 16)).astype(np.float32)
      ix = VectorIndex(16); ix.add(x[:77]); ix.add(x[77:])
      assert ix.shards == 8 and ix.capacity % 8 == 0
      assert len(ix._vectors.sharding.device_set) == 8
      h = ix.search(q, 9)
      ix.save({str(tmp_path / 'sh')!r})
      h2 = VectorIndex.load({str(tmp_path / 'sh')!r}).search(q, 9)
      np.save({str(tmp_path / 'i.npy')!r}, np.stack([np.asarray(h.indices), np.asarray(h2.indices)]))
  """)
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  got = np.load(tmp_path / "i.npy")
  rng = np.random.default_rng(0)
  x, q = rng.normal(size=(203, 16)).astype(np.float32), rng.normal(size=(5, 16)).astype(np.float32)
  ref = _reference(x, q, 9)[1]
  np.testing.assert_array_equal(got[0], ref)
  np.testing.assert_array_equal(got[1], ref)
