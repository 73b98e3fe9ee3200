"""Benchmark: jaxsel greedy facility location against apricot and submodlib.

Not a test. Everything runs in one process on the same similarity matrices:

* single problem: dense precomputed similarity `[N, N]`, k = 100, N in {1000, 4000, 10000};
  jaxsel ``dense`` and ``lazy`` against apricot (``naive``, ``lazy``; as shipped and with its
  numba kernels compiled once) and submodlib (``NaiveGreedy``, ``LazyGreedy``);
* batch: 512 queries x 100 passages, k = 10, jaxsel ``jit(vmap(greedy))`` against each peer
  in a Python loop;
* the memory-bandwidth floor of dense greedy: each step streams the whole `[N, N]` matrix
  once, so it cannot beat `k·N²·4 bytes / read bandwidth` (measured here).

Times are medians of repeated runs (the machine is shared and noisy); jaxsel's compile time
is shown separately. Run from the repository root:

  .venv/bin/python bench/greedy.py                 # full run (about 15-25 min on 2 cores)
  .venv/bin/python bench/greedy.py --quick         # N in {500, 1000}, small batch, smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import statistics
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

import jaxsel
from jaxsel._src import native as _native


# --- helpers ---------------------------------------------------------------------------------

def load() -> float:
  return os.getloadavg()[0]


def timed(fn, *, repeats: int, budget_s: float):
  """Runs `fn` up to `repeats` times (fewer once `budget_s` is spent); returns (times, outs)."""
  times, outs, start = [], [], time.perf_counter()
  for _ in range(repeats):
    t = time.perf_counter()
    outs.append(fn())
    times.append(time.perf_counter() - t)
    if time.perf_counter() - start > budget_s:
      break
  return times, outs


def _native_state() -> str:
  """Whether jaxsel's C++ greedy kernels are in use (built now if they were not yet)."""
  from jaxsel._src.objectives import dense as objectives
  objectives._native_applies(np.zeros((2, 2), np.float32))
  return _native.status().get("greedy", "not asked for")


def med(times) -> float:
  return statistics.median(times)


def embeddings(rng, n: int, d: int = 64, clusters: int = 50) -> np.ndarray:
  """Clustered embeddings (a Gaussian mixture): passages about a few topics, like real text."""
  centres = rng.normal(size=(clusters, d))
  return centres[rng.integers(0, clusters, n)] + 0.7 * rng.normal(size=(n, d))


