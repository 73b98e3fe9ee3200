"""Crash-safe result files for the research scripts: a reader sees the old file or all of
the new one (temporary file in the same folder, fsync, `os.replace`, folder fsync).

The one place where `training/` reaches past the public API: the writer is the package's own
(`jaxsel/_src/io.py`, which the index, the agent and the scorer weights use), so there is one
implementation of it; `jaxsel.files`, which used to export it for these scripts, is
deprecated.
"""

from jaxsel._src.io import atomic_savez, atomic_write, file_sha256

__all__ = ["atomic_savez", "atomic_write", "file_sha256"]
