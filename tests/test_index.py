"""The embedded vector index: exact top-k against NumPy, save/load, crash safety, sharding."""

import collections
import enum
import fcntl
import io
import json
import multiprocessing
import os
import queue as queue_lib
import stat
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jaxsel._src import index as index_lib
from jaxsel._src import io as io_lib
from jaxsel._src.index import VectorIndex


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
      ".index.lock", "index.json", "records-000002.jsonl", "vectors-000002.safetensors"]
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


def _kill_mid_save(path, hook):
  """A child process saves 10 vectors to `path`, adds 30, and saves again with `hook` (code
  that patches the index module `m` so the process dies with os._exit(9) mid-save)."""
  code = textwrap.dedent(f"""
      import os, numpy as np
      from jaxsel._src import index as m
      x = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
      ix = m.VectorIndex(8); ix.add(x[:10], texts=[str(i) for i in range(10)]); ix.save({str(path)!r})
      ix.add(x[10:], texts=[str(i) for i in range(10, 40)])
  """) + textwrap.dedent(hook) + f"ix.save({str(path)!r})\n"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 9, r.stderr


def test_killed_process_mid_save_leaves_the_old_index(tmp_path):
  """A real crash: a child process is killed (os._exit) while writing its new generation."""
  path = tmp_path / "idx"
  _kill_mid_save(path, """
      real = m._atomic_write
      def dying(p, data):
        if p.name.startswith("records-"):
          with open(p.with_name(".tmp-x-" + p.name), "wb") as f:
            f.write(data[:7])
          os._exit(9)
        real(p, data)
      m._atomic_write = dying
  """)
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
  with pytest.raises(ValueError, match="vectors-000001.safetensors.*truncated"):
    VectorIndex.load(path)
  vec.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # the same size, another byte
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


# Any str: every code point, lone surrogates included, and the line breaks `str.splitlines` knows.
_ANY_CHAR = st.one_of(st.characters(exclude_categories=()),
                      st.sampled_from("\u2028\u2029\x85\n\r\x0b\x0c\x1c\ud800\udfff"))
_ANY_TEXT = st.text(_ANY_CHAR, max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=6)


def _has_non_finite(x) -> bool:
  if isinstance(x, float):
    return not np.isfinite(x)
  if isinstance(x, list):
    return any(map(_has_non_finite, x))
  if isinstance(x, dict):
    return any(map(_has_non_finite, x.values()))
  return False


def _listing(path):
  return {f.name: f.read_bytes() for f in sorted(path.iterdir())}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.none() | _ANY_TEXT, min_size=3, max_size=3),
       metadata=st.lists(_JSON, min_size=3, max_size=3))
def test_any_text_and_json_metadata_round_trip(texts, metadata):
  """Texts round-trip whatever they hold; metadata round-trips unless it holds NaN/infinity,
  which `add` refuses by naming the entry."""
  import tempfile
  ix = VectorIndex(2)
  x = np.eye(3, 2, dtype=np.float32) + 1
  bad = [i for i, m in enumerate(metadata) if _has_non_finite(m)]
  if bad:
    with pytest.raises(ValueError, match=rf"metadata\[{bad[0]}\].*NaN and infinity"):
      ix.add(x, texts=texts, metadata=metadata)
    return
  ix.add(x, texts=texts, metadata=metadata)
  with tempfile.TemporaryDirectory() as d:
    back = VectorIndex.load(ix.save(os.path.join(d, "idx")))
  assert back.texts == texts and back.metadata == metadata