def cosine(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
  """Clipped cosine similarity in float32, the same matrix every library gets."""
  a = a / np.linalg.norm(a, axis=-1, keepdims=True)
  b = a if b is None else b / np.linalg.norm(b, axis=-1, keepdims=True)
  return np.maximum(a @ np.swapaxes(b, -1, -2), 0).astype(np.float32)


@contextlib.contextmanager
def apricot_kernels_compiled_once():
  """apricot builds and numba-compiles its kernels on every `fit`; memoise the factories."""
  import apricot.functions.facilityLocation as fl
  names = ("calculate_gains", "calculate_gains_sparse", "calculate_gains_sieve")
  saved = {n: getattr(fl, n) for n in names}
  for n, f in saved.items():
    setattr(fl, n, functools.lru_cache(maxsize=None)(f))
  try:
    yield
  finally:
    for n, f in saved.items():
      setattr(fl, n, f)


def apricot_fit(cand_major64: np.ndarray, k: int, optimizer: str) -> np.ndarray:
  from apricot import FacilityLocationSelection
  sel = FacilityLocationSelection(k, metric="precomputed", optimizer=optimizer).fit(cand_major64)
  return np.asarray(sel.ranking)


def submodlib_fit(sim32: np.ndarray, k: int, optimizer: str) -> np.ndarray:
  from submodlib import FacilityLocationFunction
  n = sim32.shape[0]
  # submodlib's dense kernel is item x candidate (f = Σ_i max_j s_ij); ours is symmetric.
  f = FacilityLocationFunction(n=n, mode="dense", sijs=sim32, separate_rep=False)
  picks = [p[0] for p in f.maximize(budget=k, optimizer=optimizer, show_progress=False)]
  return np.asarray(picks + [-1] * (k - len(picks)))


def have(module: str) -> str | None:
  try:
    __import__(module)
    return None
  except Exception as e:  # report why a peer is missing instead of failing the run
    return f"{type(e).__name__}: {e}"


# --- measurements ----------------------------------------------------------------------------

def bandwidth(n: int, repeats: int) -> dict:
  """Read bandwidth on an `[n, n]` float32 array: jitted jnp.sum and NumPy's sum."""
  x = jnp.asarray(np.random.default_rng(0).random((n, n), dtype=np.float32))
  f = jax.jit(jnp.sum)
  f(x).block_until_ready()
  tj, _ = timed(lambda: f(x).block_until_ready(), repeats=repeats, budget_s=30)
  xn = np.asarray(x)
  tn, _ = timed(lambda: xn.sum(), repeats=repeats, budget_s=30)
  gb = n * n * 4 / 1e9
  return {"jax": gb / med(tj), "numpy": gb / med(tn)}


def streaming_floor(x: jax.Array, k: int) -> jax.Array:
  """Reads `x` `[N, N]` k times, reducing along the contiguous axis, in one jitted loop:
  the memory traffic of dense greedy with none of its work (each pass depends on the
  last, so XLA cannot hoist it)."""
  body = lambda i, acc: jnp.max(jnp.sum(x - acc, axis=-1)) * 1e-30
  return jax.lax.fori_loop(0, k, body, jnp.zeros((), x.dtype))


def single(n: int, k: int, repeats: int, peers: list[str], slow_max_n: int, budget_s: float):
  rng = np.random.default_rng(n)
  sim = cosine(embeddings(rng, n))  # [N, N] float32, symmetric
  sim64 = sim.astype(np.float64)  # apricot's kernels take float64 only
  rows, ref = [], None
  load0 = load()

  t = time.perf_counter()
  obj = jaxsel.facility_location(sim)
  jax.block_until_ready(obj)
  prep = time.perf_counter() - t
  floor = jax.jit(streaming_floor, static_argnames="k")
  floor(obj.sim_t, k=k).block_until_ready()
  floor_times = []
  for method, native in (("dense", True), ("lazy", True), ("dense", False), ("lazy", False)):
    # Native: the C++ kernels (CPU default); "XLA path": the pure-JAX code with them off
    # (what saturated coverage and accelerators run).
    ctx = contextlib.nullcontext() if native else _native.disabled()
    ctx.__enter__()
    def run():
      if method == "dense" and native:  # interleaved, so the floor sees the same machine load
        t = time.perf_counter()
        floor(obj.sim_t, k=k).block_until_ready()
        floor_times.append(time.perf_counter() - t)
      t = time.perf_counter()
      out = jax.block_until_ready(jaxsel.greedy(obj, k=k, method=method))
      return time.perf_counter() - t, out
    t = time.perf_counter()
    jax.block_until_ready(jaxsel.greedy(obj, k=k, method=method))
    first_s = time.perf_counter() - t
    _, runs = timed(run, repeats=repeats, budget_s=budget_s)
    times, out = [r[0] for r in runs], runs[-1][1]
    picks = np.asarray(out.indices)
    if ref is None:
      ref = picks
    ctx.__exit__(None, None, None)
    rows.append(dict(lib="jaxsel", method=method if native else f"{method} (XLA path)", median=med(times),
                     runs=len(times), compile=max(first_s - med(times), 0.0), prep=prep,
                     same=float((picks == ref).mean())))

  def peer(lib, method, fn, *, runs=repeats):
    times, outs = timed(fn, repeats=runs, budget_s=budget_s)
    picks = outs[-1]
    rows.append(dict(lib=lib, method=method, median=med(times), runs=len(times),
                     same=float((picks[:k] == ref).mean())))

  if "apricot" in peers:
    for opt in ("naive", "lazy"):
      if opt == "naive" and n > slow_max_n:
        rows.append(dict(lib="apricot", method=f"{opt} (as shipped)", skipped=True))
      else:
        peer("apricot", f"{opt} (as shipped)", lambda: apricot_fit(sim64, k, opt), runs=min(repeats, 2))
      with apricot_kernels_compiled_once():
        apricot_fit(sim64[:50, :50], 5, opt)  # compile once, outside the timing
        peer("apricot", f"{opt} (kernels compiled once)", lambda: apricot_fit(sim64, k, opt))
  if "submodlib" in peers:
    for opt in ("NaiveGreedy", "LazyGreedy"):
      if opt == "NaiveGreedy" and n > slow_max_n:
        rows.append(dict(lib="submodlib", method=opt, skipped=True))
        continue
      peer("submodlib", opt, lambda: submodlib_fit(sim, k, opt))
  return rows, dict(load_start=load0, load_end=load(), n=n, floor_s=med(floor_times))


def batch(b: int, n: int, k: int, repeats: int, peers: list[str], budget_s: float, shipped_sample: int):
  """`b` queries, each with `n` retrieved passages; the similarity handed to every library is
  relevance-weighted facility location, `S[i, j] = r_j · s_ij` (query relevance times
  passage-passage similarity)."""
  rng = np.random.default_rng(1)
  topics = rng.normal(size=(b, 1, 64))
  passages = topics + 0.9 * rng.normal(size=(b, n, 64))  # [B, N, D]
  queries = topics[:, 0] + 0.5 * rng.normal(size=(b, 64))  # [B, D]
  s = cosine(passages)  # [B, N, N]
  r = cosine(queries[:, None, :], passages)[:, 0]  # [B, N]
  sims = (s * r[:, None, :]).astype(np.float32)  # item-major: [b, i, j] = r_j s_ij
  cand64 = np.swapaxes(sims, -1, -2).astype(np.float64)  # apricot's layout, row = candidate
  rows, ref = [], None
  load0 = load()

  built = jaxsel.facility_location(sims)
  for method, prebuilt, native in (("dense", False, True), ("lazy", False, True), ("dense", True, True),
                                   ("lazy", True, True), ("dense", True, False)):
    ctx = contextlib.nullcontext() if native else _native.disabled()
    ctx.__enter__()
    solve = jax.jit(jax.vmap(lambda o: jaxsel.greedy(o, k=k, method=method)))
    run = lambda: jax.block_until_ready(solve(built if prebuilt else jaxsel.facility_location(sims)))
    t = time.perf_counter()
    run()
    first_s = time.perf_counter() - t
    times, outs = timed(run, repeats=repeats, budget_s=budget_s)
    picks = np.asarray(outs[-1].indices)
    if ref is None:
      ref = picks
    ctx.__exit__(None, None, None)
    what = "objective built once, solve only" if prebuilt else "objective built from NumPy + solve"
    what += "" if native else "; XLA path"
    rows.append(dict(lib="jaxsel", method=f"{method} (jit+vmap; {what})", median=med(times), runs=len(times),
                     compile=max(first_s - med(times), 0.0), same=float((picks == ref).mean())))

  def loop(fn, m):
    return np.stack([fn(i) for i in range(m)])

  def peer(lib, method, fn, *, m=b, runs=repeats):
    times, outs = timed(lambda: loop(fn, m), repeats=runs, budget_s=budget_s)
    picks = outs[-1]
    scale = b / m
    rows.append(dict(lib=lib, method=method + ("" if m == b else f" (est. from {m} problems)"),
                     median=med(times) * scale, runs=len(times), same=float((picks == ref[:m]).mean())))

  if "apricot" in peers:
    for opt in ("naive", "lazy"):
      peer("apricot", f"{opt} (as shipped)", lambda i: apricot_fit(cand64[i], k, opt), m=shipped_sample, runs=1)
      with apricot_kernels_compiled_once():
        apricot_fit(cand64[0], k, opt)
        peer("apricot", f"{opt} (kernels compiled once)", lambda i: apricot_fit(cand64[i], k, opt))
  if "submodlib" in peers:
    # submodlib is item x candidate: the item-major matrix `sims`; constructing the function
    # object is part of each problem's cost.
    for opt in ("NaiveGreedy", "LazyGreedy"):
      peer("submodlib", opt, lambda i: submodlib_fit(np.ascontiguousarray(sims[i]), k, opt))
  return rows, dict(load_start=load0, load_end=load(), b=b, n=n)


# --- report ----------------------------------------------------------------------------------

def best_peer(rows):
  peers = [r for r in rows if r["lib"] != "jaxsel" and not r.get("skipped")]
  return min(peers, key=lambda r: r["median"]) if peers else None


def table(title, rows, info, floor_s=None) -> str:
  best = best_peer(rows)
  out = [f"### {title}", "",
         f"load (1-min average) {info['load_start']:.1f} at start, {info['load_end']:.1f} at end"
         + (f"; best peer: {best['lib']} {best['method']}" if best else ""), "",
         "| library | method | median s | runs | compile s | same picks | jaxsel / best peer | vs floor |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    if r.get("skipped"):
      out.append(f"| {r['lib']} | {r['method']} | skipped (too slow at this N) | | | | | |")
      continue
    ratio = f"{r['median'] / best['median']:.3f} ({best['median'] / r['median']:.1f}x faster)" \
        if best and r["lib"] == "jaxsel" else ""
    floor = f"{r['median'] / floor_s:.2f}x" if floor_s and r["lib"] == "jaxsel" and r["method"].startswith("dense") else ""
    comp = f"{r['compile']:.2f}" if "compile" in r else ""
    out.append(f"| {r['lib']} | {r['method']} | {r['median']:.4f} | {r['runs']} | {comp} | "
               f"{r['same']:.2f} | {ratio} | {floor} |")
  prep = [r["prep"] for r in rows if "prep" in r]
  if prep:
    out += ["", f"jaxsel objective construction (`facility_location` from the NumPy matrix: checks "
            f"+ candidate-major copy), once per matrix, not in the medians above: {prep[0]:.3f} s."]
    lazy = [r for r in rows if r["lib"] == "jaxsel" and r["method"] == "lazy"]
    if best and lazy:
      total = prep[0] + lazy[0]["median"]
      out += [f"End to end (construction + lazy solve, what a caller with a NumPy matrix waits): "
              f"{total:.3f} s, {best['median'] / total:.1f}x faster than the best peer."]
  if floor_s:
    out += [f"dense floor k·N²·4 B / bandwidth = {floor_s:.4f} s (a jitted loop reading the "
            f"matrix k times, reducing along the contiguous axis)."]
  return "\n".join(out) + "\n"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 10000])
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--budget-s", type=float, default=45.0, help="stop repeating one measurement after this")
  p.add_argument("--batch", type=int, default=512)
  p.add_argument("--passages", type=int, default=100)
  p.add_argument("--batch-k", type=int, default=10)
  p.add_argument("--shipped-sample", type=int, default=3,
                 help="problems timed for apricot as shipped in the batch (it compiles per fit)")
  p.add_argument("--slow-max-n", type=int, default=4000,
                 help="largest N for the naive peers (submodlib NaiveGreedy takes minutes at 10000)")
  p.add_argument("--peers", nargs="*", default=["apricot", "submodlib"])
  p.add_argument("--skip-single", action="store_true")
  p.add_argument("--skip-batch", action="store_true")
  p.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
  p.add_argument("--out", help="also write the markdown report to this file")
  a = p.parse_args(argv)
  if a.quick:
    a.sizes, a.repeats, a.batch, a.budget_s = [500, 1000], 3, 64, 10.0

  peers = []
  for name, module in (("apricot", "apricot"), ("submodlib", "submodlib")):
    if name in a.peers:
      why = have(module)
      print(f"# {name}: {'missing: ' + why if why else 'available'}", file=sys.stderr)
      if not why:
        peers.append(name)

  header = [f"## run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"jax {jax.__version__} ({jax.default_backend()}), numpy {np.__version__}, python "
            f"{platform.python_version()}; peers: {', '.join(peers) or 'none'}; "
            f"medians of up to {a.repeats} runs (fewer once {a.budget_s:.0f} s are spent); "
            f"native kernels: {_native_state()}.", ""]
  report = ["\n".join(header)]
  print(report[0], flush=True)
  if not a.skip_single:
    for n in a.sizes:
      bw = bandwidth(n, a.repeats)
      rows, info = single(n, a.k, a.repeats, peers, a.slow_max_n, a.budget_s)
      floor_s = info["floor_s"]
      t = table(f"single problem: N = {n}, k = {a.k}", rows, info, floor_s)
      t += (f"read bandwidth: {a.k * n * n * 4 / 1e9 / floor_s:.1f} GB/s from the k-pass streaming "
            f"loop (interleaved with the dense runs, same load; this sets the floor); one pass "
            f"alone: jitted jnp.sum {bw['jax']:.1f} GB/s, NumPy sum {bw['numpy']:.1f} GB/s.\n")
      print(t, flush=True)
      report.append(t)
  if not a.skip_batch:
    rows, info = batch(a.batch, a.passages, a.batch_k, a.repeats, peers, a.budget_s, a.shipped_sample)
    t = table(f"batch: {a.batch} queries x {a.passages} passages, k = {a.batch_k}", rows, info)
    t += ("\njaxsel rows say whether the batched objective is built from the NumPy matrices "
          "inside the timing; peer loops include building each peer object.\n")
    print(t, flush=True)
    report.append(t)
  if a.out:
    with open(a.out, "w") as f:
      f.write("\n".join(report))


if __name__ == "__main__":
  main()
