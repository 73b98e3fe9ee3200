"""Pooled embeddings kept on disk from one process to the next: `EmbeddingStore`.

Shape legend: N texts, D embedding dimension.

The `jaxsel` command embeds its input files again in every process; on a CPU that is most of
a second `select` of an unchanged file (MiniLM: 45 passages, about 1 CPU s). An encoder with
a store (`SentenceEncoder.with_embedding_cache(folder)`) reads the result of an `encode` call
it has made before instead of running the model.

An entry is the whole result of one call (not one row per text: a text's vector depends, up
to float rounding, on the batch it was padded into), so a hit gives exactly the bytes a fresh
run would. Its file is named by the SHA-256 of everything the result depends on
(`entry_key`): the checkpoint's files (`checkpoint_identity`), the encoder's settings, the
prompt, the call's settings and the texts, and the code and machine that compute it
(`runtime_identity`: jaxsel's encoder sources, the native kernels, jax/jaxlib, XLA_FLAGS, the
device and the CPU), so a stale entry is never found. A file holds a header, the float32
rows and a BLAKE2 digest of both: one that is short, damaged or of another shape is ignored
(and written over). Writes go to a temporary file renamed into place, so processes running
at once never read half an entry; the least recently used entries go beyond `max_bytes`. A
folder that cannot be created or written just stores nothing.

The folder may hold other files (it is the user's choice): eviction deletes only the store's own
entries, regular files named `<64 hex digits>.emb` that begin with its `MAGIC` header; anything
else there, and anything that is not a regular file (a link, a FIFO, a folder), is never read,
waited on or deleted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import re
import stat
import struct
from pathlib import Path
from typing import Iterable, Optional

import jax
import jaxlib
import numpy as np

from jaxsel._src import native
from jaxsel._src.io import atomic_write, read_regular

MAGIC = b"jaxsel-embeddings-1\n"
_HEADER = struct.Struct("<QQ")  # rows, columns
_DIGEST = 32
SUFFIX = ".emb"
DEFAULT_MAX_BYTES = 1 << 30
# Calls with fewer tokens than this (a query or two) are not stored: they encode in
# milliseconds once compiled, and each distinct query would add a file.
MIN_TOKENS = 512
_ENTRY = re.compile(r"[0-9a-f]{64}" + re.escape(SUFFIX))  # the name of one of the store's entries

_ENCODERS = Path(__file__).resolve().parent
_SOURCES = (sorted(_ENCODERS.glob("*.py"))
            + [_ENCODERS.parent / "numerics.py", _ENCODERS.parent / "native" / "__init__.py"])


def _digest(*parts: bytes) -> str:
  h = hashlib.sha256()
  for p in parts:
    h.update(len(p).to_bytes(8, "little"))
    h.update(p)
  return h.hexdigest()


def _stat(path: Path) -> bytes:
  st = path.stat()
  return f"{path.name}:{st.st_size}:{st.st_mtime_ns}".encode()


def checkpoint_identity(folder: Path, weights: str = "") -> str:
  """What identifies a checkpoint folder's contents: its resolved path, every file's name,
  size and modification time (weights, config, tokenizer, sentence-transformers settings), so
  a changed file gives a new identity, and `weights`, the `io.weights_digest` of what was loaded."""
  folder = Path(folder).resolve()
  files = sorted(p for p in folder.rglob("*") if p.is_file())
  return _digest(str(folder).encode(), weights.encode(), *(_stat(p) for p in files))


def _cpu() -> bytes:
  """The CPU model and its flags (XLA compiles for the host's instruction set, which can
  change float rounding), where Linux tells them."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      lines = {}
      for line in f:
        if not line.strip():
          break  # the first processor is enough
        name, _, value = line.partition(":")
        lines[name.strip()] = value.strip()
    return f"{lines.get('model name')}|{lines.get('flags')}".encode()
  except OSError:
    return platform.processor().encode()


