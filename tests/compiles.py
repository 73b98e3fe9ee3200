"""Counting XLA compilations in tests (`jax.monitoring`'s backend-compile events, and programs
read back from the on-disk compilation cache that tests/conftest.py sets up: either way the
program was not in memory)."""

import jax


class CompileCounter:
  """Counts XLA compilations (`jax.monitoring`'s backend-compile events, and reads from the
  on-disk compilation cache) while active."""

  def __init__(self):
    self.count = 0
    self.active = False
    jax.monitoring.register_event_duration_secs_listener(self._on_event)
    jax.monitoring.register_event_listener(self._on_cache_event)

  def _on_event(self, event, duration, **kwargs):
    if self.active and event == "/jax/core/compile/backend_compile_duration":
      self.count += 1

  def _on_cache_event(self, event, **kwargs):
    if self.active and event == "/jax/compilation_cache/cache_hits":
      self.count += 1

  def __enter__(self):
    self.count, self.active = 0, True
    return self

  def __exit__(self, *exc):
    self.active = False
