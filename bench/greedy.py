"""Benchmark: jaxsel greedy facility location against apricot and submodlib.

Not a test. Everything runs in one process on the same similarity matrices:

* single problem: clustered embeddings `E` `[N, 64]` and their clipped cosine `S` `[N, N]`
  (a NumPy float32 array, as a caller has it), k = 100, N in {1000, 4000, 10000}:
  - solve only: jaxsel ``lazy`` on the objective built once (native CPU kernel, and the XLA
    path that accelerators run) against apricot's lazy greedy (numba kernels compiled once)
    and submodlib's ``LazyGreedy``; and, slower, dense greedy and the naive/as-shipped peers;
  - end to end, from the arrays a caller has: `greedy(facility_location(S))` (checks and
    layout included), and from the embeddings `greedy(facility_location_from_embeddings(E))`
    and `greedy(facility_location(cosine_similarity(E)))` against apricot's NumPy cosine +
    fit;
* batch: 512 queries x 100 passages, k = 10, `jit(vmap(greedy))` solve only, and end to end
  in the form JAX code has it: `jit(vmap(lambda s: greedy(coverage(s), k).indices))` on a
  device array; each peer in a Python loop;
* the memory-bandwidth floor of dense greedy: each step streams the whole `[N, N]` matrix
  once, so it cannot beat `k·N²·4 bytes / read bandwidth` (measured on this device).

The rows of a table are timed in interleaved rounds (every row once per round) and reported
as medians, so they share the machine's load; ratios are within one table. Run from the
repository root:

  .venv/bin/python bench/greedy.py                 # full run (about 15-25 min on 2 cores)
  .venv/bin/python bench/greedy.py --quick         # N in {500, 1000}, small batch, smoke run
  .venv/bin/python bench/greedy.py --sizes 4000 10000 --skip-slow --repeats 7   # the goals
  .venv/bin/python bench/greedy.py --sizes 4000 10000 --skip-single --skip-batch --first-call 3
  .venv/bin/python bench/greedy.py --sizes 4000 10000 --real-only --repeats 7   # real embeddings
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import statistics
import subprocess
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
  """Whether jaxsel's C++ greedy kernels are loaded (and why not)."""
  return _native.status() if jax.default_backend() == "cpu" else f"not used on {jax.default_backend()}"


def interleaved(fns: dict, *, repeats: int, budget_s: float) -> dict:
  """Times every callable of `fns` once per round, round after round (so all of them see the
  same machine load), up to `repeats` rounds or until `budget_s` is spent; each is run once
  first, untimed (compiles). Returns name -> (times, last output)."""
  out = {name: ([], jax.block_until_ready(fn())) for name, fn in fns.items()}
  start = time.perf_counter()
  for _ in range(repeats):
    for name, fn in fns.items():
      out[name] = (out[name][0], None)  # free the last result (a 400 MB objective) first
      t = time.perf_counter()
      res = jax.block_until_ready(fn())
      out[name][0].append(time.perf_counter() - t)
      out[name] = (out[name][0], res)
    if time.perf_counter() - start > budget_s:
      break
  return out


def aligned_copy(x: np.ndarray, align: int = 64) -> np.ndarray:
  """A copy of `x` whose data starts on an `align`-byte boundary."""
  raw = np.empty(x.nbytes + align, np.uint8)
  start = (-raw.ctypes.data) % align
  out = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
  out[...] = x
  return out


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


def _picks(x) -> np.ndarray:
  return np.asarray(jax.block_until_ready(x.indices if hasattr(x, "indices") else x))


