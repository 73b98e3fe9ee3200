"""Counting XLA compilations in tests (`jax.monitoring`'s backend-compile events)."""

import jax


class CompileCounter:
  """Counts XLA compilations (`jax.monitoring`'s backend-compile events) while active."""

  def __init__(self):
    self.count = 0
    self.active = False
    jax.monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, event, duration, **kwargs):
    if self.active and event == "/jax/core/compile/backend_compile_duration":
      self.count += 1

  def __enter__(self):
    self.count, self.active = 0, True
    return self

  def __exit__(self, *exc):
    self.active = False