def test_line_separators_and_surrogates_round_trip_and_a_failed_save_keeps_the_old(data, tmp_path):
  """U+2028/U+2029/U+0085 used to save fine and never load (records were split with
  `str.splitlines`); a lone surrogate failed to encode. Both round-trip now."""
  x, _ = data
  texts = ["a\u2028b", "c\u2029d", "e\x85f", "\ud800", "\ud83d\ude00 (two lone halves)", "g\rh\x1ci"]
  meta = [{"k\u2028": "v\x85"}, ["\udfff"], None, 1.5, {"n": [1, "\u2029"]}, "x"]
  path = tmp_path / "idx"
  ix = VectorIndex(16)
  ix.add(x[:6], texts=texts, metadata=meta)
  ix.save(path)
  back = VectorIndex.load(path)
  assert back.texts == texts and back.metadata == meta
  assert [len(t) for t in back.texts] == [len(t) for t in texts]
  # A save that fails leaves the previous good version, and writes nothing.
  before = _listing(path)
  ix.metadata[2] = {"score": float("nan")}  # mutated after `add`: refused by `save`
  with pytest.raises(ValueError, match=r"metadata\[2\]"):
    ix.save(path)
  ix.metadata[2] = None
  ix.info["encoder"] = object()
  with pytest.raises(TypeError, match=r"`info\['encoder'\]` has type object, which JSON cannot"):
    ix.save(path)
  assert _listing(path) == before
  assert VectorIndex.load(path).texts == texts
  with pytest.raises(ValueError, match=r"metadata\[1\].*NaN and infinity"):
    VectorIndex(16).add(x[:2], metadata=[{}, {"w": [float("inf")]}])


def test_save_never_deletes_or_overwrites_files_it_did_not_write(data, tmp_path):
  x, _ = data
  path = tmp_path / "notes"
  path.mkdir()
  theirs = {"records-2024.md": b"my records", "vectors-notes.txt": b"v", ".tmp-draft.md": b"t",
            "vectors-000002.safetensors": b"not an index file", "index.jsonl": b"{}"}
  for name, b in theirs.items():
    (path / name).write_bytes(b)
  # A folder holding files but no index is refused before anything is written.
  with pytest.raises(ValueError, match="holds files.*but no jaxsel index.*new or empty folder"):
    _filled(x[:20], chunks=(0, 20)).save(path)
  assert _listing(path) == theirs
  # Beside an index, other files are kept; a name taken by one of them is skipped.
  path = tmp_path / "idx"
  _filled(x[:20], chunks=(0, 20)).save(path)
  for name, b in theirs.items():
    (path / name).write_bytes(b)
  _filled(x, chunks=(0, 150)).save(path)
  _filled(x[:30], chunks=(0, 30)).save(path)
  assert {n: b for n, b in _listing(path).items() if n in theirs} == theirs
  assert sorted(set(_listing(path)) - set(theirs)) == [
      ".index.lock", "index.json", "records-000004.jsonl", "vectors-000004.safetensors"]
  assert len(VectorIndex.load(path)) == 30


def test_next_save_cleans_exactly_what_a_killed_save_left(tmp_path):
  """The child dies inside the real `atomic_write` of the records (its temp file written, not
  yet renamed); the next save removes that temp file and the orphan vectors, nothing else."""
  path = tmp_path / "idx"
  _kill_mid_save(path, """
      real = os.replace
      def dying(src, dst):
        if os.path.basename(dst).startswith("records-"):
          os._exit(9)
        real(src, dst)
      m.os.replace = dying
  """)
  theirs = {".tmp-notes.md": b"mine", "records-2024.md": b"mine too"}
  left = set(_listing(path))
  assert "vectors-000002.safetensors" in left
  assert [n for n in left if n.startswith(".tmp-") and n.endswith("-records-000002.jsonl")]
  for name, b in theirs.items():
    (path / name).write_bytes(b)
  back = VectorIndex.load(path)
  assert len(back) == 10
  back.save(path)
  got = _listing(path)
  assert {n: got[n] for n in theirs} == theirs
  assert sorted(set(got) - set(theirs)) == [
      ".index.lock", "index.json", "records-000002.jsonl", "vectors-000002.safetensors"]


