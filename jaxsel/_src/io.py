"""Crash-safe file writes shared by the index and the agent's checkpoints."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile

import numpy as np


TMP_PREFIX = ".tmp-"
_TAIL = 48  # characters of the target's name kept in a temp name: short enough for NAME_MAX


def _tail(path) -> str:
  return os.path.basename(os.fspath(path))[-_TAIL:]


def is_tmp_of(name: str, target: str) -> bool:
  """Whether file `name` is a temporary file `atomic_write` makes while writing `target`."""
  suffix = "-" + _tail(target)
  return (name.startswith(TMP_PREFIX) and name.endswith(suffix)
          and len(name) > len(TMP_PREFIX) + len(suffix))


def atomic_write(path, data: bytes) -> None:
  """Writes `data` to `path` so that readers see either the old file or all of the new one.

  The bytes go to a temporary file in the same folder, are flushed to disk, and replace
  `path` with one `os.replace`; the folder is then synced so the rename itself is durable.
  A failure leaves `path` untouched and removes the temporary file. The temporary file is
  named `.tmp-<random>-<name of path>` (see `is_tmp_of`), so a process killed mid-write leaves a
  file whose owner can tell whose it is (the vector index cleans only the ones it can name)."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=TMP_PREFIX, suffix="-" + _tail(path))
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  try:
    dfd = os.open(folder, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(dfd)
  except OSError:
    pass
  finally:
    os.close(dfd)


def atomic_savez(path, **arrays) -> None:
  """`np.savez` to `path` through `atomic_write` (the archive is built in memory first)."""
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  atomic_write(path, buf.getvalue())


def file_sha256(path) -> str:
  """Hex SHA-256 of the file at `path`, read in 1 MiB blocks."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()
