"""Deprecated: crash-safe file writers, kept importable for one release.

`jaxsel.files` served the repository's research scripts only (they now keep their own
`training/files.py`); it is not part of selection. Its names still work and warn once per
use with a `DeprecationWarning`; copy the few lines you need, e.g. a temporary file in the
same folder, `os.fsync`, then `os.replace`.
"""

import warnings

from jaxsel._src import io as _io

_NAMES = ("atomic_savez", "atomic_write", "file_sha256")
__all__ = list(_NAMES)


def __getattr__(name):
  if name in _NAMES:
    warnings.warn(f"`jaxsel.files.{name}` is deprecated and will be removed in jaxsel 0.3: it "
                  "served the repository's research scripts only; write the file to a "
                  "temporary name in the same folder, fsync it and `os.replace` it.",
                  DeprecationWarning, stacklevel=2)
    return getattr(_io, name)
  raise AttributeError(f"module 'jaxsel.files' has no attribute {name!r}")