def test_cli_index_build_into_the_documents_folder_is_refused(tmp_path, monkeypatch, capsys):
  from jaxsel import cli
  from jaxsel.testing import tiny_encoder
  notes = tmp_path / "notes"
  notes.mkdir()
  (notes / "records-2024.md").write_text("Minutes of the 2024 meeting. We agreed on a plan.\n")
  (notes / "todo.txt").write_text("Buy milk. Write the report.\n")
  before = _listing(notes)
  monkeypatch.setattr(cli.common, "load_model", lambda name: tiny_encoder())
  code = cli.main(["index", "build", str(notes), "--out", str(notes), "--quiet"], out=io.StringIO())
  assert code == 1
  assert "no jaxsel index" in capsys.readouterr().err
  assert _listing(notes) == before
  assert cli.main(["index", "build", str(notes), "--out", str(notes / "index"), "--quiet"],
                  out=io.StringIO()) == 0
  assert {n: (notes / n).read_bytes() for n in before} == before
  assert len(VectorIndex.load(notes / "index")) >= 2


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
      from jaxsel._src.index import VectorIndex
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


# ----------------------------------------------------------------------------- concurrent saves

_WRITERS, _ROUNDS = 4, 10


def _writer_texts(writer: int, round_: int) -> list:
  """The texts of writer `writer`'s index in round `round_`: 3 + writer of them, all named."""
  return [f"w{writer} r{round_} #{j}" for j in range(3 + writer)]


def _whose(index) -> tuple:
  """`(writer, round)` whose index `index` is, wholly; raises AssertionError for a mix."""
  texts = index.texts
  assert texts, "an empty index"
  writer, round_ = (int(t[1:]) for t in texts[0].split(" ")[:2])
  assert texts == _writer_texts(writer, round_), f"a mix of writers' files: {texts}"
  want = np.random.default_rng([writer, round_]).normal(size=(len(texts), 4)).astype(np.float32)
  want /= np.linalg.norm(want, axis=1, keepdims=True)
  np.testing.assert_allclose(np.asarray(index.embeddings), want, atol=1e-6)
  assert [m["w"] for m in index.metadata] == [writer] * len(texts)
  return writer, round_


def _save_rounds(writer, path, barrier, errors):
  """One of several processes saving into `path` at the same moment, `_ROUNDS` times; writer
  0 also checks after each round that the folder holds exactly one writer's index."""
  try:
    for r in range(_ROUNDS):
      ix = VectorIndex(4)
      texts = _writer_texts(writer, r)
      x = np.random.default_rng([writer, r]).normal(size=(len(texts), 4)).astype(np.float32)
      ix.add(x, texts=texts, metadata=[{"w": writer}] * len(texts))
      barrier.wait(timeout=120)
      try:
        ix.save(path)
      except Exception as e:  # noqa: BLE001 - every failure is reported, not only some
        errors.put(f"round {r}, writer {writer}: save raised {type(e).__name__}: {e}")
      barrier.wait(timeout=120)
      if writer == 0:
        try:
          got = _whose(VectorIndex.load(path))
          if got[1] != r:
            errors.put(f"round {r}: the folder holds round {got[1]}'s index")
        except Exception as e:  # noqa: BLE001
          errors.put(f"round {r}: load raised {type(e).__name__}: {e}")
      barrier.wait(timeout=120)
  except Exception as e:  # noqa: BLE001 - a broken barrier: another process died
    errors.put(f"writer {writer} stopped: {type(e).__name__}: {e}")


def _load_while_saving(path, stop, errors, loads):
  """Loads `path` over and over while the writers save: every load is one writer's index."""
  n = bad = 0
  while not stop.is_set():
    try:
      _whose(VectorIndex.load(path))
      n += 1
    except FileNotFoundError:
      bad += n > 0
    except Exception as e:  # noqa: BLE001
      bad += 1
      if bad <= 3:
        errors.put(f"load while saving raised {type(e).__name__}: {e}")
  if bad:
    errors.put(f"{bad} of {n + bad} loads while saving failed")
  loads.value = n


