import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tests/reference.py
sys.path.insert(0, os.path.dirname(HERE))  # the repository: `training` is a folder of it

from hypothesis import settings  # noqa: E402

# JIT compilation makes first calls slow; timing is not what these tests check.
settings.register_profile("jaxsel", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxsel")


# XLA's LLVM backend at -O0: the tests check what the programs compute, not how fast they run,
# and most of the suite's time is XLA compiling (thousands of small programs), which -O0
# makes ~15% faster. The suite passes at both levels (its bitwise comparisons of XLA paths
# with the native kernels and NumPy included). Set before any backend starts, so the `jaxsel`
# command's subprocesses inherit it; the benchmarks and users compile at XLA's default level.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_backend_optimization_level=0").strip()

import collections  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

# One XLA compilation cache on disk for the whole run, shared by the pytest-xdist workers: many
# test files compile the same programs (all-MiniLM-L6-v2's forward pass per length bucket, the
# Pipeline's solves per shape bucket), and `_free_compiled_programs` below drops them from
# memory after each file; a later file then reads them back instead of compiling them again
# (about half the time of the pipeline and adapter tests). It starts empty every run and is
# removed at its end. Tests that count compilations (`compiles.CompileCounter`) count a program
# read back from this cache as a compilation, so "compiles nothing" still means "every
# program was in memory". The controller creates the folder before the workers start (they
# inherit the environment variable, which only this file reads); the `jaxsel` command's own
# cache (`--no-compile-cache`, `JAXSEL_COMPILE_CACHE`) is tested in subprocesses of the command,
# which never see this setting. An empty `JAXSEL_TESTS_XLA_CACHE=` runs the tests without it.
XLA_CACHE_VARIABLE = "JAXSEL_TESTS_XLA_CACHE"


def pytest_configure(config):
  if not hasattr(config, "workerinput") and XLA_CACHE_VARIABLE not in os.environ:
    config._jaxsel_xla_cache = os.environ[XLA_CACHE_VARIABLE] = tempfile.mkdtemp(
        prefix="jaxsel-tests-xla-")
  folder = os.environ.get(XLA_CACHE_VARIABLE)
  if folder:
    jax.config.update("jax_compilation_cache_dir", folder)
    # Programs that compile in under 0.1 s are cheaper to compile than to read back.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    if importlib.util.find_spec("filelock") is not None:
      # A size limit turns on JAX's LRU cache, whose file lock keeps the two workers' writes
      # whole (as `jaxsel.cli.common.enable_compile_cache` does); the limit is never reached.
      jax.config.update("jax_compilation_cache_max_size", 8 << 30)


def pytest_unconfigure(config):
  folder = getattr(config, "_jaxsel_xla_cache", None)
  if folder:
    shutil.rmtree(folder, ignore_errors=True)
    os.environ.pop(XLA_CACHE_VARIABLE, None)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops JAX's compiled programs after each test module: one process runs many modules (the
  whole suite without xdist), and the thousands of XLA CPU executables it would otherwise keep
  (each with its own memory mappings) aborted the run inside the compiler (`Fatal Python
  error: Aborted` in `backend_compile_and_load`) once the suite grew. Tests that count
  compilations do so within a module."""
  yield
  jax.clear_caches()


@pytest.fixture(scope="module")
def one_torch_thread():
  """PyTorch decodes on one thread for the module: 2 cores run two test workers (and other
  work), and PyTorch's thread pool spinning against them made decoding 10x slower under load."""
  import torch
  before = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
  """Under pytest-xdist (`make test`: `-n 2 --dist loadfile --no-loadscope-reorder`) each worker
  takes the next test file when it finishes one. Files with `slow` tests are queued first, then
  the rest by decreasing number of tests, so that no long file starts last while the other
  worker is idle. Order within a file is kept; a run without xdist keeps the collection order."""
  if not hasattr(config, "workerinput"):
    return
  module = lambda item: item.nodeid.split("::")[0]
  tests = collections.Counter(module(item) for item in items)
  slow = {module(item) for item in items if item.get_closest_marker("slow")}
  rank = {m: i for i, m in enumerate(sorted(tests, key=lambda m: (m not in slow, -tests[m])))}
  items.sort(key=lambda item: rank[module(item)])