@functools.cache
def runtime_identity() -> str:
  """What identifies the code and the machine computing embeddings in this process."""
  device = jax.devices()[0]
  libraries = sorted(Path(native.__file__).parent.glob("_kernels_*"))
  return _digest(*(p.read_bytes() for p in _SOURCES), *(_stat(p) for p in libraries),
                 native.status().encode(), jax.__version__.encode(), jaxlib.__version__.encode(),
                 os.environ.get("XLA_FLAGS", "").encode(), device.platform.encode(),
                 str(device.device_kind).encode(), platform.machine().encode(), _cpu())


def entry_key(identity: str, settings: str, texts: Iterable[str]) -> str:
  """The name of an `encode` call's entry: the encoder's `identity`, the call's `settings`
  (prompt, pooling, normalisation, batch size, ...) and its texts."""
  return _digest(runtime_identity().encode(), identity.encode(), settings.encode(),
                 *(t.encode("utf-8", "surrogatepass") for t in texts))


def _read(path: Path, **size) -> Optional[bytes]:
  """`read_regular(path, **size)`, or None for a file that is not the store's to read."""
  try:
    return read_regular(path, **size)
  except (OSError, ValueError):
    return None


class EmbeddingStore:
  """Embeddings `[N, D]` float32 by key, as files in `folder` (see the module's docstring).

  Args:
    folder: where the entries live (created on the first write).
    max_bytes: the entries' total size beyond which the least recently used are deleted.
  """

  def __init__(self, folder, *, max_bytes: int = DEFAULT_MAX_BYTES):
    self.folder = Path(folder)
    self.max_bytes = int(max_bytes)

  def __repr__(self):
    return f"EmbeddingStore({str(self.folder)!r})"

  def path(self, key: str) -> Path:
    """The file of entry `key`, an `entry_key` (64 hex digits)."""
    name = f"{key}{SUFFIX}"
    if not _ENTRY.fullmatch(name):
      raise ValueError(f"An embedding store key is 64 lowercase hex digits (an `entry_key`), "
                       f"got {key!r}.")
    return self.folder / name

  def read(self, key: str, shape: tuple) -> Optional[np.ndarray]:
    """The entry `key` as a read-only float32 array of `shape` `[N, D]`, or None when there is
    none, or it is short, damaged or of another shape."""
    rows, cols = shape
    path = self.path(key)
    size = rows * cols * 4
    body = len(MAGIC) + _HEADER.size
    data = _read(path, size=body + size + _DIGEST)
    if (data is None or not data.startswith(MAGIC)
        or _HEADER.unpack_from(data, len(MAGIC)) != (rows, cols)):
      return None
    if hashlib.blake2b(key.encode() + data[:-_DIGEST], digest_size=_DIGEST).digest() != data[-_DIGEST:]:
      return None
    with contextlib.suppress(OSError):
      os.utime(path)  # recently used: evicted last
    return np.frombuffer(data, "<f4", count=rows * cols, offset=body).reshape(rows, cols)

  def write(self, key: str, array: np.ndarray) -> bool:
    """Stores `array` `[N, D]` as the entry `key` (atomically); False when the folder cannot
    be written (nothing is stored then)."""
    array = np.ascontiguousarray(array, "<f4")
    payload = MAGIC + _HEADER.pack(*array.shape) + array.tobytes()
    payload += hashlib.blake2b(key.encode() + payload, digest_size=_DIGEST).digest()
    try:
      self.folder.mkdir(parents=True, exist_ok=True)
      atomic_write(self.path(key), payload)  # removes its temporary file on failure
    except OSError:
      return False
    self._evict()
    return True

  def _evict(self) -> None:
    """Deletes the least recently used entries while their total exceeds `max_bytes`."""
    entries = []
    for p in self.folder.glob(f"*{SUFFIX}"):
      if not _ENTRY.fullmatch(p.name):
        continue
      with contextlib.suppress(OSError):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode) and _read(p, head=len(MAGIC)) == MAGIC:
          entries.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
      if total <= self.max_bytes:
        break
      with contextlib.suppress(OSError):
        p.unlink()
        total -= size