def test_concurrent_saves_into_one_folder_leave_one_whole_index(tmp_path):
  """Processes saving different indexes into one folder at the same moment used to pick the
  same generation: in some rounds the manifest of one sat beside the vectors of another (the
  folder no longer loaded) or a save died on another's temp file. Saves are serialised by a
  lock file now: after every round the folder holds exactly one writer's index, and a process
  loading it meanwhile always gets one whole index."""
  path = str(tmp_path / "shared.index")
  ctx = multiprocessing.get_context("spawn")
  barrier, errors, stop = ctx.Barrier(_WRITERS), ctx.Queue(), ctx.Event()
  loads = ctx.Value("i", 0)
  writers = [ctx.Process(target=_save_rounds, args=(w, path, barrier, errors))
             for w in range(_WRITERS)]
  reader = ctx.Process(target=_load_while_saving, args=(path, stop, errors, loads))
  for p in writers + [reader]:
    p.start()
  found = []

  def drain(processes, seconds):  # read while they run: a child exits once its queue is read
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.is_alive() for p in processes):
      try:
        found.append(errors.get(timeout=0.2))
      except queue_lib.Empty:
        pass

  drain(writers, 600)
  stop.set()
  drain([reader], 120)
  for p in writers + [reader]:
    p.join(timeout=10)
  while True:
    try:
      found.append(errors.get(timeout=0.5))
    except queue_lib.Empty:
      break
  assert not found, f"{len(found)} failures:\n" + "\n".join(found[:8])
  assert [p.exitcode for p in writers + [reader]] == [0] * (_WRITERS + 1)
  assert loads.value > 0
  _whose(VectorIndex.load(path))
  names = sorted(os.listdir(path))
  assert len(names) == 4 and names[:2] == [".index.lock", "index.json"], names


def test_a_save_waits_for_the_lock_and_names_it_on_timeout(data, tmp_path):
  x, _ = data
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  new = _filled(x[:20], chunks=(0, 20))
  with io_lib.folder_lock(path, index_lib.LOCK, timeout=0):  # another save in progress
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"\.index\.lock' is still locked by another process "
                       r"after 0\.2 s"):
      new.save(path, lock_timeout=0.2)
    assert time.perf_counter() - t0 >= 0.2
  assert len(VectorIndex.load(path)) == 10  # the refused save wrote nothing

  held = threading.Event()

  def hold_briefly():
    with io_lib.folder_lock(path, index_lib.LOCK, timeout=0):
      held.set()
      time.sleep(0.3)

  holder = threading.Thread(target=hold_briefly)
  holder.start()
  held.wait()
  t0 = time.perf_counter()
  new.save(path)  # waits for the holder, then saves
  assert time.perf_counter() - t0 >= 0.2
  holder.join()
  assert len(VectorIndex.load(path)) == 20
  with pytest.raises(ValueError, match="`lock_timeout` must be a finite number"):
    new.save(path, lock_timeout=-1)
  # The lock is an OS lock on the file: a process that dies holding it releases it.
  with open(path / index_lib.LOCK) as f:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_index_files_respect_the_umask(data, tmp_path, umask):
  """Index files were written 0600 whatever the umask (`mkstemp`); every file `atomic_write`
  writes now gets 0666 less the umask, as `open` gives."""
  x, _ = data
  old = os.umask(umask)
  try:
    _filled(x[:10], chunks=(0, 10)).save(tmp_path / "idx")
    _filled(x[:12], chunks=(0, 12)).save(tmp_path / "idx")  # a replaced manifest too
    io_lib.atomic_write(tmp_path / "plain.json", b"{}")
  finally:
    os.umask(old)
  files = list((tmp_path / "idx").iterdir()) + [tmp_path / "plain.json"]
  assert len(files) == 5
  for f in files:
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f


class _Color(enum.IntEnum):
  RED = 1


