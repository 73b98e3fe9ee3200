"""Scale benchmark. Three suites, each measurement in its own subprocess reporting its own
peak resident memory (`ru_maxrss`), so one configuration's memory never hides another's.

* ``graph`` (default): end to end from embeddings: build a kNN graph (exact, or approximate
  through faiss) and run lazy greedy coverage on it (`jaxsel.knn_facility_location`, k picks).
  Approximate graphs report recall@m against the exact graph and the value of their picks on
  the exact graph's objective relative to the exact graph's own picks. The exact build also
  reports its GFLOP/s against NumPy's matmul of the same tiles, measured just before it.
* ``forms``: greedy coverage against N for the dense, matrix-free and kNN objectives.
* ``devices``: candidate- and data-parallel greedy against the number of forced CPU devices.

  python bench/scale.py                                   # graph suite at 10k and 100k
  python bench/scale.py --sizes 1000000 --methods ivf,hnsw --exact-max 0   # 1M, no exact
  python bench/scale.py --suite forms,devices --quick     # the older sweeps, small N

Data: clustered unit embeddings (`--dim`, default 384 as all-MiniLM-L6-v2), coverage
`f(S) = Σ_i max_{j∈S} s_ij` with clipped cosine similarity, `k` picks (default 100).
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
  out = centers[labels]
  for i in range(0, n, 65536):  # the same draws as one rng.normal((n, d)), without its float64 copy
    out[i:i + 65536] += 0.7 * rng.normal(size=(min(65536, n - i), d)).astype(np.float32)
  return out


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


GRAPH_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "jaxsel-scale")


def _exact_path(n: int, m: int, dim: int) -> str:
  return os.path.join(GRAPH_DIR, f"exact-n{n}-m{m}-d{dim}.npz")


def _cpu_s() -> float:
  return time.process_time()  # every thread of this process: BLAS, XLA, faiss


def child_matmul(cfg: dict) -> dict:
  """NumPy's matmul of the exact build's tile shape ([block, D] @ [D, block]), best of a few
  seconds: the machine's BLAS rate at this moment."""
  import numpy as np
  rng = np.random.default_rng(0)
  a = rng.normal(size=(cfg["block"], cfg["dim"])).astype(np.float32)
  b = rng.normal(size=(cfg["block"], cfg["dim"])).astype(np.float32)
  best, t_end = 0.0, time.perf_counter() + cfg.get("seconds", 3.0)
  while time.perf_counter() < t_end:
    t0 = time.perf_counter()
    for _ in range(4):
      a @ b.T
    best = max(best, 4 * 2 * cfg["block"] ** 2 * cfg["dim"] / (time.perf_counter() - t0) / 1e9)
  return dict(gflops=best)


def _sampled_recall(emb, neighbors, m: int, rows: int = 1000) -> float:
  """Recall@m of `neighbors` on `rows` random rows, against brute force (clipped cosine)."""
  import numpy as np
  e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  q = np.random.default_rng(1).choice(len(e), min(rows, len(e)), replace=False)
  hits = 0
  for i in range(0, len(q), 64):
    s = np.maximum(e[q[i:i + 64]] @ e.T, 0)
    truth = np.argpartition(-s, m - 1, axis=1)[:, :m]
    hits += sum(len(np.intersect1d(t, neighbors[j])) for t, j in zip(truth, q[i:i + 64]))
  return hits / (len(q) * m)


def child_graph(cfg: dict) -> dict:
  """One (N, graph method) point: build the graph from embeddings, greedy on it; then (after
  the peak memory is read) recall and the picks valued on the exact graph's objective."""
  import jax
  import jaxsel
  import numpy as np
  n, m, k, method = cfg["n"], cfg["m"], cfg["k"], cfg["method"]
  emb = _embeddings(n, cfg["dim"])
  base = _rss_mb()
  c0, t0 = _cpu_s(), time.perf_counter()
  if method == "exact-xla":  # the device build, forced by tracing (what runs on an accelerator)
    graph = jax.jit(lambda e: jaxsel.knn_graph(e, m=m, block=1024))(emb)
  else:
    graph = jaxsel.knn_graph(emb, m=m, method=method, progress=False)
  _block(graph)
  t1 = time.perf_counter()
  obj = jaxsel.knn_facility_location(graph)
  sel = _block(jaxsel.greedy(obj, k=k))
  t2, c2 = time.perf_counter(), _cpu_s()
  out = dict(build_s=t1 - t0, select_s=t2 - t1, cpu_s=c2 - c0, rss_mb=_rss_mb(), base_rss_mb=base,
             value=float(sel.values[-1]), picks=np.asarray(sel.indices).tolist())
  neighbors = np.asarray(graph.neighbors)
  path = _exact_path(n, m, cfg["dim"])
  if method == "exact":
    os.makedirs(GRAPH_DIR, exist_ok=True)
    np.savez(path, neighbors=neighbors, similarities=np.asarray(graph.similarities),
             picks=np.asarray(sel.indices))
  elif os.path.exists(path):
    ref = np.load(path)
    exact_obj = jaxsel.knn_facility_location(jaxsel.KnnGraph(ref["neighbors"], ref["similarities"]))
    value = jax.jit(lambda o, s: o.value(s))
    mask = np.zeros(n, bool)
    mask[np.asarray(sel.indices)] = True
    ref_mask = np.zeros(n, bool)
    ref_mask[ref["picks"]] = True
    out["rel_value"] = float(value(exact_obj, mask) / value(exact_obj, ref_mask))
    nb = ref["neighbors"]
    out["recall"] = float(np.mean([len(np.intersect1d(a, b)) for a, b in zip(neighbors, nb)]) / m)
    out["same_picks"] = out["picks"] == ref["picks"].tolist()
  if "recall" not in out and method != "exact":
    out["recall_sampled"] = _sampled_recall(emb, neighbors, m)
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


