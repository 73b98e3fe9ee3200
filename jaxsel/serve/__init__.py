"""`jaxsel serve`: budget-aware, constraint-aware reranking over HTTP, in the shapes rerank
clients already speak (Jina's `/v1/rerank`, Cohere's `/v2/rerank`). Needs the `serve` extra:
``pip install "jaxsel[serve]"``.

    app = jaxsel.serve.create_app(jaxsel.Pipeline(encoder))   # an ASGI app
    jaxsel.serve.run(jaxsel.Pipeline(encoder), port=8080)     # or serve it with uvicorn
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jaxsel.serve.app import (DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES,
                              DEFAULT_MAX_DOCUMENTS, create_app)

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_DOCUMENTS",
           "background", "create_app", "run"]

# A connection gets this long to send a request's headers, in at most this many bytes (a
# client that trickles them, or sends them for ever, is answered and closed).
HEADER_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 64 << 10
# On SIGTERM, requests in flight get this long to finish before they are cancelled.
GRACEFUL_SHUTDOWN_S = 30.0


def _refusal(status: int, reason: bytes, message: str) -> bytes:
  """A whole HTTP/1.1 response in the server's error shape, closing the connection."""
  body = orjson.dumps({"error": {"message": message, "field": None}})
  return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
          b"connection: close\r\n\r\n" % (status, reason, len(body))) + body


class _Protocol(HttpToolsProtocol):
  """uvicorn's httptools protocol with bounded request headers (time and bytes), and its
  refusals of malformed HTTP in the server's JSON error shape."""

  _header_timer = None
  _header_bytes = 0

  def connection_made(self, transport):
    super().connection_made(transport)
    self._arm()

  def _arm(self):
    self._disarm()
    self._header_bytes = 0
    self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

  def _disarm(self):
    if self._header_timer is not None:
      self._header_timer.cancel()
      self._header_timer = None

  def _waiting_for_headers(self) -> bool:
    return not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete)

  def _headers_late(self):
    self._header_timer = None
    if self._waiting_for_headers():
      self.transport.write(_refusal(408, b"Request Timeout", "the request headers did not "
                                    f"arrive within {HEADER_TIMEOUT_S:g} s"))
      self.transport.close()

  def data_received(self, data: bytes) -> None:
    if self._header_timer is not None:
      self._header_bytes += len(data)
    super().data_received(data)
    if self._header_timer is not None and self._header_bytes > MAX_HEADER_BYTES \
        and self._waiting_for_headers():
      self._disarm()
      self.transport.write(_refusal(431, b"Request Header Fields Too Large",
                                    f"the request headers are over {MAX_HEADER_BYTES} bytes"))
      self.transport.close()

  def on_headers_complete(self) -> None:
    self._disarm()
    super().on_headers_complete()

  def on_response_complete(self) -> None:
    super().on_response_complete()
    if not self.transport.is_closing():
      self._arm()  # the next request's headers on this kept-alive connection

  def connection_lost(self, exc) -> None:
    self._disarm()
    super().connection_lost(exc)

  def send_400_response(self, msg: str) -> None:
    self._disarm()
    self.transport.write(_refusal(400, b"Bad Request", msg))
    self.transport.close()


class _Server(uvicorn.Server):
  """A uvicorn server that tells the app when it starts to shut down (`app.state.stopping`),
  so that a request still sending its body is answered at once instead of holding the
  shutdown."""

  async def shutdown(self, sockets=None):
    stopping = getattr(getattr(self.config.app, "state", None), "stopping", None)
    if stopping is not None:
      stopping.set()
    await super().shutdown(sockets=sockets)


def _config(app, **kwargs) -> uvicorn.Config:
  return uvicorn.Config(app, http=_Protocol, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                        timeout_keep_alive=5, **kwargs)


def run(pipeline, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info",
        **settings) -> None:
  """Serves `create_app(pipeline, **settings)` with uvicorn until interrupted; on SIGINT or
  SIGTERM, requests in flight finish (for up to `GRACEFUL_SHUTDOWN_S`) before it returns,
  and a request still sending its body is answered 503."""
  _Server(_config(create_app(pipeline, **settings), host=host, port=port,
                  log_level=log_level)).run()


@contextlib.contextmanager
def background(app, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 600.0):
  """Serves `app` with uvicorn on a thread for the `with` block; yields its base URL
  (`port=0`: a free port). On leaving, requests in flight finish before it returns."""
  sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  sock.bind((host, port))
  server = _Server(_config(app, log_level="warning"))
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  deadline = time.monotonic() + start_timeout
  while not server.started:
    if not thread.is_alive() or time.monotonic() > deadline:
      server.should_exit = True
      sock.close()
      raise RuntimeError("the server did not start")
    time.sleep(0.05)
  try:
    yield f"http://{host}:{sock.getsockname()[1]}"
  finally:
    server.should_exit = True
    thread.join()
    sock.close()
