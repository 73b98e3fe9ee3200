"""Crash-safe file writes shared by the index and the agent's checkpoints, the lock that
serialises writers of one folder, and the digests of files and loaded weights."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import os
import secrets
import stat
import time
from typing import Mapping, Optional

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


def _create_tmp(folder: str, target: str) -> tuple:
  """Creates a new, empty temporary file for `target` in `folder`: `(fd, path)`.

  Opened like `open(..., "xb")`, mode 0o666 less the umask, not like `tempfile.mkstemp`
  (always 0o600), so the file `atomic_write` leaves has the permissions any other output of
  the process gets."""
  while True:
    tmp = os.path.join(folder, f"{TMP_PREFIX}{secrets.token_hex(6)}-{_tail(target)}")
    try:
      return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
    except FileExistsError:
      continue


def atomic_write(path, data: bytes) -> None:
  """Writes `data` to `path` so that readers see either the old file or all of the new one.

  The bytes go to a temporary file in the same folder, are flushed to disk, and replace
  `path` with one `os.replace`; the folder is then synced so the rename itself is durable.
  A failure leaves `path` untouched and removes the temporary file. The temporary file is
  named `.tmp-<random>-<name of path>` (see `is_tmp_of`), so a process killed mid-write leaves a
  file whose owner can tell whose it is (the vector index cleans only the ones it can name).
  The file gets mode 0o666 less the umask, as `open(path, "wb")` gives a new file."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = _create_tmp(folder, path)
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


def read_regular(path, *, size: Optional[int] = None, limit: Optional[int] = None,
                 head: Optional[int] = None) -> bytes:
  """The bytes of `path`, a file that may have been put there by someone else: it must be a
  regular file (opened without following a link and without blocking, so a FIFO or a device
  is refused, never waited on or read without end) of exactly `size` bytes, or at most `limit`,
  checked before reading; `head`: only its first `head` bytes (it must have that many).

  Raises:
    FileNotFoundError: there is no such file.
    ValueError: it is not a regular file or not of that size; the message says which, in
      words that follow the file's name ("is not a regular file").
    OSError: it cannot be opened or read (a link: "cannot be opened ...").
  """
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
  except FileNotFoundError:
    raise
  except OSError as e:  # ELOOP for a link, EACCES, ...
    raise OSError(e.errno, f"cannot be opened as a regular file ({e.strerror})") from None
  with os.fdopen(fd, "rb") as f:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
      raise ValueError("is not a regular file")
    want = (f"{size:,} bytes" if size is not None and st.st_size != size else
            f"at most {limit:,} bytes" if limit is not None and st.st_size > limit else
            f"at least {head:,} bytes" if head is not None and st.st_size < head else None)
    if want:
      raise ValueError(f"holds {st.st_size:,} bytes, expected {want}")
    n = head if head is not None else st.st_size
    data = f.read(n + (head is None))
  if len(data) != n:
    raise ValueError("changed size while it was read")
  return data


def weights_digest(state: Mapping[str, np.ndarray]) -> str:
  """The SHA-256 of loaded weights `{name: array}` (names, dtypes, shapes and bytes): computed
  once when a checkpoint is loaded (about 0.1 s for 90 MB), so weights replaced in place with
  the same size and modification time still give a new identity."""
  h = hashlib.sha256()
  for name in sorted(state):
    a = np.ascontiguousarray(state[name])
    h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
    h.update(memoryview(a).cast("B"))
  return h.hexdigest()


def file_sha256(path) -> str:
  """Hex SHA-256 of the file at `path`, read in 1 MiB blocks."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


@contextlib.contextmanager
def folder_lock(folder, name: str, *, timeout: float, shared: bool = False):
  """Holds an OS file lock (`fcntl.flock`) on the file `name` inside `folder` for the block.

  Exclusive by default: one holder at a time across processes (and across open files of one
  process); `shared=True` admits any number of shared holders but no exclusive one. The lock
  file is created when missing (0o666 less the umask) and never deleted (deleting it could let
  two holders lock two different files); the lock goes when the block ends or the process
  dies. Waits up to `timeout` seconds, then raises `TimeoutError` naming the lock file."""
  lock_path = os.path.join(os.fspath(folder), name)
  fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
  try:
    how = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
      try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        break
      except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
          raise
      left = deadline - time.monotonic()
      if left <= 0:
        raise TimeoutError(
            f"{lock_path!r} is still locked by another process after {timeout:g} s (another "
            "save into this folder is running or hung); wait for it to finish, or check which "
            f"process holds it (e.g. `fuser {lock_path}`).")
      time.sleep(min(delay, left))
      delay = min(delay * 2, 0.1)
    yield lock_path
  finally:
    os.close(fd)  # closing the only descriptor of the open file releases the lock
