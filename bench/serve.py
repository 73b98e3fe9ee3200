"""Throughput of `jaxsel serve`: 128 budgeted rerank requests from 32 concurrent clients
(batched by the server) against the same requests sent one at a time, with the server
embedding (all-MiniLM-L6-v2) and with client-sent embeddings. Loopback only; bounded.

    python bench/serve.py [--requests 128] [--clients 32] [--method corag]
"""

import argparse
import concurrent.futures
import os
import platform
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


def timed(url: str, body: dict, client: httpx.Client) -> float:
  t0 = time.perf_counter()
  r = client.post(url + "/v2/rerank", json=body)
  r.raise_for_status()
  return time.perf_counter() - t0


def one_at_a_time(url: str, reqs: list) -> tuple:
  with httpx.Client(timeout=120) as client:
    t0 = time.perf_counter()
    lat = [timed(url, b, client) for b in reqs]
    return time.perf_counter() - t0, lat


def concurrent_clients(url: str, reqs: list, clients: int) -> tuple:
  local = [httpx.Client(timeout=120) for _ in range(clients)]
  try:
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
      t0 = time.perf_counter()
      lat = list(pool.map(lambda ib: timed(url, ib[1], local[ib[0] % clients]),
                          enumerate(reqs), timeout=900))
      return time.perf_counter() - t0, lat
  finally:
    for c in local:
      c.close()


def line(name: str, wall: float, lat: list, n: int) -> str:
  p50, p99 = np.percentile(lat, [50, 99]) * 1000
  return f"| {name} | {n / wall:.1f} | {p50:.0f} | {p99:.0f} |"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--requests", type=int, default=128)
  ap.add_argument("--clients", type=int, default=32)
  ap.add_argument("--documents", type=int, default=10)
  ap.add_argument("--method", default=None)
  args = ap.parse_args()
  pipe = jaxsel.Pipeline(load_model(default_model()), method=args.method)
  app = serve.create_app(pipe, max_batch=args.clients)
  t0 = time.perf_counter()
  with serve.background(app) as url:
    print(f"warm-up {time.perf_counter() - t0:.1f} s; cpu {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print("| run | requests/s | p50 ms | p99 ms |\n|---|---|---|---|")
    for name, dim in (("server embedding", 0), ("client-sent embeddings", 384)):
      reqs = bodies(args.requests, args.documents, dim=dim)
      # Compiles what these shapes need (a batch of each size is its own program), unmeasured.
      one_at_a_time(url, reqs[:4])
      concurrent_clients(url, reqs, args.clients)
      # the embedding cache would serve the second run's texts: fresh texts for each run
      alone = one_at_a_time(url, bodies(args.requests, args.documents, dim=dim, seed=1))
      batched = concurrent_clients(url, bodies(args.requests, args.documents, dim=dim, seed=2),
                                   args.clients)
      print(line(f"{name}, one at a time", *alone, args.requests))
      print(line(f"{name}, {args.clients} clients (batched)", *batched, args.requests))
      print(f"| {name}: batched / one at a time | {alone[0] / batched[0]:.2f}x | | |")


if __name__ == "__main__":
  main()
