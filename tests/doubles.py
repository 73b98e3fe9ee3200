"""Test doubles, kept in one place so that `tests/contracts/` can hold each one to the same
contract as the real class it stands in for."""

import contextlib
import http.server
import json
import re
import socket
import struct
import threading
import time
import zlib

import jax.numpy as jnp
import numpy as np


class HashEncoder:
  """A `jaxsel.Encoder` without a model: a bag of hashed, lower-cased words (deterministic
  across processes), L2-normalised; the prompt named by `prompt_name` is prefixed to each text,
  as a real encoder does."""
  tokenizer = None

  def __init__(self, dim: int = 64, prompts=None):
    self.dim = dim
    self.prompts = {"query": "", "passage": "", **(prompts or {})}

  def encode(self, texts, *, prompt_name=None, normalize=True, batch_size=32, progress=None):
    prefix = self.prompts[prompt_name] if prompt_name is not None else ""
    out = np.zeros((len(texts), self.dim), np.float32)
    for i, t in enumerate(texts):
      for w in re.findall(r"\w+", (prefix + t).lower()):
        out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
      out[i, 0] += 1e-3  # never an all-zero row
    if normalize:
      out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


class EchoGenerator:
  """A `jaxsel.Generator` without a model: answers with the prompt's last context line."""
  name = "echo"

  def __init__(self):
    self.prompts = []

  def generate(self, prompts, *, max_new_tokens=64):
    self.prompts += list(prompts)
    return [p.split("Question:")[0].strip().splitlines()[-1][:max_new_tokens].strip() for p in prompts]


class OpaqueScorer:
  """A `jaxsel.Scorer` that hides its inner scorer's `append_gains` (the search then scores
  every child in full)."""

  def __init__(self, inner):
    self.inner = inner

  def __call__(self, order):
    return self.inner(order)


def sum_scorer(order):
  """A plain function as a scorer: the sum of the chunk ids plus one per chunk."""
  used = order >= 0
  return jnp.sum(jnp.where(used, order + 1, 0)).astype(jnp.float32)


class _ChatServer(http.server.ThreadingHTTPServer):
  daemon_threads = True
  block_on_close = False


TRICKLE_SECONDS = 0.01  # between two bytes of a trickled reply
BLOCK = 1 << 16  # bytes of one block of an endless reply


class _ChatHandler(http.server.BaseHTTPRequestHandler):
  """Chat completions at /<behaviour>/v1/chat/completions; every request is recorded on the
  server. Behaviours: ok: echoes the last message; fixed: "stub answer"; fail: HTTP 500;
  slow: answers after 1 s; garbage: not JSON; empty: no choices. Broken transports (what
  proxies, crashed or foreign servers do): trickle: the fixed answer's body one byte every
  `TRICKLE_SECONDS` (a whole reply takes seconds, and no single read waits long);
  trickle_head: the status line and headers trickled too; hangup: closes the connection
  without a reply; banner: a non-HTTP banner, then closes; truncated: a body shorter than its
  Content-Length; reset: resets the connection (TCP RST) instead of answering. Hostile ones:
  redirect<code>: a `code` redirect to the server's `redirect_to` URL; huge: a Content-Length of
  400 MB (nothing sent after it); endless: a chunked body of `BLOCK` bytes every
  `TRICKLE_SECONDS` (up to 2,000 blocks, about 128 MB, until the client leaves); deep: JSON
  nested 100,000 deep."""

  def log_message(self, *args):
    pass

  def do_POST(self):
    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
    self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
    behaviour = self.path.split("/")[1]
    if behaviour == "fail":
      return self._send(500, b'{"error": "model exploded"}')
    if behaviour == "slow":
      time.sleep(1.0)
    if behaviour == "garbage":
      return self._send(200, b"<html>not json</html>")
    if behaviour == "empty":
      return self._send(200, b'{"choices": []}')
    if behaviour == "hangup":
      self.close_connection = True
      return None
    if behaviour == "banner":
      self.close_connection = True
      return self._raw(b"SSH-2.0-OpenSSH_9.6\r\n")
    if behaviour.startswith("redirect"):
      self.send_response(int(behaviour[len("redirect"):]))
      self.send_header("Location", self.server.redirect_to)
      self.send_header("Content-Length", "0")
      self.end_headers()
      return None
    if behaviour == "huge":
      self.close_connection = True
      return self._raw(self._head(200, 400 << 20))
    if behaviour == "endless":
      self.close_connection = True
      self._raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
      block = b"%x\r\n%s\r\n" % (BLOCK, b" " * BLOCK)
      for _ in range(2000):
        if self._raw(block) is None:
          return None
        time.sleep(TRICKLE_SECONDS)
      return None
    if behaviour == "deep":
      return self._send(200, b"[" * 100_000 + b"]" * 100_000)
    if behaviour == "reset":
      self.close_connection = True
      self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
      self.connection.close()  # with a zero linger time: a reset, not an orderly close
      return None
    answer = ("  stub answer\n" if behaviour in ("fixed", "trickle", "trickle_head", "truncated")
              else "  echo: " + body["messages"][-1]["content"] + "\n")
    reply = {"id": "x", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": answer}}]}
    payload = json.dumps(reply).encode()
    if behaviour == "truncated":
      self.close_connection = True
      return self._raw(self._head(200, len(payload)) + payload[:20])
    if behaviour in ("trickle", "trickle_head"):
      head = self._head(200, len(payload))
      if behaviour == "trickle":
        self._raw(head)
        return self._raw(payload, trickle=True)
      return self._raw(head + payload, trickle=True)
    self._send(200, payload)

  @staticmethod
  def _head(code, length) -> bytes:
    return (f"HTTP/1.1 {code} OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()

  def _raw(self, data, trickle=False):
    """Writes `data`; None once the client has gone."""
    try:
      if not trickle:
        return self.wfile.write(data) or len(data)
      for i in range(len(data)):
        self.wfile.write(data[i:i + 1])
        time.sleep(TRICKLE_SECONDS)
    except OSError:
      self.close_connection = True  # the client gave up (the timeout tests)

  def _send(self, code, payload):
    try:
      self.send_response(code)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(payload)))
      self.end_headers()
      self.wfile.write(payload)
    except (BrokenPipeError, ConnectionResetError):
      pass  # the client gave up (the timeout test)


@contextlib.contextmanager
def chat_server():
  """A local OpenAI-compatible stub on 127.0.0.1 (a free port): yields (server, root URL); the
  server's `requests` lists what it received. Stopped on exit."""
  server = _ChatServer(("127.0.0.1", 0), _ChatHandler)
  server.requests = []
  server.redirect_to = None
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
  finally:
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
