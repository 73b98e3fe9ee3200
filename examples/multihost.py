"""jaxsel on several hosts: one large selection problem and a batch of small ones.

Start one process per host; every process runs this same script (multi-controller JAX).
On one machine, two processes with four CPU devices each stand in for two hosts:

  python examples/multihost.py --coordinator localhost:12355 --num-processes 2 --process-id 0 &
  python examples/multihost.py --coordinator localhost:12355 --num-processes 2 --process-id 1

On a cluster, pass the coordinator (host:port of process 0), the process count and each
process's id, or call `jax.distributed.initialize()` with no arguments where JAX detects
them (SLURM, Cloud TPU, GKE, MPI). Everything after `initialize` is ordinary jaxsel code:
the `Mesh` spans the devices of all processes, every process passes the same inputs, each
transfers only the slices of its own devices, and results come back replicated.
"""

from __future__ import annotations

import argparse
import os


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--coordinator", default=None, help="host:port of process 0")
  p.add_argument("--num-processes", type=int, default=None)
  p.add_argument("--process-id", type=int, default=None)
  p.add_argument("--cpu-devices", type=int, default=4,
                 help="CPU devices per process when running on CPUs (a stand-in for accelerators)")
  p.add_argument("--n", type=int, default=3000, help="candidates of the large problem")
  p.add_argument("--k", type=int, default=20)
  args = p.parse_args(argv)

  # CPU stand-in only: several devices per process, and gloo for cross-process collectives.
  os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.cpu_devices}")
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")

  jax.distributed.initialize(coordinator_address=args.coordinator,
                             num_processes=args.num_processes, process_id=args.process_id)

  import numpy as np
  import jaxsel

  me, procs = jax.process_index(), jax.process_count()
  mesh = jax.make_mesh((jax.device_count(),), ("x",))
  print(f"[process {me}/{procs}] {jax.local_device_count()} local of {jax.device_count()} devices",
        flush=True)

  # Every process loads the same embeddings (in practice: the same file or index).
  rng = np.random.default_rng(0)
  emb = rng.normal(size=(args.n, 64)).astype(np.float32)

  # 1. Candidate parallel: one matrix-free facility location, candidates split over all
  #    devices of all hosts; the picks are those of one device.
  obj = jaxsel.facility_location_from_embeddings(emb)
  sel = jaxsel.candidate_sharded_greedy(obj, mesh=mesh, k=args.k)
  picks = np.asarray(sel.indices)  # replicated: every process can read it
  print(f"[process {me}] candidate-parallel picks {picks[:8].tolist()}... "
        f"f = {float(np.asarray(sel.values)[-1]):.3f}", flush=True)

  # 2. Data parallel: a batch of independent queries (here 2 per device), split over devices.
  b, n = 2 * jax.device_count(), 200
  rel = rng.uniform(size=(b, 1, n)).astype(np.float32)
  sims = jaxsel.cosine_similarity(rng.normal(size=(b, n, 64)).astype(np.float32))  # [B, n, n]
  batch = jaxsel.sharded_greedy(jaxsel.facility_location(sims, rel), mesh=mesh, k=5)
  # The result is split over the hosts along [B]: gather it to read it everywhere.
  from jax.experimental import multihost_utils
  indices = multihost_utils.process_allgather(batch.indices, tiled=True)
  print(f"[process {me}] data-parallel picks of query 0: {indices[0].tolist()} (B={len(indices)})",
        flush=True)

  if me == 0:  # check against one device
    ok = np.array_equal(np.asarray(jaxsel.greedy(obj, k=args.k).indices), picks)  # local arrays
    one = jax.vmap(lambda o: jaxsel.greedy(o, k=5))(jaxsel.facility_location(sims, rel))
    ok_batch = np.array_equal(np.asarray(one.indices), indices)
    print(f"[process 0] same picks as one device: candidate-parallel {ok}, data-parallel "
          f"{ok_batch}", flush=True)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
