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

import uvicorn

from jaxsel.serve.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DOCUMENTS, create_app

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_DOCUMENTS", "background", "create_app", "run"]


def run(pipeline, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info",
        **settings) -> None:
  """Serves `create_app(pipeline, **settings)` with uvicorn until interrupted; on SIGINT or
  SIGTERM, requests in flight finish before it returns."""
  uvicorn.run(create_app(pipeline, **settings), host=host, port=port, log_level=log_level)


@contextlib.contextmanager
def background(app, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 600.0):
  """Serves `app` with uvicorn on a thread for the `with` block; yields its base URL
  (`port=0`: a free port). On leaving, requests in flight finish before it returns."""
  sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  sock.bind((host, port))
  server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
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
