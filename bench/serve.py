"""Throughput of `jaxsel serve`: 128 budgeted rerank requests from 32 concurrent clients
(batched by the server) against the same requests sent one at a time, with the server
embedding (all-MiniLM-L6-v2) and with client-sent embeddings. Loopback only; bounded.

The server runs in its own process (`--in-process`: on a thread of this one, sharing the
clients' interpreter lock); the clients send request bodies encoded before the clock starts,
over kept-alive HTTP/1.1 connections (asyncio streams), the concurrent ones as asyncio tasks. Besides requests/s and latency, the server's own CPU
time per request (from /proc; with `--in-process` this whole process's), which other load on
the machine changes less than wall time.

    python bench/serve.py [--requests 128] [--clients 32] [--method corag] [--in-process]
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

import jaxsel
from jaxsel import serve
from jaxsel.cli.common import default_model, load_model

WORDS = ("river city mountain lake forest bridge castle harbour valley island desert tower "
         "museum garden market station").split()


def bodies(n: int, docs: int, *, dim: int = 0, seed: int = 0) -> list:
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    texts = [" ".join(rng.choice(WORDS, size=12)) + "." for _ in range(docs)]
    body = {"query": " ".join(rng.choice(WORDS, size=4)), "documents": texts,
            "budget_tokens": 64}
    if dim:
      body["embeddings"] = rng.normal(size=(docs, dim)).round(4).tolist()
      body["query_embedding"] = rng.normal(size=dim).round(4).tolist()
    out.append(body)
  return out


async def _connect(url: str):
  host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
  return await asyncio.open_connection(host, int(port))


async def _post(conn, body: bytes) -> None:
  """One `POST /v2/rerank` on a kept-alive HTTP/1.1 connection; raises unless it is a 200.
  A few lines of asyncio streams instead of httpx, whose client spent more CPU per request
  than the batched server it measured on these 2 cores."""
  reader, writer = conn
  writer.write(b"POST /v2/rerank HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
  head = await reader.readuntil(b"\r\n\r\n")
  status = int(head.split(b" ", 2)[1])
  length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:"))
  answer = await reader.readexactly(length)
  if status != 200:
    raise RuntimeError(f"HTTP {status}: {answer[:300]!r}")


def one_at_a_time(url: str, reqs: list) -> tuple:
  """One client sending `reqs` one after another on one connection."""
  async def run():
    conn = await _connect(url)
    lat = []
    t0 = time.perf_counter()
    for body in reqs:
      t = time.perf_counter()
      await _post(conn, body)
      lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    conn[1].close()
    return wall, lat

  return asyncio.run(asyncio.wait_for(run(), 900))


def concurrent_clients(url: str, reqs: list, clients: int) -> tuple:
  """`clients` concurrent clients (asyncio tasks, a connection each) sending `reqs` between
  them."""
  async def run():
    conns = [await _connect(url) for _ in range(clients)]
    queue = list(reversed(reqs))
    lat = []

    async def one_client(conn):
      while queue:
        body = queue.pop()
        t = time.perf_counter()
        await _post(conn, body)
        lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in conns))
    wall = time.perf_counter() - t0
    for c in conns:
      c[1].close()
    return wall, lat

  return asyncio.run(asyncio.wait_for(run(), 900))


def line(name: str, wall: float, lat: list, cpu: float, n: int) -> str:
  p50, p99 = np.percentile(lat, [50, 99]) * 1000
  return f"| {name} | {n / wall:.1f} | {p50:.0f} | {p99:.0f} | {cpu / n * 1000:.1f} |"


def app_of(args):
  pipe = jaxsel.Pipeline(load_model(default_model()), method=args.method)
  # Compiles the solves of these requests' shapes at start-up (each batch size up to 32).
  return serve.create_app(pipe, max_batch=args.clients, warm_documents=(args.documents,))


@contextlib.contextmanager
def running(argv_of, env=None):
  """The server command `argv_of(port)` in its own process on a free loopback port, once its
  `/health` answers: yields (the process, its URL); stopped (SIGTERM, then killed) on leaving."""
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
  proc = subprocess.Popen(argv_of(port), env=env)
  url = f"http://127.0.0.1:{port}"
  try:
    deadline = time.monotonic() + 1200
    while True:
      if proc.poll() is not None or time.monotonic() > deadline:
        raise RuntimeError("the server did not start")
      with contextlib.suppress(httpx.TransportError):
        if httpx.get(url + "/health", timeout=5).status_code == 200:
          break
      time.sleep(0.5)
    yield proc, url
  finally:
    proc.send_signal(signal.SIGTERM)
    try:
      proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
      proc.kill()


@contextlib.contextmanager
def server_process(args):
  """`jaxsel serve` as this script in its own process on a free loopback port: (its URL, a
  function giving the CPU seconds that process has used so far)."""
  def argv_of(port):
    return ([sys.executable, __file__, "--serve-port", str(port), "--clients", str(args.clients),
             "--documents", str(args.documents)] + (["--method", args.method] if args.method
                                                    else []))
  with running(argv_of) as (proc, url):
    yield url, lambda: process_cpu(proc.pid)


def process_cpu(pid: int) -> float:
  """CPU seconds (user + system) process `pid` has used (Linux `/proc`)."""
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def in_process(args):
  with serve.background(app_of(args)) as url:
    yield url, time.process_time  # the clients' CPU counts too


def measured(run, url, reqs, *args) -> tuple:
  """(wall seconds, latencies, server CPU seconds) of `run(url, reqs, *args)`."""
  url, cpu = url
  c0 = cpu()
  wall, lat = run(url, reqs, *args)
  return wall, lat, cpu() - c0


def encoded(reqs: list) -> list:
  return [json.dumps(b).encode() for b in reqs]


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--requests", type=int, default=128)
  ap.add_argument("--clients", type=int, default=32)
  ap.add_argument("--documents", type=int, default=10)
  ap.add_argument("--method", default=None)
  ap.add_argument("--in-process", action="store_true")
  ap.add_argument("--serve-port", type=int, default=None, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.serve_port is not None:  # the server process
    import uvicorn
    uvicorn.run(app_of(args), host="127.0.0.1", port=args.serve_port, log_level="warning")
    return
  t0 = time.perf_counter()
  with (in_process(args) if args.in_process else server_process(args)) as server:
    print(f"warm-up {time.perf_counter() - t0:.1f} s; cpu {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; server "
          f"{'in this process' if args.in_process else 'in its own process'}")
    print("| run | requests/s | p50 ms | p99 ms | server CPU ms / request |\n|---|---|---|---|---|")
    for name, dim in (("server embedding", 0), ("client-sent embeddings", 384)):
      reqs = encoded(bodies(args.requests, args.documents, dim=dim))
      # Compiles what these shapes need beyond the warm-up (the encoder's), unmeasured.
      one_at_a_time(server[0], reqs[:4])
      concurrent_clients(server[0], reqs, args.clients)
      # the embedding cache would serve the second run's texts: fresh texts for each run
      alone = measured(one_at_a_time, server,
                       encoded(bodies(args.requests, args.documents, dim=dim, seed=1)))
      batched = measured(concurrent_clients, server,
                         encoded(bodies(args.requests, args.documents, dim=dim, seed=2)),
                         args.clients)
      print(line(f"{name}, one at a time", *alone, args.requests))
      print(line(f"{name}, {args.clients} clients (batched)", *batched, args.requests))
      print(f"| {name}: batched / one at a time | {alone[0] / batched[0]:.2f}x | | | "
            f"{alone[2] / batched[2]:.2f}x less |")

if __name__ == "__main__":
  main()
