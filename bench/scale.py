"""Scale benchmark: time and peak memory of greedy facility location against N (dense vs
matrix-free vs sparse kNN) and against the number of (forced) CPU devices.

  python bench/scale.py                 # full run (N up to 100,000; ~15 min on 2 cores)
  python bench/scale.py --quick         # smoke run (small N)
  python bench/scale.py --sizes 1000,10000 --forms matrix_free,knn

Every measurement runs in its own subprocess, which reports its own peak resident memory
(`ru_maxrss`), so one configuration's memory never hides another's. Data: clustered unit
embeddings (`--dim`, default 384 as all-MiniLM-L6-v2), coverage `f(S) = Σ_i max_{j∈S} s_ij`
with clipped cosine similarity, lazy greedy, `k` picks. The peer of each row is named in
the table: matrix-free and kNN against dense where dense fits, devices against 1 device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DENSE_MAX = 20_000  # [N, N] float32 is 1.6 GB at 20k (and the constructor holds two copies)
# Exact lazy greedy on matrix-free clipped cosine: the first picks lower almost every
# candidate's gain (high-dimensional cosines are small but mostly positive), so lazy
# re-evaluates most of N for each of them: several O(N²·D) passes. Beyond this N the
# matrix-free form runs stochastic greedy (one sample of N/k·ln(1/ε) candidates per pick).
LAZY_MAX = 30_000
FORMS = {  # form -> (objective, greedy method)
    "dense": ("dense", "lazy"),
    "matrix_free": ("matrix_free", "lazy"),
    "matrix_free_stochastic": ("matrix_free", "stochastic"),
    "knn": ("knn", "lazy"),
}


def _embeddings(n: int, d: int, seed: int = 0):
  import numpy as np
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(max(8, n // 100), d)).astype(np.float32)
  labels = rng.integers(0, len(centers), n)
  return centers[labels] + 0.7 * rng.normal(size=(n, d)).astype(np.float32)


def _rss_mb() -> float:
  import resource
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _objective(form: str, emb, m: int):
  import jaxsel
  if form == "dense":
    return jaxsel.coverage(jaxsel.cosine_similarity(emb))
  if form == "matrix_free":
    return jaxsel.facility_location_from_embeddings(emb)
  return jaxsel.knn_facility_location(emb, m=m)


def _block(tree):
  import jax
  jax.block_until_ready(jax.tree.leaves(tree))
  return tree


def child_size(cfg: dict) -> dict:
  """One (form, N) point on one device."""
  import jax
  import jaxsel
  import numpy as np
  emb = _embeddings(cfg["n"], cfg["dim"])
  form, method = FORMS[cfg["form"]]
  base = _rss_mb()
  t0 = time.perf_counter()
  obj = _block(_objective(form, emb, cfg["m"]))
  t1 = time.perf_counter()
  sel = _block(jaxsel.greedy(obj, k=cfg["k"], method=method, key=jax.random.key(0)))
  t2 = time.perf_counter()
  out = dict(build_s=t1 - t0, greedy_s=t2 - t1, rss_mb=_rss_mb(), base_rss_mb=base,
             value=float(sel.values[-1]), picks=np.asarray(sel.indices).tolist())
  if form == "knn":  # kNN picks re-valued on the exact objective
    exact = jaxsel.facility_location_from_embeddings(emb)
    mask = np.zeros(cfg["n"], bool)
    mask[np.asarray(sel.indices)] = True
    out["exact_value"] = float(jax.jit(lambda o, s: o.value(s))(exact, mask))
  return out


def child_devices(cfg: dict) -> dict:
  """Candidate-parallel greedy on `devices` forced CPU devices, and data-parallel greedy."""
  import jax
  import jax.numpy as jnp
  import jaxsel
  import numpy as np
  assert len(jax.devices()) == cfg["devices"], jax.devices()
  mesh = jax.make_mesh((cfg["devices"],), ("x",))
  emb = _embeddings(cfg["n"], cfg["dim"])
  obj = _block(_objective(cfg["form"], emb, cfg["m"]))
  t0 = time.perf_counter()
  sel = _block(jaxsel.candidate_sharded_greedy(obj, mesh=mesh, k=cfg["k"]))
  t1 = time.perf_counter()
  _block(jaxsel.candidate_sharded_greedy(obj, mesh=mesh, k=cfg["k"]))
  t2 = time.perf_counter()
  # Bytes of the candidate-side arrays one device holds (shards of N/d candidates).
  from jaxsel._src.sharding import _CANDIDATE_AXES
  per_dev = sum(getattr(obj, f).nbytes // cfg["devices"] if a is not None else getattr(obj, f).nbytes
                for f, a in _CANDIDATE_AXES[type(obj)].items() if getattr(obj, f) is not None)
  # Data parallel: a batch of small dense problems.
  b, nb = cfg["batch"], cfg["batch_n"]
  sims = jnp.stack([jaxsel.cosine_similarity(_embeddings(nb, 64, seed=s)) for s in range(b)])
  objs = _block(jaxsel.coverage(sims))
  _block(jaxsel.sharded_greedy(objs, mesh=mesh, k=cfg["k"] // 2))
  t3 = time.perf_counter()
  batch = _block(jaxsel.sharded_greedy(objs, mesh=mesh, k=cfg["k"] // 2))
  t4 = time.perf_counter()
  return dict(first_s=t1 - t0, greedy_s=t2 - t1, rss_mb=_rss_mb(), per_device_mb=per_dev / 2**20,
              picks=np.asarray(sel.indices).tolist(), batch_s=t4 - t3,
              batch_picks=np.asarray(batch.indices).tolist())


def _run_child(kind: str, cfg: dict, devices: int = 1) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  proc = subprocess.run([sys.executable, __file__, "--child", kind, json.dumps(cfg)], env=env,
                        capture_output=True, text=True)
  if proc.returncode:
    return dict(error=proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--quick", action="store_true", help="small sizes only")
  p.add_argument("--sizes", default=None, help="comma-separated N (default 1000..100000)")
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--dim", type=int, default=384)
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--m", type=int, default=32, help="neighbours per item for the kNN form")
  p.add_argument("--devices", default="1,2,8")
  p.add_argument("--device-n", type=int, default=10_000, help="N for the device sweep")
  p.add_argument("--out", default=None, help="write the raw results as JSON here")
  p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    kind, cfg = args.child[0], json.loads(args.child[1])
    print(json.dumps((child_size if kind == "size" else child_devices)(cfg)))
    return

  sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
           [500, 2000] if args.quick else [1000, 3000, 10_000, 30_000, 100_000])
  forms = args.forms.split(",")
  k = min(args.k, min(sizes))
  results = {"sizes": {}, "devices": {}}
  print(f"## N sweep (D={args.dim}, k={k}, m={args.m}, coverage; greedy method per form)\n")
  print("| N | form | method | build s | greedy s (incl. compile) | peak RSS MB | "
        "RSS over start MB | arrays MB (theory) | picks = peer | f(picks) / f(peer picks) | peer |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for n in sizes:
    row = {}
    for form in forms:
      if (form == "dense" and n > DENSE_MAX) or (form == "matrix_free" and n > LAZY_MAX):
        continue
      r = _run_child("size", dict(form=form, n=n, dim=args.dim, k=k, m=args.m))
      row[form] = r
      theory = {"dense": 2 * n * n * 4, "matrix_free": n * args.dim * 4,
                "matrix_free_stochastic": n * args.dim * 4, "knn": n * args.m * 8}[form] / 2**20
      if "error" in r:
        print(f"| {n:,} | {form} | error: {r['error'][:80]} |")
        continue
      # The peer: exact greedy on the exact objective (dense, else matrix-free lazy), or for
      # the kNN form at sizes without it, matrix-free stochastic greedy.
      peer = next((p for p in ("dense", "matrix_free", "matrix_free_stochastic")
                   if p != form and p in row and "error" not in row[p]), None)
      if form in ("dense", "matrix_free") and peer == "matrix_free_stochastic":
        peer = None
      same = "—" if peer is None else ("yes" if r["picks"] == row[peer]["picks"] else "no")
      v = r.get("exact_value", r["value"])
      ratio = "—" if peer is None else f"{v / row[peer]['value']:.4f}"
      print(f"| {n:,} | {form} | {FORMS[form][1]} | {r['build_s']:.1f} | {r['greedy_s']:.1f} | "
            f"{r['rss_mb']:.0f} | {r['rss_mb'] - r['base_rss_mb']:.0f} | {theory:.1f} | {same} | "
            f"{ratio} | {peer or '—'} |", flush=True)
    results["sizes"][n] = row

  devs = [int(x) for x in args.devices.split(",")]
  dn = 2000 if args.quick else args.device_n
  print(f"\n## Device sweep (forced CPU devices on this machine's cores; N={dn:,}, k={k})\n")
  print("| form | devices | candidate-parallel greedy s (compiled) | first call s | "
        "candidate arrays per device MB | picks = 1 device | data-parallel batch s | "
        "batch picks = 1 device |")
  print("|---|---|---|---|---|---|---|---|")
  for form in ("matrix_free", "knn"):
    ref = None
    for d in devs:
      r = _run_child("devices", dict(form=form, n=dn, dim=args.dim, k=k, m=args.m, devices=d,
                                     batch=16, batch_n=1000), devices=d)
      results["devices"][f"{form}/{d}"] = r
      if "error" in r:
        print(f"| {form} | {d} | error: {r['error'][:80]} |")
        continue
      ref = ref or r
      print(f"| {form} | {d} | {r['greedy_s']:.2f} ({r['greedy_s'] / ref['greedy_s']:.2f}×) | "
            f"{r['first_s']:.1f} | {r['per_device_mb']:.1f} | "
            f"{'yes' if r['picks'] == ref['picks'] else 'no'} | "
            f"{r['batch_s']:.2f} ({r['batch_s'] / ref['batch_s']:.2f}×) | "
            f"{'yes' if r['batch_picks'] == ref['batch_picks'] else 'no'} |", flush=True)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(results, f)


if __name__ == "__main__":
  main()
