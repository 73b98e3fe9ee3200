"""Memory mappings of a long-running `jaxsel serve`: the same mixed requests (1-1,000 HotpotQA
paragraphs, budgets none / 256 / 1,024 tokens, the default method and granularity) against
the server as shipped (`--max-programs` 128) and with the bound lifted, each server in its own
process with a fresh compile cache. XLA:CPU keeps every compiled program mapped (up to hundreds
of mappings each) while JAX's caches hold it, and Linux stops a process at 65,530 mappings
(`vm.max_map_count`): the compiler then aborts the server. Loopback only; bounded.

    python bench/serve_programs.py [--sizes 1,2,...,1000] [--max-programs 128]
"""

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

import serve  # bench/serve.py: `running`

DATA = Path(__file__).resolve().parents[2] / "shared/data/train/hotpotqa_hard/train.jsonl"
SIZES = (1, 2, 3, 5, 8, 12, 20, 30, 45, 64, 90, 128, 180, 256, 360, 512, 720, 1000)
BUDGETS = (None, 256, 1024)


def maps(pid: int) -> int:
  with open(f"/proc/{pid}/maps") as f:
    return sum(1 for _ in f)


def metric(url: str, name: str) -> float:
  m = re.search(rf"^{name} (\S+)$", httpx.get(url + "/metrics").text, re.M)
  return float(m.group(1)) if m else float("nan")


def run(max_programs: int, sizes, rows, paragraphs) -> list:
  """Per size: (size, mappings, programs held, frees, seconds so far); None when it died."""
  rng = np.random.default_rng(0)
  out = []

  def argv_of(port):
    return [sys.executable, "-m", "jaxsel.cli", "serve", "--port", str(port),
            "--max-programs", str(max_programs)]

  with tempfile.TemporaryDirectory() as cache, serve.running(
      argv_of, env=dict(os.environ, JAXSEL_COMPILE_CACHE=cache)) as (proc, url):
    t0, i = time.perf_counter(), 0
    for n in sizes:
      for budget in BUDGETS:
        body = {"query": rows[i % len(rows)]["question"],
                "documents": [paragraphs[j] for j in rng.choice(len(paragraphs), n,
                                                                 replace=False)]}
        if budget is not None:
          body["budget_tokens"] = budget
        i += 1
        try:
          r = httpx.post(url + "/v2/rerank", json=body, timeout=600)
        except httpx.TransportError:
          out.append((n, None, None, None, time.perf_counter() - t0))
          return out
        assert r.status_code == 200, r.text
      out.append((n, maps(proc.pid), metric(url, "jaxsel_serve_compiled_programs"),
                  metric(url, "jaxsel_serve_compiled_program_frees"), time.perf_counter() - t0))
      print(*out[-1], flush=True)
  return out


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
  ap.add_argument("--max-programs", type=int, default=128)
  args = ap.parse_args()
  sizes = [int(x) for x in args.sizes.split(",")]
  rows = [json.loads(line) for line in open(DATA)][:200]
  paragraphs = ["".join(s) for r in rows for _, s in r["context"]]
  print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; cpu "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.2f}; {len(sizes) * len(BUDGETS)} requests")
  runs = {f"--max-programs {args.max_programs}": run(args.max_programs, sizes, rows, paragraphs),
          "bound lifted": run(10**9, sizes, rows, paragraphs)}
  print("| server | documents | mappings | programs held | frees | seconds so far |")
  print("|---|---|---|---|---|---|")
  for name, rows_ in runs.items():
    for n, m, held, frees, s in rows_:
      print(f"| {name} | {n} | {m if m is not None else 'died'} | "
            f"{'' if held is None else int(held)} | {'' if frees is None else int(frees)} | "
            f"{s:.0f} |")
  for name, rows_ in runs.items():
    peak = max((m for _, m, *_ in rows_ if m is not None), default=0)
    print(f"{name}: peak {peak} mappings, {rows_[-1][-1]:.0f} s for all requests")


if __name__ == "__main__":
  main()
