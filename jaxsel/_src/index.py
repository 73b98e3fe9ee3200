"""The embedded default vector store: exact top-k by inner product, on device, saved to disk.

Shape legend: N stored vectors, D dimension, Q queries, K hits per query, S device shards.

Embeddings are L2-normalised when added, so the inner product is cosine similarity. Search is
one jit-compiled function: scores `[Q, N]` by a matrix product, then exact `lax.top_k` in two
stages (per shard, then over the `S·K` survivors), which is exact and lets the vectors live
sharded along N over a 1-D device `Mesh` when there are several devices. Storage grows by
doubling, so adding vectors recompiles the search only a logarithmic number of times.

On disk an index is a folder:

* `index.json`: the manifest (format, dimension, count, file names, SHA-256 of each file, user
  `info` such as the encoder that made the vectors);
* `vectors-<generation>.safetensors`: the `[N, D]` float32 embeddings;
* `records-<generation>.jsonl`: one JSON object per vector, `{"text": ..., "metadata": ...}`,
  one per line. Lines end with b"\n" only (JSON escapes it inside strings), so texts holding
  U+2028, U+2029 or U+0085 load back; lone surrogates (a valid Python `str`, not valid Unicode
  text) are written as their code points' UTF-8-style bytes (`surrogatepass`), so every `str`
  round-trips exactly. Metadata must be what JSON keeps exactly (dicts with str keys, lists,
  str, int, float, bool, None): `add` refuses anything a round trip would change (a tuple
  would come back a list, an int key a str key) and NaN or infinity (JSON has no such numbers);
* `.index-pending.json`, only while a save is in progress: the journal of the files it may leave;
* `.index.lock`: the lock file that serialises saves (kept; it holds nothing).

A save holds an OS lock on `.index.lock` (`fcntl.flock`) from reading the old manifest to the
end, so saves into one folder from several threads or processes run one after the other (the
last one's index stays); a save that waits longer than `lock_timeout` raises `TimeoutError`
naming the lock file. It first writes its journal (the names of the files it will write and of
the old generation's files it will drop), writes and fsyncs the new generation's files, then
replaces the manifest with one atomic `os.replace`; only then are the old generation's files and
the journal removed. A crash at any point leaves either the old index or the new one, both
complete, and the next save removes what the crashed one left (the files its journal names, and
their `atomic_write` temp files). `load` takes no lock: it reads one manifest and the files it
names, and if a save has meanwhile committed another generation (so a file is gone) it reads
the new manifest instead, so it returns one committed index, never a mix.

An index only ever deletes files it wrote: the files its manifest or its journal names, and the
temp files of those names. It never saves into a folder that holds other files but no index (that
is refused before anything is written); other files beside an index are left alone.

An index folder may come from someone else, so every file name read from its manifest or journal
must be a plain file name inside the folder (no separator, not `.` or `..`, none of the index's
own control files); a file it reads must be a regular file (not a link, a FIFO or a device) of
the size the manifest records (`bytes`), checked before reading. Anything else is refused with a
`ValueError` naming the entry: an index never reads, writes or deletes outside its folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from safetensors.numpy import load as st_load, save as st_save

from jaxsel._src import checks
from jaxsel._src.io import atomic_write, folder_lock, is_tmp_of, read_regular
from jaxsel._src.numerics import l2_normalize

Array = jax.Array

FORMAT = "jaxsel-index"
VERSION = 1
MANIFEST = "index.json"
PENDING = ".index-pending.json"  # the journal of a save in progress
LOCK = ".index.lock"  # flock-ed by a save from start to end
LOCK_TIMEOUT = 600.0  # seconds a save waits for another save of the same folder
_LOAD_TRIES = 100  # manifests `load` reads while saves keep replacing them
_MAX_CONTROL_BYTES = 64 << 20  # the most `load` reads of a manifest or journal
_MIN_CAPACITY = 64


class SearchHits(NamedTuple):
  """Top-k hits, best first. `[K]` fields for one query, `[Q, K]` for a batch."""
  scores: Array  # [Q, K] cosine similarity, -inf where there are fewer than K vectors
  indices: Array  # [Q, K] int32 row of each hit in the index, -1 where there is none


@functools.partial(jax.jit, static_argnames=("k", "shards"))
def top_k_inner_product(vectors: Array, count: Array, queries: Array, *, k: int,
                        shards: int = 1) -> SearchHits:
  """Exact top-k of `queries [Q, D] @ vectors[:count].T`; rows from `count` on are padding.

  `vectors` `[N, D]` may be sharded along N in `shards` equal blocks: each block keeps its own
  top-k first, so only `S·K` scores per query meet in the final `lax.top_k`. Ties go to the
  lower row, as in one `lax.top_k` over all rows.
  """
  n = vectors.shape[0]
  q = queries.shape[0]
  scores = jnp.einsum("qd,nd->qn", queries, vectors, precision=lax.Precision.HIGHEST)
  scores = jnp.where(jnp.arange(n) < count, scores, -jnp.inf)
  per = n // shards
  kk = min(k, per)
  top, idx = lax.top_k(scores.reshape(q, shards, per), kk)  # [Q, S, kk]
  idx = idx + (jnp.arange(shards) * per)[:, None]
  top, pos = lax.top_k(top.reshape(q, shards * kk), k)
  idx = jnp.take_along_axis(idx.reshape(q, shards * kk), pos, axis=-1)
  return SearchHits(top, jnp.where(top > -jnp.inf, idx, -1).astype(jnp.int32))


@jax.jit
def _write_rows(vectors: Array, rows: Array, start: Array) -> Array:
  return lax.dynamic_update_slice(vectors, rows.astype(vectors.dtype), (start, 0))


class VectorIndex:
  """Exact vector index over normalised embeddings, with texts and metadata per vector.

  Example:
    >>> index = VectorIndex(dim=384)
    >>> index.add(passage_embeddings, texts=passages)          # [N, 384]
    >>> hits = index.search(query_embeddings, k=10)           # SearchHits [Q, 10]
    >>> index.save("my.index"); index = VectorIndex.load("my.index")

  Args:
    dim: embedding dimension D.
    mesh: a 1-D `jax.sharding.Mesh` to shard the vectors along N. Default: all devices when
      there are several (`jax.devices()`), none with one device.
    info: facts about the index saved with it (e.g. the encoder's name), a dict of what JSON
      keeps exactly (see `add`).
  """

  def __init__(self, dim: int, *, mesh: Optional[Mesh] = None, info: Optional[dict] = None):
    self.dim = checks.integer(dim, "dim", what=" (the embedding dimension)")
    if mesh is None and jax.device_count() > 1:
      mesh = Mesh(np.asarray(jax.devices()), ("n",))
    if mesh is not None and len(mesh.axis_names) != 1:
      raise ValueError(f"`mesh` must be 1-D (one axis to shard N over), got axes {mesh.axis_names}.")
    self.mesh = mesh
    self.info = dict(info or {})
    _check_json(self.info, "info")
    self.texts: list = []
    self.metadata: list = []
    self._count = 0
    self._vectors = self._place(np.zeros((self._round(_MIN_CAPACITY), self.dim), np.float32))

  # -- storage ---------------------------------------------------------------------------------
  @property
  def shards(self) -> int:
    return 1 if self.mesh is None else self.mesh.devices.size

  def _round(self, n: int) -> int:
    s = self.shards
    return -(-max(n, 1) // s) * s

  def _place(self, x) -> Array:
    if self.mesh is None:
      return jnp.asarray(x)
    return jax.device_put(x, NamedSharding(self.mesh, P(self.mesh.axis_names[0], None)))

  def _grown(self, need: int) -> int:
    """The capacity storage doubles to for `need` rows (itself when it holds them already)."""
    cap = self.capacity
    while cap < need:
      cap *= 2
    return self._round(cap)

  def __len__(self) -> int:
    return self._count

  @property
  def capacity(self) -> int:
    return self._vectors.shape[0]

  @property
  def embeddings(self) -> Array:
    """The stored, normalised embeddings, `[N, D]`."""
    return self._vectors[:self._count]

  def __repr__(self) -> str:
    return f"VectorIndex(dim={self.dim}, size={self._count}, shards={self.shards})"

  def add(self, embeddings, texts: Optional[Sequence[str]] = None,
          metadata: Optional[Sequence[Any]] = None) -> np.ndarray:
    """Adds `embeddings` `[M, D]` (normalised here) with optional texts and metadata.

    Returns the `[M]` row ids they got. Texts may be any `str`. Each metadata entry must be
    made of what JSON keeps exactly, so that it loads back equal and of the same types: dicts
    with `str` keys, lists, `str`, `int`, `float`, `bool` and None. Anything else is refused
    with an error naming the entry and the place in it: a tuple (it would load as a list), a
    non-str key (it would load as a str), NaN or infinity (JSON has no such numbers), a NumPy
    scalar or other subclass (it would load as the plain type), an object JSON cannot write.
    """
    shape = getattr(embeddings, "shape", None)
    if shape is not None and len(shape) == 2 and shape[1] == self.dim:  # before any copy
      m = int(shape[0])
      cap = self._grown(self._count + m)
      # The grown storage and its host copy, the new rows and their normalised copy.
      grown = 2 * cap // self.shards if cap > self.capacity else 0
      checks.fits(4 * self.dim * (grown + 2 * m),
                  "embeddings", f"shape [{m:,}, {self.dim}]", what="the index's storage on the device",
                  fix="keep fewer vectors in one index (each takes 4·D bytes on the device), "
                  "use a smaller embedding dimension, or shard it over several devices (`mesh`)")
    x = checks.as_float_array(embeddings, "embeddings")
    if x.ndim == 1:
      x = x[None]
    if x.ndim != 2 or x.shape[1] != self.dim:
      raise ValueError(f"`embeddings` must be [M, {self.dim}] for this index of dimension "
                       f"{self.dim}, got shape {tuple(x.shape)}.")
    checks.check_finite(x, "embeddings")
    m = x.shape[0]
    if m and bool((jnp.linalg.norm(x, axis=-1) == 0).any()):
      raise ValueError("`embeddings` has an all-zero row, which has no direction to normalise.")
    texts = [None] * m if texts is None else list(texts)
    metadata = [None] * m if metadata is None else list(metadata)
    for name, v in (("texts", texts), ("metadata", metadata)):
      if len(v) != m:
        raise ValueError(f"`{name}` must have one entry per embedding: {len(v)} for {m}.")
    for i, (t, meta) in enumerate(zip(texts, metadata)):
      if t is not None and not isinstance(t, str):
        raise TypeError(f"`texts[{i}]` must be a str or None, got {type(t).__name__}.")
      _record_line(t, meta, i)  # refuses what `save` could not write
    if m == 0:
      return np.zeros((0,), np.int64)
    need = self._count + m
    if need > self.capacity:
      grown = np.zeros((self._grown(need), self.dim), np.float32)
      grown[:self._count] = np.asarray(self.embeddings)
      self._vectors = self._place(grown)
    self._vectors = _write_rows(self._vectors, l2_normalize(x.astype(jnp.float32)),
                                jnp.asarray(self._count, jnp.int32))
    ids = np.arange(self._count, need)
    self._count = need
    self.texts += texts
    self.metadata += metadata
    return ids

  # -- search ----------------------------------------------------------------------------------
  def search(self, queries, k: int) -> SearchHits:
    """Exact top-`k` rows by cosine similarity. `queries` `[D]` gives `[K]` fields, `[Q, D]`
    gives `[Q, K]`. Missing hits (k > size) are -1 with score -inf."""
    checks.integer(k, "k")
    x = checks.as_float_array(queries, "queries")
    single = x.ndim == 1
    if single:
      x = x[None]
    if x.ndim != 2 or x.shape[1] != self.dim:
      raise ValueError(f"`queries` must be [Q, {self.dim}] (or [{self.dim}]) to match the index "
                       f"dimension {self.dim}, got shape {tuple(jnp.shape(queries))}. Embed the "
                       "queries with the encoder that built the index.")
    checks.check_finite(x, "queries")
    k = int(k)
    if k > self.capacity:  # top_k needs k <= rows; grow the padding instead of failing
      grown = np.zeros((self._round(k), self.dim), np.float32)
      grown[:self._count] = np.asarray(self.embeddings)
      self._vectors = self._place(grown)
    hits = top_k_inner_product(self._vectors, jnp.asarray(self._count, jnp.int32),
                               l2_normalize(x.astype(jnp.float32)), k=k, shards=self.shards)
    return SearchHits(hits.scores[0], hits.indices[0]) if single else hits

  # -- persistence -----------------------------------------------------------------------------
  @staticmethod
  def check_save_path(path) -> None:
    """Raises the error `save(path)` would raise for the folder itself (a file, or a folder of
    other files with no index), before any work; writes nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
      raise ValueError(f"`path` {str(path)!r} is a file; an index is saved as a folder.")
    _claim_folder(path)

  def save(self, path, *, lock_timeout: float = LOCK_TIMEOUT) -> Path:
    """Saves to folder `path` atomically (see the module docstring); returns the path.

    `path` must be a new or empty folder, or one that holds a jaxsel index (which is replaced;
    other files beside it are kept). A folder holding files but no index is refused with a
    `ValueError` before anything is written. Saves into one folder are serialised by a lock
    file in it: a save waits for the one in progress, up to `lock_timeout` seconds, then
    raises `TimeoutError` naming the lock file.
    """
    path = Path(path)
    number = isinstance(lock_timeout, (int, float)) and not isinstance(lock_timeout, bool)
    if not number or not lock_timeout >= 0 or lock_timeout == float("inf"):
      raise ValueError(f"`lock_timeout` must be a finite number of seconds >= 0, got "
                       f"{lock_timeout!r}.")
    if path.exists() and not path.is_dir():
      raise ValueError(f"`path` {str(path)!r} is a file; an index is saved as a folder.")
    _claim_folder(path)  # refuses a folder of other files before anything is written
    vec_bytes = st_save({"embeddings": np.asarray(self.embeddings, np.float32)},
                        metadata={"format": FORMAT})
    rec_bytes = "".join(_record_line(t, m, i) + "\n" for i, (t, m) in enumerate(
        zip(self.texts, self.metadata))).encode("utf-8", "surrogatepass")
    _check_json(self.info, "info")
    path.mkdir(parents=True, exist_ok=True)
    with folder_lock(path, LOCK, timeout=lock_timeout):
      # Under the lock: the manifest read here stays the current one until this save commits.
      old, pending = _claim_folder(path)
      current = _data_files(old)
      gen = _free_generation(path, 1 + (old["generation"] if old and isinstance(
          old.get("generation"), int) else 0), current, pending)
      vectors_name, records_name = _file_names(gen)
      manifest = {
          "format": FORMAT, "version": VERSION, "generation": gen, "dim": self.dim,
          "count": self._count, "vectors": vectors_name, "records": records_name,
          "sha256": {vectors_name: hashlib.sha256(vec_bytes).hexdigest(),
                     records_name: hashlib.sha256(rec_bytes).hexdigest()},
          "bytes": {vectors_name: len(vec_bytes), records_name: len(rec_bytes)},
          "info": self.info,
      }
      man_bytes = (json.dumps(manifest, indent=1) + "\n").encode("utf-8")
      _remove_leftovers(path, current, pending)
      journal = {"format": FORMAT, "files": [vectors_name, records_name] + current}
      _atomic_write(path / PENDING, (json.dumps(journal) + "\n").encode("utf-8"))
      _atomic_write(path / vectors_name, vec_bytes)
      _atomic_write(path / records_name, rec_bytes)
      _atomic_write(path / MANIFEST, man_bytes)  # the commit point
      for name in current:  # the old generation, now that its successor is committed
        if name not in (vectors_name, records_name):
          _remove(path, name)
      (path / PENDING).unlink(missing_ok=True)
    return path

  @classmethod
  def load(cls, path, *, mesh: Optional[Mesh] = None) -> "VectorIndex":
    """Loads an index saved by `save`; checks sizes and checksums and names a corrupt file."""
    path = Path(path)
    if not os.path.lexists(path / MANIFEST):
      raise FileNotFoundError(f"No jaxsel index at {str(path)!r} (missing {MANIFEST}); build one "
                              "with `VectorIndex.save` or `jaxsel index build`.")
    raw = _manifest_bytes(path)
    for _ in range(_LOAD_TRIES):
      man = _read_manifest(path, raw)
      try:
        blobs = _read_generation(path, man)
        break
      except ValueError:
        newer = _manifest_bytes(path)
        if newer == raw:  # no save committed meanwhile: the files really are bad
          raise
        raw = newer  # a save replaced the generation this manifest names: read its successor
    else:
      raise ValueError(f"Index {str(path)!r} was replaced {_LOAD_TRIES} times while it was being "
                       "read (saves into it without pause); load it when the saves stop.")
    try:
      vectors = st_load(blobs["vectors"])["embeddings"]
      records = _parse_records(blobs["records"])
    except Exception as e:  # checksums matched, so the writer itself was broken
      raise ValueError(f"Corrupt index {str(path)!r}: cannot parse its files ({e}).") from None
    if vectors.shape != (man["count"], man["dim"]) or len(records) != man["count"]:
      raise ValueError(f"Corrupt index {str(path)!r}: {MANIFEST} says {man['count']} vectors of "
                       f"dimension {man['dim']}, files hold {vectors.shape} and {len(records)} records.")
    index = cls(man["dim"], mesh=mesh, info=man.get("info"))
    n = man["count"]
    if n:
      padded = np.zeros((index._round(max(n, _MIN_CAPACITY)), index.dim), np.float32)
      padded[:n] = vectors
      index._vectors = index._place(padded)
      index._count = n
      index.texts = [r.get("text") for r in records]
      index.metadata = [r.get("metadata") for r in records]
    return index


def _record_line(text: Optional[str], meta: Any, i: int) -> str:
  """Record `i` as one line of JSON (without its b"\n"); names the metadata JSON cannot keep."""
  _check_json(meta, f"metadata[{i}]")
  return json.dumps({"text": text, "metadata": meta}, ensure_ascii=False, allow_nan=False)


_JSON_SCALARS = (str, int, bool, type(None))
MAX_JSON_DEPTH = 100  # nested lists and dicts in one metadata entry (JSON parsers recurse)


def _check_json(x: Any, name: str, _path: frozenset = frozenset()) -> None:
  """Raises unless `x` loads back from JSON equal and of the same types: dicts with `str` keys,
  lists, and `str`, `int`, `float` (finite), `bool`, None, exactly these types (a subclass such
  as a NumPy scalar or an `IntEnum` would load as the plain type). `name` is where `x` sits in
  the caller's argument, e.g. "metadata[3]"; the error extends it to the offending place."""
  kind = type(x)
  if kind in _JSON_SCALARS:
    return
  if kind is float:
    if x != x or x in (float("inf"), float("-inf")):
      raise ValueError(f"`{name}` is {x!r}, which cannot be saved: NaN and infinity are refused "
                       "(JSON has no such numbers); store None or a string instead.")
    return
  if kind in (list, dict):
    if id(x) in _path:
      raise ValueError(f"`{name}` contains itself, which JSON cannot store.")
    if len(_path) >= MAX_JSON_DEPTH:
      shown = name if len(name) <= 80 else name[:60] + "..." + name[-17:]
      raise ValueError(f"`{shown}` nests lists and dicts more than {MAX_JSON_DEPTH} levels deep, "
                       "which is refused (reading it back would exhaust Python's recursion); "
                       "flatten it or store it as a string.")
    inner = _path | {id(x)}
    if kind is list:
      for j, item in enumerate(x):
        _check_json(item, f"{name}[{j}]", inner)
      return
    for key, item in x.items():
      if type(key) is not str:
        becomes = (f"it would load back as {json.dumps(key)!r}"
                   if type(key) in (int, float, bool, type(None)) else "JSON cannot store it")
        raise TypeError(f"`{name}` has the key {key!r} of type {_type_name(type(key))}; JSON "
                        f"keys are strings, so {becomes}. Use str keys (e.g. str(key)).")
      _check_json(item, f"{name}[{key!r}]", inner)
    return
  if kind is tuple:
    raise TypeError(f"`{name}` is a tuple, which JSON keeps as a list (it would load back as a "
                    "list); pass a list.")
  plain = next((t for t in (dict, list, str, bool, int, float) if isinstance(x, t)), None)
  if plain is not None:
    raise TypeError(f"`{name}` has type {_type_name(kind)}, which would load back from JSON as a "
                    f"plain {plain.__name__}; pass {plain.__name__}(...) of it.")
  raise TypeError(f"`{name}` has type {_type_name(kind)}, which JSON cannot store; metadata and "
                  "info hold dicts with str keys, lists, str, int, float, bool and None.")


def _type_name(kind: type) -> str:
  if kind.__module__ == "builtins":
    return kind.__qualname__
  return f"{kind.__module__}.{kind.__qualname__}"


def _parse_records(blob: bytes) -> list:
  """Inverse of the records file `save` writes: split on b"\n" only, never `str.splitlines`
  (which also splits at U+2028, U+2029, U+0085 and other characters a text may hold)."""
  text = blob.decode("utf-8", "surrogatepass")
  return [json.loads(line) for line in text.split("\n")[:-1]]


def _file_names(gen: int) -> tuple:
  return f"vectors-{gen:06d}.safetensors", f"records-{gen:06d}.jsonl"


def _data_files(manifest: Optional[dict]) -> list:
  return [] if manifest is None else [manifest["vectors"], manifest["records"]]


def _claim_folder(path: Path) -> tuple:
  """`(manifest or None, names in the journal of an interrupted save)` of folder `path`.

  Writes nothing. Refuses a folder that holds files but neither an index nor the journal of
  one, since saving there could overwrite or delete files the index did not write (the lock
  file and the temp file of a journal being written are a save's own: another save may be
  starting there)."""
  if not path.is_dir():
    return None, []
  old = _read_manifest(path, _manifest_bytes(path)) if (path / MANIFEST).exists() else None
  pending = _read_pending(path) if (path / PENDING).exists() else []
  if old is None and not (path / PENDING).exists():
    others = sorted(f.name for f in path.iterdir()
                    if f.name != LOCK and not is_tmp_of(f.name, PENDING))
    if others:
      shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
      raise ValueError(f"`path` {str(path)!r} holds files ({shown}) but no jaxsel index "
                       f"(no {MANIFEST}); saving there could overwrite them. Save the index into "
                       "a new or empty folder, e.g. a subfolder of this one.")
  return old, pending


def _read_pending(path: Path) -> list:
  try:
    journal = json.loads(_read_own(path, PENDING, _MAX_CONTROL_BYTES, "the journal").decode("utf-8"))
  except (ValueError, RecursionError):
    journal = None
  names = journal.get("files") if isinstance(journal, dict) and journal.get(
      "format") == FORMAT else None
  if not isinstance(names, list):
    raise ValueError(f"Corrupt index {str(path)!r}: {PENDING}, the journal of an interrupted "
                     "save, is unreadable, so the files that save left cannot be told apart from "
                     f"yours. Remove them and {PENDING} by hand, then save again.")
  for i, name in enumerate(names):
    _check_name(path, name, f"{PENDING} files[{i}]")
  return names


def _free_generation(path: Path, gen: int, current: list, pending: list) -> int:
  """The first generation from `gen` whose file names neither belong to the current index nor
  are taken by a file the index did not write (which is kept, never overwritten)."""
  while any(n in current or ((path / n).exists() and n not in pending) for n in _file_names(gen)):
    gen += 1
  return gen


def _remove_leftovers(path: Path, current: list, pending: list) -> None:
  """Removes what an interrupted save left: the files its journal names that the current
  manifest does not, and the `atomic_write` temp files of the index's own file names."""
  for name in pending:
    if name not in current:
      _remove(path, name)
  own = set(pending) | set(current) | {MANIFEST, PENDING}
  for f in path.iterdir():
    if any(is_tmp_of(f.name, name) for name in own) and f.is_file():
      f.unlink(missing_ok=True)


def _manifest_bytes(path: Path) -> bytes:
  return _read_own(path, MANIFEST, _MAX_CONTROL_BYTES, "the manifest")


def _check_name(path: Path, name: Any, entry: str) -> str:
  """`name`, read from the index's own files at `entry`, when it is a plain file name of a
  data file inside folder `path`; else a ValueError naming the entry (a tampered index must
  never make a save or load touch anything outside its folder)."""
  if not (isinstance(name, str) and name and name not in (".", "..", MANIFEST, PENDING, LOCK)
          and "/" not in name and "\\" not in name and "\0" not in name
          and os.path.basename(name) == name and not os.path.isabs(name)):
    raise ValueError(f"Corrupt index {str(path)!r}: {entry} is {name!r}, which is not a plain "
                     "file name inside the index folder (no separators, no '..', not absolute); "
                     "the index was modified by hand or comes from an untrusted source. Rebuild it.")
  return name


def _read_own(path: Path, name: str, size: Optional[int], entry: str, *,
              exact: bool = False) -> bytes:
  """The bytes of the index's file `name` in folder `path`: a regular file (`read_regular`)
  of `size` bytes (`exact`) or at most `size` (None: any size); else a ValueError naming
  `entry`, where `name` was read from."""
  where = f"Corrupt index {str(path)!r}: {name} ({entry})"
  try:
    return read_regular(path / name, **{"size" if exact else "limit": size})
  except FileNotFoundError:
    raise ValueError(f"{where} is missing.") from None
  except (OSError, ValueError) as e:
    raise ValueError(f"{where} {e.strerror if isinstance(e, OSError) else e}: an index holds "
                     "only regular files of the sizes its manifest records (truncated, replaced "
                     "or modified); rebuild the index.") from None


def _remove(path: Path, name: str) -> None:
  """Deletes the index's own file `name` (a checked plain name) in `path` unless it is a
  folder; a link is removed itself, never what it points to."""
  try:
    if not stat.S_ISDIR(os.lstat(path / name).st_mode):
      os.unlink(path / name)
  except FileNotFoundError:
    pass


def _read_generation(path: Path, man: dict) -> dict:
  """The bytes of the files manifest `man` names, `{"vectors": ..., "records": ...}`; a
  ValueError names a missing file or one that does not match its checksum."""
  blobs = {}
  for key in ("vectors", "records"):
    size = man.get("bytes", {}).get(man[key])
    blobs[key] = _read_own(path, man[key], size, f"`{key}` in {MANIFEST}", exact=size is not None)
    if hashlib.sha256(blobs[key]).hexdigest() != man["sha256"].get(man[key]):
      raise ValueError(f"Corrupt index {str(path)!r}: {man[key]} does not match its checksum "
                       f"in {MANIFEST} (truncated or modified); rebuild the index.")
  return blobs


def _read_manifest(path: Path, raw: bytes) -> dict:
  """The manifest of the index at `path`, parsed from its bytes `raw` and checked."""
  try:
    man = json.loads(raw.decode("utf-8"))
  except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, deep nesting
    raise ValueError(f"Corrupt index {str(path)!r}: {MANIFEST} is not valid JSON ({e}).") from None
  if not isinstance(man, dict) or man.get("format") != FORMAT:
    raise ValueError(f"{str(path / MANIFEST)!r} is not a jaxsel index manifest.")
  if man.get("version") != VERSION:
    raise ValueError(f"Index {str(path)!r} has format version {man.get('version')}; this jaxsel "
                     f"reads version {VERSION}.")
  missing = [k for k in ("dim", "count", "vectors", "records", "sha256") if k not in man]
  if missing:
    raise ValueError(f"Corrupt index {str(path)!r}: {MANIFEST} lacks {', '.join(missing)}.")
  for key in ("vectors", "records"):
    _check_name(path, man[key], f"`{key}` in {MANIFEST}")
  for key in ("dim", "count"):
    if type(man[key]) is not int or man[key] < (key == "dim"):
      raise ValueError(f"Corrupt index {str(path)!r}: `{key}` in {MANIFEST} is {man[key]!r}, "
                       "not a count.")
  sizes = man.get("bytes", {})
  if not isinstance(man["sha256"], dict) or not isinstance(sizes, dict) or not all(
      type(sizes.get(man[k], 0)) is int and sizes.get(man[k], 0) >= 0 for k in ("vectors", "records")):
    raise ValueError(f"Corrupt index {str(path)!r}: `sha256` and `bytes` in {MANIFEST} must map "
                     "the file names to checksums and sizes.")
  return man


_atomic_write = atomic_write  # module attribute, so tests can simulate a crash mid-write
