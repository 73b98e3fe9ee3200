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
  round-trips exactly. Metadata holding NaN or infinity is refused by `add` (JSON has no such
  numbers);
* `.index-pending.json`, only while a save is in progress: the journal of the files it may leave.

A save first writes its journal (the names of the files it will write and of the old generation's
files it will drop), writes and fsyncs the new generation's files, then replaces the manifest with
one atomic `os.replace`; only then are the old generation's files and the journal removed. A crash
at any point leaves either the old index or the new one, both complete, and the next save removes
what the crashed one left (the files its journal names, and their `atomic_write` temp files).

An index only ever deletes files it wrote: the files its manifest or its journal names, and the
temp files of those names. It never saves into a folder that holds other files but no index (that
is refused before anything is written); other files beside an index are left alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from safetensors.numpy import load as st_load, save as st_save

from jaxsel._src import checks
from jaxsel._src.io import atomic_write, is_tmp_of
from jaxsel._src.numerics import l2_normalize

Array = jax.Array

FORMAT = "jaxsel-index"
VERSION = 1
MANIFEST = "index.json"
PENDING = ".index-pending.json"  # the journal of a save in progress
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
    info: JSON-serialisable facts about the index saved with it (e.g. the encoder's name).
  """

  def __init__(self, dim: int, *, mesh: Optional[Mesh] = None, info: Optional[dict] = None):
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
      raise ValueError(f"`dim` must be a positive int (the embedding dimension), got {dim!r}.")
    self.dim = int(dim)
    if mesh is None and jax.device_count() > 1:
      mesh = Mesh(np.asarray(jax.devices()), ("n",))
    if mesh is not None and len(mesh.axis_names) != 1:
      raise ValueError(f"`mesh` must be 1-D (one axis to shard N over), got axes {mesh.axis_names}.")
    self.mesh = mesh
    self.info = dict(info or {})
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

    Returns the `[M]` row ids they got. Texts may be any `str`. Metadata must be
    JSON-serialisable without NaN or infinity (JSON has no such numbers; a `ValueError` names
    the `metadata[i]` holding one: store None or a string instead).
    """
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
      cap = self.capacity
      while cap < need:
        cap *= 2
      grown = np.zeros((self._round(cap), self.dim), np.float32)
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
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
      raise ValueError(f"`k` must be a positive int, got {k!r}.")
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

  def save(self, path) -> Path:
    """Saves to folder `path` atomically (see the module docstring); returns the path.

    `path` must be a new or empty folder, or one that holds a jaxsel index (which is replaced;
    other files beside it are kept). A folder holding files but no index is refused with a
    `ValueError` before anything is written.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
      raise ValueError(f"`path` {str(path)!r} is a file; an index is saved as a folder.")
    old, pending = _claim_folder(path)
    current = _data_files(old)
    gen = _free_generation(path, 1 + (old["generation"] if old and isinstance(
        old.get("generation"), int) else 0), current, pending)
    vectors_name, records_name = _file_names(gen)
    vec_bytes = st_save({"embeddings": np.asarray(self.embeddings, np.float32)},
                        metadata={"format": FORMAT})
    rec_bytes = "".join(_record_line(t, m, i) + "\n" for i, (t, m) in enumerate(
        zip(self.texts, self.metadata))).encode("utf-8", "surrogatepass")
    manifest = {
        "format": FORMAT, "version": VERSION, "generation": gen, "dim": self.dim,
        "count": self._count, "vectors": vectors_name, "records": records_name,
        "sha256": {vectors_name: hashlib.sha256(vec_bytes).hexdigest(),
                   records_name: hashlib.sha256(rec_bytes).hexdigest()},
        "info": self.info,
    }
    try:
      man_bytes = (json.dumps(manifest, indent=1) + "\n").encode("utf-8")
    except (TypeError, ValueError) as e:
      raise TypeError(f"`info` must be JSON-serialisable to be saved: {e}") from None
    path.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path, current, pending)
    journal = {"format": FORMAT, "files": [vectors_name, records_name] + current}
    _atomic_write(path / PENDING, (json.dumps(journal) + "\n").encode("utf-8"))
    _atomic_write(path / vectors_name, vec_bytes)
    _atomic_write(path / records_name, rec_bytes)
    _atomic_write(path / MANIFEST, man_bytes)  # the commit point
    for name in current:
      if name not in (vectors_name, records_name):
        (path / name).unlink(missing_ok=True)
    (path / PENDING).unlink(missing_ok=True)
    return path

  @classmethod
  def load(cls, path, *, mesh: Optional[Mesh] = None) -> "VectorIndex":
    """Loads an index saved by `save`; checks sizes and checksums and names a corrupt file."""
    path = Path(path)
    if not (path / MANIFEST).is_file():
      raise FileNotFoundError(f"No jaxsel index at {str(path)!r} (missing {MANIFEST}); build one "
                              "with `VectorIndex.save` or `jaxsel index build`.")
    man = _read_manifest(path)
    blobs = {}
    for key in ("vectors", "records"):
      f = path / man[key]
      if not f.is_file():
        raise ValueError(f"Corrupt index {str(path)!r}: {man[key]} named in {MANIFEST} is missing.")
      blobs[key] = f.read_bytes()
      if hashlib.sha256(blobs[key]).hexdigest() != man["sha256"].get(man[key]):
        raise ValueError(f"Corrupt index {str(path)!r}: {man[key]} does not match its checksum "
                         f"in {MANIFEST} (truncated or modified); rebuild the index.")
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
  """Record `i` as one line of JSON (without its b"\n"); names the metadata JSON cannot hold."""
  try:
    return json.dumps({"text": text, "metadata": meta}, ensure_ascii=False, allow_nan=False)
  except TypeError as e:
    raise TypeError(f"`metadata[{i}]` must be JSON-serialisable to be saved: {e}") from None
  except ValueError as e:
    raise ValueError(f"`metadata[{i}]` cannot be saved as JSON ({e}). NaN and infinity are "
                     "refused (JSON has no such numbers): store None or a string instead.") from None


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
  one, since saving there could overwrite or delete files the index did not write."""
  if not path.is_dir():
    return None, []
  old = _read_manifest(path) if (path / MANIFEST).exists() else None
  pending = _read_pending(path) if (path / PENDING).exists() else []
  if old is None and not (path / PENDING).exists():
    others = sorted(f.name for f in path.iterdir())
    if others:
      shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
      raise ValueError(f"`path` {str(path)!r} holds files ({shown}) but no jaxsel index "
                       f"(no {MANIFEST}); saving there could overwrite them. Save the index into "
                       "a new or empty folder, e.g. a subfolder of this one.")
  return old, pending


def _read_pending(path: Path) -> list:
  try:
    journal = json.loads((path / PENDING).read_text("utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError):
    journal = None
  names = journal.get("files") if isinstance(journal, dict) and journal.get(
      "format") == FORMAT else None
  if not (isinstance(names, list) and all(
      isinstance(n, str) and n and n == Path(n).name and n not in (MANIFEST, PENDING, "..")
      for n in names)):
    raise ValueError(f"Corrupt index {str(path)!r}: {PENDING}, the journal of an interrupted "
                     "save, is unreadable, so the files that save left cannot be told apart from "
                     f"yours. Remove them and {PENDING} by hand, then save again.")
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
      (path / name).unlink(missing_ok=True)
  own = set(pending) | set(current) | {MANIFEST, PENDING}
  for f in path.iterdir():
    if any(is_tmp_of(f.name, name) for name in own) and f.is_file():
      f.unlink(missing_ok=True)


def _read_manifest(path: Path) -> dict:
  try:
    man = json.loads((path / MANIFEST).read_text("utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"Corrupt index {str(path)!r}: {MANIFEST} is not valid JSON ({e}).") from None
  if not isinstance(man, dict) or man.get("format") != FORMAT:
    raise ValueError(f"{str(path / MANIFEST)!r} is not a jaxsel index manifest.")
  if man.get("version") != VERSION:
    raise ValueError(f"Index {str(path)!r} has format version {man.get('version')}; this jaxsel "
                     f"reads version {VERSION}.")
  missing = [k for k in ("dim", "count", "vectors", "records", "sha256") if k not in man]
  if missing:
    raise ValueError(f"Corrupt index {str(path)!r}: {MANIFEST} lacks {', '.join(missing)}.")
  return man


_atomic_write = atomic_write  # module attribute, so tests can simulate a crash mid-write