@pytest.mark.parametrize("meta,error,match", [
    ({"span": (0, 5)}, TypeError, r"`metadata\[1\]\['span'\]` is a tuple.*load back as a list"),
    ((0, 5), TypeError, r"`metadata\[1\]` is a tuple"),
    ({"a": [{3: "x"}]}, TypeError,
     r"`metadata\[1\]\['a'\]\[0\]` has the key 3 of type int.*load back as '3'"),
    ({True: 1}, TypeError, r"key True of type bool.*load back as 'true'"),
    ({None: 1}, TypeError, r"key None of type NoneType.*load back as 'null'"),
    ({(1, 2): 1}, TypeError, r"key \(1, 2\) of type tuple.*JSON cannot store it"),
    ({"score": np.float64(0.5)}, TypeError, r"numpy\.float64, which would load back.*plain float"),
    ({"n": np.int64(3)}, TypeError, r"numpy\.int64, which JSON cannot store"),
    ({"c": _Color.RED}, TypeError, r"_Color, which would load back.*plain int"),
    (collections.OrderedDict(a=1), TypeError, r"OrderedDict, which would load back.*plain dict"),
    ({"s": {1, 2}}, TypeError, r"`metadata\[1\]\['s'\]` has type set, which JSON cannot store"),
    ({"w": float("nan")}, ValueError, r"metadata\[1\]\['w'\]` is nan.*NaN and infinity"),
])
def test_metadata_a_json_round_trip_would_change_is_refused_at_add(meta, error, match):
  """Tuples came back as lists and int keys as str keys, silently; now `add` refuses what
  JSON cannot keep exactly, naming the place, and adds nothing."""
  ix = VectorIndex(2)
  with pytest.raises(error, match=match):
    ix.add(np.eye(2, dtype=np.float32), texts=["a", "b"], metadata=[{"ok": [1]}, meta])
  assert len(ix) == 0 and ix.metadata == []
  with pytest.raises(error, match=match.replace(r"metadata\[1\]", r"info\['k'\]")):
    VectorIndex(2, info={"k": meta})  # the index's own facts: the same rule


def test_metadata_of_every_json_type_round_trips_exactly(tmp_path):
  meta = [{"span": [0, 5], "ok": True, "n": 3, "f": -0.0, "s": "\ud800", "z": None,
           "nested": {"list": [[], {}, [1.5, "x"]]}}, [], "plain", 7, None]
  ix = VectorIndex(2, info={"model": "m", "k": [1, 2]})
  ix.add(np.ones((5, 2), np.float32), metadata=meta)
  back = VectorIndex.load(ix.save(tmp_path / "idx"))
  assert back.metadata == meta and back.info == ix.info
  assert repr(back.metadata) == repr(meta)  # the same types, not only equal values
  ix.metadata[0] = {"span": (0, 5)}  # changed after `add`: refused by `save`, which writes nothing
  with pytest.raises(TypeError, match=r"metadata\[0\]\['span'\]` is a tuple"):
    ix.save(tmp_path / "idx")
  assert VectorIndex.load(tmp_path / "idx").metadata == meta


# -- a tampered index folder (it may come from someone else) ------------------------------------


def _tamper(path, **changes):
  man = json.loads((path / "index.json").read_text())
  man.update(changes)
  (path / "index.json").write_text(json.dumps(man))
  return man


@pytest.mark.parametrize("outside", ["../victim.txt", "ABSOLUTE", "sub/../../victim.txt", ".."])
def test_a_tampered_manifest_never_deletes_or_reads_outside_its_folder(data, tmp_path, outside):
  x, _ = data
  victim = tmp_path / "victim.txt"
  victim.write_text("keep me")
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  name = str(victim) if outside == "ABSOLUTE" else outside
  _tamper(path, records=name)
  for act in (lambda: _filled(x[:5], chunks=(0, 5)).save(path), lambda: VectorIndex.load(path),
              lambda: VectorIndex.check_save_path(path)):
    with pytest.raises(ValueError, match=r"`records` in index.json.*not a plain file name"):
      act()
  assert victim.read_text() == "keep me"


