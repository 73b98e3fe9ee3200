"""The server's Prometheus metrics (`GET /metrics`), in a registry of the app's own (two apps
in one process, as in tests, count apart)."""

from __future__ import annotations

import prometheus_client as prom

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
  """Requests by endpoint and status, their latency, batch sizes, errors by kind, and the
  compiled programs the engine holds (`programs`, a `ProgramBound`) and how often it freed
  them."""

  def __init__(self, programs=None):
    self.registry = prom.CollectorRegistry()
    self.requests = prom.Counter("jaxsel_serve_requests", "Requests answered.",
                                 ["endpoint", "status"], registry=self.registry)
    self.latency = prom.Histogram("jaxsel_serve_request_seconds", "Request latency in seconds.",
                                  ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
    self.batch_size = prom.Histogram("jaxsel_serve_batch_size", "Requests per batched solve.",
                                     buckets=BATCH_BUCKETS, registry=self.registry)
    self.errors = prom.Counter("jaxsel_serve_errors", "Requests answered with an error.",
                               ["endpoint", "kind"], registry=self.registry)
    if programs is not None:
      held = prom.Gauge("jaxsel_serve_compiled_programs",
                        "Compiled programs loaded since the engine last freed them.",
                        registry=self.registry)
      held.set_function(lambda: programs.held)
      frees = prom.Gauge("jaxsel_serve_compiled_program_frees",
                         "Times the engine freed its compiled programs (max_programs reached).",
                         registry=self.registry)
      frees.set_function(lambda: programs.frees)

  def observe(self, endpoint: str, status: int, seconds: float) -> None:
    self.requests.labels(endpoint, str(status)).inc()
    self.latency.labels(endpoint).observe(seconds)
    if status >= 400:
      self.errors.labels(endpoint, "client" if status < 500 else "server").inc()

  def render(self) -> bytes:
    return prom.generate_latest(self.registry)

  content_type = prom.CONTENT_TYPE_LATEST
