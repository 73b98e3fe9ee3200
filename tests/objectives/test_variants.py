"""Every built library variant (`native.VARIANTS`: AVX-512, AVX2, baseline) that this CPU can run
gives the same runs bit for bit: each is loaded alone in a fresh process
(`JAXSEL_NATIVE_VARIANT`) and solves the same problems (lazy with the byte bounds, dense, weighted,
saturated, with costs, an item-major batch, the symmetry check and the host check-and-copy).
A variant this CPU cannot run is never loaded; its library must still open and export every
kernel (dlopen runs none of its code)."""

import ctypes
import json
import os
import subprocess
import sys

import pytest

from jaxsel._src import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels not built")

_SCRIPT = r"""
import json
import numpy as np
import jax, jaxsel
from jaxsel._src import native
from jaxsel._src.objectives import cover_kernel
assert native.available(), native.status()
rng = np.random.default_rng(0)
def cos(n, d=24):
  e = rng.normal(size=(n, d)).astype(np.float32)
  e /= np.linalg.norm(e, axis=1, keepdims=True)
  return np.clip(e @ e.T, 0, None)
s = cos(2100)  # lazy float32 steps with the byte bounds from N = 2048
r = rng.random((3, 300), dtype=np.float32)
small = cos(300)
costs = rng.integers(1, 9, 300).astype(np.float32)
batch = np.stack([cos(40) * rng.random(40, dtype=np.float32)[None] for _ in range(16)])
runs = {
    "lazy": jaxsel.greedy(jaxsel.facility_location(s), k=30, method="lazy"),
    "dense": jaxsel.greedy(jaxsel.facility_location(small), k=20, method="dense"),
    "weighted": jaxsel.greedy(jaxsel.facility_location(small, r), k=20, method="lazy"),
    "saturated": jaxsel.greedy(jaxsel.saturated_coverage(small, r), k=20, method="lazy"),
    "costs": jaxsel.greedy(jaxsel.facility_location(small), k=20, costs=costs, budget=25.0, method="lazy"),
    "batch": jax.jit(jax.vmap(lambda x: jaxsel.greedy(jaxsel.coverage(x), k=6)))(batch),
}
out = {name: [np.asarray(getattr(sel, f)).tobytes().hex() for f in ("indices", "gains", "values", "bound")]
       for name, sel in runs.items()}
out["symmetry"] = list(cover_kernel.symmetry_check(jax.device_put(s)))
copy = np.empty_like(small)
out["check_copy"] = list(cover_kernel.check_copy(small, copy)) + [bool((copy == small).all())]
print(json.dumps({"status": native.status(), "out": out}))
"""


def _runnable():
  flags = native._cpu_flags()
  return [v for v in native.VARIANTS if native.library_path(v) is not None and native._NEEDS[v] <= flags]


def _run(variant):
  env = dict(os.environ, JAXSEL_NATIVE_VARIANT=variant, JAX_PLATFORMS="cpu")
  res = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  return json.loads(res.stdout.strip().splitlines()[-1])


def test_runnable_variants_give_the_same_bits():
  variants = _runnable()
  if len(variants) < 2:
    pytest.skip(f"only {variants} built and runnable here")
  got = {v: _run(v) for v in variants}
  for v in variants:
    assert native.library_path(v).name in got[v]["status"]
  first = variants[0]
  for v in variants[1:]:
    for name, want in got[first]["out"].items():
      assert got[v]["out"][name] == want, (v, first, name)


def test_unrunnable_variants_open_and_are_never_loaded():
  flags = native._cpu_flags()
  for v in native.VARIANTS:
    path = native.library_path(v)
    if path is None:
      continue
    lib = ctypes.CDLL(str(path))  # opening runs no kernel code
    for symbol in [*native.TARGETS.values(), "JaxselCheckCopy", "JaxselScratchTake", "JaxselScratchGive"]:
      assert getattr(lib, symbol)
    if not native._NEEDS[v] <= flags:
      env = dict(os.environ, JAXSEL_NATIVE_VARIANT=v, JAX_PLATFORMS="cpu")
      res = subprocess.run([sys.executable, "-c", "from jaxsel._src import native; print(native.status())"],
                           env=env, capture_output=True, text=True, timeout=120, check=True)
      assert "cannot run" in res.stdout
