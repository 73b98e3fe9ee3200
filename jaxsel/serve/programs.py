"""A bound on the compiled programs a long-running process keeps.

XLA:CPU keeps each compiled program's machine code mapped into the process for as long as
JAX's caches hold the program, and JAX's jit caches hold thousands. A program takes from a
few memory mappings to ~270 (`/proc/self/maps` lines; the encoder's forward pass or CORAG's
solve at a new shape), ~65 on average over a server's requests of 1-1,000 documents, so a
process that meets many request shapes and options (a server) passes Linux's limit of
mappings per process (`vm.max_map_count`, 65,530 by default) and aborts inside the compiler
("LLVM compilation error: Cannot allocate memory", then a segfault), with gigabytes of
memory still free.

`ProgramBound` counts the programs JAX loads (compiled, or read from the persistent
compilation cache: both are one `BACKEND_COMPILE_EVENT`) and frees them all
(`jax.clear_caches`) once `limit` were loaded since the last free. The programs the next
requests need are then compiled again, or read back from the persistent cache when one is
set (`jaxsel serve` sets one). Freeing drops every JAX program of the process, the caller's
own too, so the library never does it on its own: the server's engine does, between batches,
on the one thread that runs JAX.
"""

from __future__ import annotations

import threading

import jax

# `jax._src.dispatch.BACKEND_COMPILE_EVENT`: recorded once per program loaded.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_lock = threading.Lock()
_loaded = 0
_listening = False


def _on_event(event: str, duration_secs: float, **kwargs) -> None:
  del duration_secs, kwargs
  if event == BACKEND_COMPILE_EVENT:
    global _loaded
    with _lock:
      _loaded += 1


def programs_loaded() -> int:
  """Programs JAX has loaded in this process since the first `ProgramBound` (or call of this
  function) started counting them."""
  global _listening
  with _lock:
    if not _listening:
      jax.monitoring.register_event_duration_secs_listener(_on_event)
      _listening = True
    return _loaded


class ProgramBound:
  """Frees JAX's compiled programs (`jax.clear_caches`) when `limit` were loaded since the
  last free (`check`, called between pieces of work)."""

  def __init__(self, limit: int):
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
      raise ValueError(f"`max_programs` must be a positive int (compiled programs kept before "
                       f"they are all freed), got {limit!r}.")
    self.limit = limit
    self._mark = programs_loaded()
    self.frees = 0

  @property
  def held(self) -> int:
    """Programs loaded since the last free (or since this bound was made): at most what the
    process holds, less when something else freed them."""
    return programs_loaded() - self._mark

  def check(self) -> bool:
    """Frees every compiled program when `held` reached `limit`; whether it did."""
    if self.held < self.limit:
      return False
    jax.clear_caches()
    self._mark = programs_loaded()
    self.frees += 1
    return True