def test_cli_index_build_over_a_tampered_index_deletes_nothing(data, tmp_path, monkeypatch, capsys):
  from jaxsel import cli
  from jaxsel.testing import tiny_encoder
  x, _ = data
  victim = tmp_path / "victim.txt"
  victim.write_text("keep me")
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "a.txt").write_text("One document. It has two sentences.\n")
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  _tamper(path, vectors="../victim.txt")
  monkeypatch.setattr(cli.common, "load_model", lambda name: tiny_encoder())
  code = cli.main(["index", "build", str(tmp_path / "docs"), "--out", str(path), "--quiet"],
                  out=io.StringIO())
  assert code == 1 and "not a plain file name" in capsys.readouterr().err
  assert victim.read_text() == "keep me"


def test_a_tampered_journal_never_deletes_outside_its_folder(data, tmp_path):
  x, _ = data
  victim = tmp_path / "victim2.txt"
  victim.write_text("keep me")
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  for name in ("../victim2.txt", str(victim), "..", "index.json"):
    (path / index_lib.PENDING).write_text(json.dumps({"format": "jaxsel-index", "files": [name]}))
    with pytest.raises(ValueError, match=r"\.index-pending\.json files\[0\].*not a plain file"):
      _filled(x[:5], chunks=(0, 5)).save(path)
    assert victim.read_text() == "keep me"
  assert len(VectorIndex.load(path)) == 10  # the index itself is untouched


def test_an_index_reads_only_regular_files_of_the_recorded_size(data, tmp_path):
  x, _ = data
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  man = json.loads((path / "index.json").read_text())
  assert man["bytes"][man["vectors"]] == (path / man["vectors"]).stat().st_size
  os.mkfifo(path / "fifo")  # reading it would block for ever
  (path / "zeros").symlink_to("/dev/zero")  # reading it would never end
  (path / "big").write_bytes(b"\0" * 4096)
  for name, why in (("fifo", "not a regular file"), ("zeros", "cannot be opened as a regular"),
                    ("big", "holds 4,096 bytes, expected")):
    _tamper(path, vectors=name, bytes={name: 100, man["records"]: man["bytes"][man["records"]]})
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"{name} .*{why}"):
      VectorIndex.load(path)
    assert time.monotonic() - start < 2
  (path / "index.json").unlink()
  (path / "index.json").symlink_to("/dev/zero")
  with pytest.raises(ValueError, match="index.json .*cannot be opened as a regular"):
    VectorIndex.load(path)


@pytest.mark.parametrize("field,value", [("count", 10**12), ("dim", -1), ("count", "10")])
def test_a_tampered_manifest_count_is_refused(data, tmp_path, field, value):
  x, _ = data
  path = tmp_path / "idx"
  _filled(x[:10], chunks=(0, 10)).save(path)
  _tamper(path, **{field: value})
  with pytest.raises(ValueError, match=f"`{field}` in index.json|{field}"):
    VectorIndex.load(path)


def test_metadata_nested_too_deep_is_refused_by_name():
  deep = []
  for _ in range(5000):
    deep = [deep]
  with pytest.raises(ValueError, match=r"`metadata\[0\].*more than 100 levels deep"):
    VectorIndex(2).add(np.ones((1, 2), np.float32), metadata=[deep])


def test_adding_more_than_memory_holds_is_refused_before_any_copy(monkeypatch):
  from jaxsel._src import checks
  monkeypatch.setattr(checks, "available_bytes", lambda: 16 << 30)
  huge = np.broadcast_to(np.ones(4096, np.float32), (1_000_000, 4096))  # a view: no memory
  tracemalloc.start()
  try:
    with pytest.raises(ValueError, match=r"`embeddings`=shape \[1,000,000, 4096\] needs about "
                       r"[\d.]+ GiB .*only 16.0 GiB is free; keep fewer vectors"):
      VectorIndex(4096).add(huge)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < 64 << 20  # NumPy allocations are traced: the 16 GiB of vectors were not copied
