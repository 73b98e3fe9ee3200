"""Crash-safe files: what jaxsel writes its index, agents and caches with, for scripts that
write their own results the same way (`training/`).

    jaxsel.files.atomic_write("report.json", data)   # readers see the old file or all of the new
"""

from jaxsel._src.io import atomic_savez, atomic_write, file_sha256

__all__ = [
    "atomic_savez",
    "atomic_write",
    "file_sha256",
]