def graph_suite(args) -> dict:
  """The end-to-end table: kNN graph + lazy greedy, per N and graph method."""
  sizes = ([int(x) for x in args.sizes.split(",")] if args.sizes else
           [2000, 5000] if args.quick else [10_000, 100_000])
  methods = args.methods.split(",")
  k = min(args.k, min(sizes))
  results = {}
  print(f"## kNN graph + lazy greedy coverage (D={args.dim}, m={args.m}, k={k})\n")
  print("| N | graph | build s | greedy s (incl. compile) | total s | CPU s | peak RSS MB | "
        "RSS over start MB | recall@m | f(picks) / f(exact graph's picks) | picks = exact's | "
        "load avg |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|")
  for n in sizes:
    for method in methods:
      if method.startswith("exact") and n > args.exact_max:
        continue
      extra = ""
      if method == "exact":
        mm = _run_child("matmul", dict(block=2048, dim=args.dim))
        extra = f" — NumPy matmul of its tiles: {mm.get('gflops', float('nan')):.0f} GFLOP/s"
      load = os.getloadavg()[0]
      r = _run_child("graph", dict(n=n, dim=args.dim, m=args.m, k=k, method=method))
      results[f"{n}/{method}"] = r
      if "error" in r:
        print(f"| {n:,} | {method} | error: {r['error'][:100]} |", flush=True)
        continue
      if method.startswith("exact"):  # GFLOP/s of the full N²·D product (the host build does half)
        extra = f" (exact: {2 * n * n * args.dim / r['build_s'] / 1e9:.0f} GFLOP/s of E·Eᵀ{extra})"
      recall = (f"{r['recall']:.4f}" if "recall" in r else
                f"{r['recall_sampled']:.4f} (1000 rows)" if "recall_sampled" in r else "—")
      rel = f"{r['rel_value']:.4f}" if "rel_value" in r else "—"
      same = "—" if "same_picks" not in r else ("yes" if r["same_picks"] else "no")
      print(f"| {n:,} | {method}{extra} | {r['build_s']:.1f} | {r['select_s']:.1f} | "
            f"{r['build_s'] + r['select_s']:.1f} | {r['cpu_s']:.0f} | {r['rss_mb']:.0f} | "
            f"{r['rss_mb'] - r['base_rss_mb']:.0f} | {recall} | {rel} | {same} | "
            f"{load:.1f}–{os.getloadavg()[0]:.1f} |", flush=True)
  return results


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--suite", default="graph", help="comma-separated: graph, forms, devices")
  p.add_argument("--quick", action="store_true", help="small sizes only")
  p.add_argument("--sizes", default=None,
                 help="comma-separated N (graph: 10000,100000; forms: 1000..100000)")
  p.add_argument("--methods", default="exact,ivf,hnsw",
                 help="graph suite: exact, exact-xla (the device build, under jit), ivf, hnsw")
  p.add_argument("--exact-max", type=int, default=100_000,
                 help="largest N for the exact graph (1M: about an hour on 2 idle cores)")
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--dim", type=int, default=384)
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--m", type=int, default=32, help="neighbours per item of the kNN graphs")
  p.add_argument("--devices", default="1,2,8")
  p.add_argument("--device-n", type=int, default=10_000, help="N for the device sweep")
  p.add_argument("--out", default=None, help="write the raw results as JSON here")
  p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    kind, cfg = args.child[0], json.loads(args.child[1])
    children = dict(size=child_size, devices=child_devices, graph=child_graph, matmul=child_matmul)
    print(json.dumps(children[kind](cfg)))
    return
  suites = args.suite.split(",")
  results = {"graph": graph_suite(args) if "graph" in suites else {}, "sizes": {}, "devices": {}}
  if "forms" in suites:
    forms_suite(args, results)
  if "devices" in suites:
    devices_suite(args, results)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(results, f)


def forms_suite(args, results: dict) -> None:
  sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
           [500, 2000] if args.quick else [1000, 3000, 10_000, 30_000, 100_000])
  forms = args.forms.split(",")
  k = min(args.k, min(sizes))
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


def devices_suite(args, results: dict) -> None:
  k = min(args.k, 100)
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


if __name__ == "__main__":
  main()
