"""Counting XLA compilations in tests (`jax.monitoring`'s backend-compile events, and programs
read back from the on-disk compilation cache that tests/conftest.py sets up: either way the
program was not in memory)."""

import threading

import jax


class CompileCounter:
  """Counts XLA compilations (`jax.monitoring`'s backend-compile events, and reads from the
  on-disk compilation cache) while active. `this_thread`: only those of the thread that entered
  it (JAX reports a compilation in the thread that compiles), so a server or a worker left
  running by another test in the same process is not counted; a test that counts a server's
  own compilations (its engine thread) leaves it False."""

  def __init__(self, this_thread: bool = False):
    self.count = 0
    self.active = False
    self.this_thread = this_thread
    self.thread = None
    jax.monitoring.register_event_duration_secs_listener(self._on_event)
    jax.monitoring.register_event_listener(self._on_cache_event)

  def _counts(self) -> bool:
    return self.active and (not self.this_thread or threading.get_ident() == self.thread)

  def _on_event(self, event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration" and self._counts():
      self.count += 1

  def _on_cache_event(self, event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits" and self._counts():
      self.count += 1

  def __enter__(self):
    self.count, self.active, self.thread = 0, True, threading.get_ident()
    return self

  def __exit__(self, *exc):
    self.active = False