def single(n: int, k: int, repeats: int, peers: list[str], slow_max_n: int, budget_s: float,
           skip_slow: bool):
  """One problem of N passages: solve-only rows (the objective built once) and end-to-end
  rows (from the arrays a caller has: the NumPy matrix, or the embeddings), interleaved."""
  rng = np.random.default_rng(n)
  emb = embeddings(rng, n).astype(np.float32)  # [N, D]
  sim = cosine(emb)  # [N, N] float32, symmetric (NumPy's allocation: 16-byte aligned)
  sim64 = sim.astype(np.float64)  # apricot's kernels take float64 only
  cpu = jax.default_backend() == "cpu"
  load0 = load()

  t = time.perf_counter()
  obj = jax.block_until_ready(jaxsel.facility_location(sim))
  first_build = time.perf_counter() - t
  floor = jax.jit(streaming_floor, static_argnames="k")
  paths = [("auto", "native")] if cpu else []
  paths.append(("xla", "XLA path"))
  fast = {}  # name -> (group, callable)
  for backend, label in paths:
    fast[f"lazy ({label})"] = ("solve", lambda b=backend: jaxsel.greedy(obj, k=k, backend=b))
  fast["dense floor loop"] = ("floor", lambda: floor(obj.sim_t, k=k))
  fast["construction: facility_location(S)"] = ("build", lambda: jaxsel.facility_location(sim))
  fast["lazy from the NumPy matrix: facility_location(S) + greedy"] = (
      "e2e", lambda: jaxsel.greedy(jaxsel.facility_location(sim), k=k))
  # The same matrix in 64-byte aligned memory (which jax.device_put shares, as it does a
  # jax.Array): construction is then one pass of the checks and the symmetry test, no copy.
  aligned = aligned_copy(sim)
  fast["lazy from the NumPy matrix in 64-byte aligned memory: facility_location(S) + greedy"] = (
      "e2e", lambda: jaxsel.greedy(jaxsel.facility_location(aligned), k=k))
  fast["lazy from embeddings: facility_location_from_embeddings(E) + greedy"] = (
      "e2e-emb", lambda: jaxsel.greedy(jaxsel.facility_location_from_embeddings(emb), k=k))
  fast["lazy from embeddings: facility_location(cosine_similarity(E)) + greedy"] = (
      "e2e-emb", lambda: jaxsel.greedy(jaxsel.facility_location(jaxsel.cosine_similarity(emb)), k=k))
  if "apricot" in peers:
    ctx = apricot_kernels_compiled_once()
    ctx.__enter__()
    apricot_fit(sim64[:50, :50], 5, "lazy")  # compile once, outside the timing
    fast["apricot lazy (kernels compiled once)"] = ("peer", lambda: apricot_fit(sim64, k, "lazy"))
    fast["apricot lazy from embeddings: NumPy cosine + fit (compiled once)"] = (
        "peer-emb", lambda: apricot_fit(cosine(emb).astype(np.float64), k, "lazy"))
  if "submodlib" in peers:
    fast["submodlib LazyGreedy"] = ("peer", lambda: submodlib_fit(sim, k, "LazyGreedy"))
  res = interleaved({name: fn for name, (_, fn) in fast.items()}, repeats=repeats, budget_s=budget_s)
  if "apricot" in peers:
    ctx.__exit__(None, None, None)

  slow = {}
  if not skip_slow:
    for backend, label in paths:
      slow[f"dense ({label})"] = ("solve", lambda b=backend: jaxsel.greedy(obj, k=k, method="dense", backend=b))
    if n <= slow_max_n:
      if "apricot" in peers:
        for opt in ("naive", "lazy"):
          slow[f"apricot {opt} (as shipped)"] = ("peer", lambda o=opt: apricot_fit(sim64, k, o))
      if "submodlib" in peers:
        slow["submodlib NaiveGreedy"] = ("peer", lambda: submodlib_fit(sim, k, "NaiveGreedy"))
    if "apricot" in peers:
      with apricot_kernels_compiled_once():
        apricot_fit(sim64[:50, :50], 5, "naive")
        r = interleaved({"apricot naive (kernels compiled once)": lambda: apricot_fit(sim64, k, "naive")},
                        repeats=max(1, repeats // 2), budget_s=budget_s)
      res.update(r)
      slow["apricot naive (kernels compiled once)"] = ("peer", None)
    res.update(interleaved({name: fn for name, (_, fn) in slow.items() if fn is not None},
                           repeats=max(1, repeats // 2), budget_s=budget_s))
  groups = {name: g for name, (g, _) in {**fast, **slow}.items()}
  ref = _picks(res[f"lazy ({paths[0][1]})"][1])
  rows = []
  for name, (times, out) in res.items():
    g = groups[name]
    if g in ("floor", "build"):
      continue
    picks = _picks(out)[:k]
    rows.append(dict(name=name, group=g, median=med(times), runs=len(times),
                     same=float((picks == ref).mean())))
  info = dict(load_start=load0, load_end=load(), n=n, floor_s=med(res["dense floor loop"][0]),
              build_s=med(res["construction: facility_location(S)"][0]), first_build_s=first_build)
  solve_name = f"lazy ({paths[0][1]})"
  e2e_name = "lazy from the NumPy matrix: facility_location(S) + greedy"
  info["breakdown"] = dict(build=info["build_s"], solve=med(res[solve_name][0]), e2e=med(res[e2e_name][0]),
                           peer=min((med(res[r][0]) for r, (g, _) in fast.items() if g == "peer"), default=None))
  return rows, info


def batch(b: int, n: int, k: int, repeats: int, peers: list[str], budget_s: float, shipped_sample: int):
  """`b` queries, each with `n` retrieved passages; the similarity handed to every library is
  relevance-weighted facility location, `S[i, j] = r_j · s_ij` (query relevance times
  passage-passage similarity: not symmetric)."""
  rng = np.random.default_rng(1)
  topics = rng.normal(size=(b, 1, 64))
  passages = topics + 0.9 * rng.normal(size=(b, n, 64))  # [B, N, D]
  queries = topics[:, 0] + 0.5 * rng.normal(size=(b, 64))  # [B, D]
  s = cosine(passages)  # [B, N, N]
  r = cosine(queries[:, None, :], passages)[:, 0]  # [B, N]
  sims = (s * r[:, None, :]).astype(np.float32)  # item-major: [b, i, j] = r_j s_ij
  cand64 = np.swapaxes(sims, -1, -2).astype(np.float64)  # apricot's layout, row = candidate
  dev = jax.device_put(sims)
  load0 = load()
  cpu = jax.default_backend() == "cpu"

  built = jaxsel.coverage(sims)
  fns = {}
  for method in ("lazy", "dense"):
    for backend in (("auto", "xla") if cpu and method == "dense" else ("auto",)):
      tag = "" if backend == "auto" else "; XLA path"
      solve = jax.jit(jax.vmap(lambda o, m=method, be=backend: jaxsel.greedy(o, k=k, method=m, backend=be).indices))
      fns[(f"{method} (jit+vmap; objective built once, solve only{tag})", "solve")] = lambda f=solve: f(built)
  inside = jax.jit(jax.vmap(lambda s: jaxsel.greedy(jaxsel.coverage(s), k=k).indices))
  fns[("lazy, in jit from a device array: jit(vmap(lambda s: greedy(coverage(s), k).indices))", "e2e")] = \
      lambda: inside(dev)
  from_np = jax.jit(jax.vmap(lambda o: jaxsel.greedy(o, k=k).indices))
  fns[("lazy, from NumPy: coverage(sims) + jit(vmap(greedy))", "e2e")] = lambda: from_np(jaxsel.coverage(sims))

  def loop(fn, m):
    return np.stack([fn(i) for i in range(m)])

  if "apricot" in peers:
    ctx = apricot_kernels_compiled_once()
    ctx.__enter__()
    apricot_fit(cand64[0], k, "lazy")
    fns[("apricot lazy (kernels compiled once), Python loop", "peer")] = \
        lambda: loop(lambda i: apricot_fit(cand64[i], k, "lazy"), b)
  if "submodlib" in peers:
    # submodlib is item x candidate: the item-major matrix `sims`; constructing the function
    # object is part of each problem's cost.
    fns[("submodlib LazyGreedy, Python loop", "peer")] = \
        lambda: loop(lambda i: submodlib_fit(np.ascontiguousarray(sims[i]), k, "LazyGreedy"), b)
  res = interleaved({name: fn for (name, _), fn in fns.items()}, repeats=repeats, budget_s=budget_s)
  if "apricot" in peers:
    ctx.__exit__(None, None, None)
  groups = {name: g for (name, g) in fns}
  ref = _picks(res[next(iter(res))][1])
  rows = [dict(name=name, group=groups[name], median=med(t), runs=len(t),
               same=float((_picks(out) == ref).mean())) for name, (t, out) in res.items()]
  if "submodlib" in peers:
    t, out = timed(lambda: loop(lambda i: submodlib_fit(np.ascontiguousarray(sims[i]), k, "NaiveGreedy"), b),
                   repeats=max(1, repeats // 2), budget_s=budget_s)
    rows.append(dict(name="submodlib NaiveGreedy, Python loop", group="peer", median=med(t), runs=len(t),
                     same=float((out[-1] == ref).mean())))
  return rows, dict(load_start=load0, load_end=load(), b=b, n=n)


REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "bench",
                    "minilm_hotpot_12k.npy")


def real(path: str, n: int, k: int, repeats: int, peers: list[str], budget_s: float):
  """What users run: `greedy(facility_location(S), k, method="lazy")` with `S = clip(E @ E.T, 0)`
  over real all-MiniLM-L6-v2 embeddings `E` of HotpotQA paragraphs (the first `n` of `path`),
  from NumPy's own array, from a jax.Array and from the embeddings, interleaved with the peers
  and with a copy of `S` (the bandwidth floor: one read of `S` is at most half a copy's time)."""
  e = np.load(path)[:n].astype(np.float32)
  sim = np.clip(e @ e.T, 0, None)  # NumPy's own array (16-byte aligned)
  dev = jax.device_put(sim)
  buf = np.empty_like(sim)
  fns = {
      "copy of S into a kept buffer (NumPy)": ("floor", lambda: np.copyto(buf, sim)),
      "from NumPy's own array: greedy(facility_location(S))": (
          "e2e", lambda: jaxsel.greedy(jaxsel.facility_location(sim), k=k, method="lazy")),
      "from a jax.Array: greedy(facility_location(S))": (
          "e2e", lambda: jaxsel.greedy(jaxsel.facility_location(dev), k=k, method="lazy")),
      "from embeddings: greedy(facility_location(cosine_similarity(E)))": (
          "e2e-emb", lambda: jaxsel.greedy(jaxsel.facility_location(jaxsel.cosine_similarity(e)), k=k,
                                           method="lazy")),
  }
  ctx = None
  if "apricot" in peers:
    sim64 = sim.astype(np.float64)
    ctx = apricot_kernels_compiled_once()
    ctx.__enter__()
    apricot_fit(sim64[:50, :50], 5, "lazy")
    fns["apricot lazy (numba compiled once)"] = ("peer", lambda: apricot_fit(sim64, k, "lazy"))
  if "submodlib" in peers:
    fns["submodlib LazyGreedy"] = ("peer", lambda: submodlib_fit(sim, k, "LazyGreedy"))
  load0 = load()
  res = interleaved({name: fn for name, (_, fn) in fns.items()}, repeats=repeats, budget_s=budget_s)
  if ctx is not None:
    ctx.__exit__(None, None, None)
  floor = med(res["copy of S into a kept buffer (NumPy)"][0]) / 2
  peer = min((med(res[name][0]) for name, (g, _) in fns.items() if g == "peer"), default=None)
  ref = _picks(res["from NumPy's own array: greedy(facility_location(S))"][1])
  lines = [f"### real embeddings (MiniLM, HotpotQA): N = {n}, k = {k}", "",
           f"load (1-min average) {load0:.1f} at start, {load():.1f} at end; rows timed in "
           f"interleaved rounds (medians); floor = one read of S = half a copy = {floor:.4f} s", "",
           "| what | median s | runs | same picks | time / floor | best peer / this |",
           "|---|---:|---:|---:|---:|---:|"]
  for name, (g, _) in fns.items():
    if g == "floor":
      continue
    times, out = res[name]
    m = med(times)
    same = "" if g == "peer" and "submodlib" in name else f"{float((_picks(out)[:k] == ref).mean()):.2f}"
    ratio = f"**{peer / m:.1f}x**" if peer and not g.startswith("peer") else ""
    lines.append(f"| {name} | {m:.4f} | {len(times)} | {same} | {m / floor:.1f} | {ratio} |")
  return "\n".join(lines) + "\n"


_FIRST_CALL = r"""
import sys, time, json
import numpy as np
sys.path.insert(0, sys.argv[4])
import greedy as B
n, k, who = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sim = B.cosine(B.embeddings(np.random.default_rng(n), n).astype(np.float32))
if who == "jaxsel":
  import jax, jaxsel
  run = lambda: jax.block_until_ready(jaxsel.greedy(jaxsel.facility_location(sim), k=k).indices)
else:
  import apricot
  run = lambda: B.apricot_fit(sim.astype(np.float64), k, "lazy")
t = time.perf_counter(); run(); first = time.perf_counter() - t
t = time.perf_counter(); run(); second = time.perf_counter() - t
print(json.dumps({"first": first, "second": second}))
"""


def first_call(n: int, k: int, rounds: int, peers: list[str]):
  """End to end from the NumPy matrix in fresh processes (the modules imported, the matrix
  made, then the first call timed: jaxsel's includes compiling or loading its programs from
  JAX's cache; apricot's includes numba's compile, as shipped), jaxsel and apricot alternating
  process by process; and the second call of each process."""
  who = ["jaxsel"] + (["apricot"] if "apricot" in peers else [])
  times = {w: [] for w in who}
  load0 = load()
  here = os.path.dirname(os.path.abspath(__file__))
  for _ in range(rounds):
    for w in who:
      out = subprocess.run([sys.executable, "-c", _FIRST_CALL, str(n), str(k), w, here],
                           capture_output=True, text=True, check=True).stdout
      times[w].append(__import__("json").loads(out.strip().splitlines()[-1]))
  lines = [f"### first call in a fresh process: N = {n}, k = {k}", "",
           f"load (1-min average) {load0:.1f} at start, {load():.1f} at end; {rounds} processes each, "
           "alternating; medians", "",
           "| what | first call s | second call s | apricot / this (first, second) |", "|---|---:|---:|---:|"]
  for w in who:
    f, s2 = med([t["first"] for t in times[w]]), med([t["second"] for t in times[w]])
    ratio = ""
    if w == "jaxsel" and "apricot" in times:
      af, as2 = med([t["first"] for t in times["apricot"]]), med([t["second"] for t in times["apricot"]])
      ratio = f"**{af / f:.1f}x**, **{as2 / s2:.1f}x**"
    name = ("jaxsel: greedy(facility_location(S), k)" if w == "jaxsel"
            else "apricot lazy (as shipped: numba compiles in the first fit)")
    lines.append(f"| {name} | {f:.3f} | {s2:.3f} | {ratio} |")
  return "\n".join(lines) + "\n"


def recompiles(n: int, k: int, calls: int = 3) -> str:
  """Programs compiled by repeat calls (after one warm-up call each, new data of the same shapes
  every call), counted from JAX's compile log: the single-problem calls from NumPy's own array,
  from a jax.Array and from embeddings, and the in-jit batch from a device array and from NumPy."""
  import logging
  compiled = []

  class Count(logging.Handler):
    def emit(self, record):
      if "Compiling" in record.getMessage():
        compiled.append(record.getMessage()[:80])

  rng = np.random.default_rng(7)
  def sim(m):
    return cosine(embeddings(rng, m).astype(np.float32))
  inside = jax.jit(jax.vmap(lambda s: jaxsel.greedy(jaxsel.coverage(s), k=10).indices))
  from_np = jax.jit(jax.vmap(lambda o: jaxsel.greedy(o, k=10).indices))
  work = {
      "greedy(facility_location(S)), NumPy": lambda: jaxsel.greedy(jaxsel.facility_location(sim(n)), k=k),
      "greedy(facility_location(S)), jax.Array": lambda: jaxsel.greedy(
          jaxsel.facility_location(jax.device_put(sim(n))), k=k),
      "greedy(facility_location_from_embeddings(E))": lambda: jaxsel.greedy(
          jaxsel.facility_location_from_embeddings(embeddings(rng, n).astype(np.float32)), k=k),
      "in-jit batch from a device array": lambda: inside(jax.device_put(
          np.stack([sim(100) for _ in range(64)]))),
      "batch from NumPy: coverage(sims) + jit(vmap(greedy))": lambda: from_np(
          jaxsel.coverage(np.stack([sim(100) for _ in range(64)]))),
  }
  handler = Count()
  logger = logging.getLogger("jax")
  out = []
  with jax.log_compiles(True):
    logger.addHandler(handler)
    try:
      for name, fn in work.items():
        jax.block_until_ready(fn())
        compiled.clear()
        for _ in range(calls):
          jax.block_until_ready(fn())
        out.append(f"{name}: {len(compiled)}")
    finally:
      logger.removeHandler(handler)
  return (f"recompiles on {calls} repeat calls (N = {n}, new data each call): " + "; ".join(out) + "\n")


# --- report ----------------------------------------------------------------------------------

def table(title, rows, info, floor_s=None) -> str:
  peers = [r for r in rows if r["group"].startswith("peer")]
  best = {}
  for g in ("peer", "peer-emb"):
    cand = [r for r in peers if r["group"] == g]
    if cand:
      best[g] = min(cand, key=lambda r: r["median"])
  out = [f"### {title}", "",
         f"load (1-min average) {info['load_start']:.1f} at start, {info['load_end']:.1f} at end; "
         "rows of one table were timed in interleaved rounds (medians)", "",
         "| what | median s | runs | same picks | best peer / this | vs floor |",
         "|---|---:|---:|---:|---:|---:|"]
  for r in rows:
    against = best.get("peer-emb" if r["group"] in ("e2e-emb", "peer-emb") else "peer")
    ratio = f"**{against['median'] / r['median']:.1f}x**" if against and not r["group"].startswith("peer") else ""
    fl = f"{r['median'] / floor_s:.2f}x" if floor_s and r["name"].startswith("dense") else ""
    out.append(f"| {r['name']} | {r['median']:.4f} | {r['runs']} | {r['same']:.2f} | {ratio} | {fl} |")
  out.append("")
  if best:
    out.append("best peer: " + "; ".join(f"{g}: {b['name']} {b['median']:.4f} s" for g, b in best.items())
               + " (from-embeddings rows are compared with the peer's own from-embeddings row).")
  if "build_s" in info:
    out.append(f"construction alone (`facility_location(S)` from the NumPy matrix, 16-byte aligned "
               f"as NumPy allocates it: NumPy's checks (min, max) and the transposed copy into "
               f"aligned memory that jax.device_put shares): "
               f"{info['build_s']:.4f} s (first call {info['first_build_s']:.4f} s).")
  if "breakdown" in info:
    b = info["breakdown"]
    line = (f"**breakdown (end to end from the NumPy matrix)**: construction {b['build']:.4f} s + lazy "
            f"solve {b['solve']:.4f} s = {b['build'] + b['solve']:.4f} s; measured together "
            f"{b['e2e']:.4f} s")
    if b["peer"]:
      line += (f"; best peer {b['peer']:.4f} s, so 10x needs <= {b['peer'] / 10:.4f} s "
               f"(now {b['peer'] / b['e2e']:.1f}x; construction alone {b['peer'] / b['build']:.1f}x, "
               f"solve alone {b['peer'] / b['solve']:.1f}x)")
    out.append(line + ".")
  if floor_s:
    out.append(f"dense floor k·N²·4 B / bandwidth = {floor_s:.4f} s (a jitted loop reading the "
               f"matrix k times, reducing along the contiguous axis).")
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
  p.add_argument("--first-call", type=int, default=0, metavar="ROUNDS",
                 help="also time the first call in fresh processes, ROUNDS processes per library")
  p.add_argument("--skip-slow", action="store_true",
                 help="only the interleaved rows: no dense solves, naive or as-shipped peers")
  p.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
  p.add_argument("--real", nargs="?", const=REAL, metavar="NPY",
                 help="also the real-embedding workload ([N, D] embeddings, default the shared "
                      "MiniLM HotpotQA file) at --sizes")
  p.add_argument("--real-only", action="store_true", help="only the real-embedding workload")
  p.add_argument("--recompiles", action="store_true",
                 help="also count the programs compiled by repeat calls (should be 0)")
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
  if a.recompiles:
    t = recompiles(a.sizes[0], a.k)
    print(t, flush=True)
    report.append(t)
  if a.real_only:
    a.real = a.real or REAL
    a.skip_single = a.skip_batch = True
  if a.real:
    for n in a.sizes:
      t = real(a.real, n, a.k, a.repeats, peers, a.budget_s)
      print(t, flush=True)
      report.append(t)
  if not a.skip_single:
    for n in a.sizes:
      bw = bandwidth(n, a.repeats)
      rows, info = single(n, a.k, a.repeats, peers, a.slow_max_n, a.budget_s, a.skip_slow)
      floor_s = info["floor_s"]
      t = table(f"single problem: N = {n}, k = {a.k}", rows, info, floor_s)
      t += (f"read bandwidth: {a.k * n * n * 4 / 1e9 / floor_s:.1f} GB/s from the k-pass streaming "
            f"loop (interleaved with the dense runs, same load; this sets the floor); one pass "
            f"alone: jitted jnp.sum {bw['jax']:.1f} GB/s, NumPy sum {bw['numpy']:.1f} GB/s.\n")
      print(t, flush=True)
      report.append(t)
  if a.first_call:
    for n in a.sizes:
      t = first_call(n, a.k, a.first_call, peers)
      print(t, flush=True)
      report.append(t)
  if not a.skip_batch:
    rows, info = batch(a.batch, a.passages, a.batch_k, a.repeats, peers, a.budget_s, a.shipped_sample)
    t = table(f"batch: {a.batch} queries x {a.passages} passages, k = {a.batch_k}", rows, info)
    t += ("\njaxsel rows say whether the batched objective is built inside the timing; peer "
          "loops include building each peer object.\n")
    print(t, flush=True)
    report.append(t)
  if a.out:
    with open(a.out, "w") as f:
      f.write("\n".join(report))


if __name__ == "__main__":
  main()
