"""Fixtures shared by the server tests."""

import socket
import subprocess
import time

import httpx
import pytest


@pytest.fixture
def server_process():
  """`start(argv_of(port), cwd, timeout)`: runs the server command `argv_of(port)` on a free
  loopback port and returns `(process, base_url)` once its `/health` answers 200 (output in
  `process.stdout`). Processes still running at the end of the test are killed."""
  procs = []

  def start(argv_of, cwd, timeout: float = 600.0):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      port = s.getsockname()[1]
    proc = subprocess.Popen(argv_of(port), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
      assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
      assert time.monotonic() < deadline, "the server did not start"
      try:
        if httpx.get(base + "/health", timeout=5).status_code == 200:
          return proc, base
      except httpx.TransportError:
        pass
      time.sleep(0.2)

  yield start
  for proc in procs:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
