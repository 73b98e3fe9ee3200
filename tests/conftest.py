import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tests/reference.py
sys.path.insert(0, os.path.dirname(HERE))  # the repository: `training` is a folder of it

from hypothesis import settings  # noqa: E402

# JIT compilation makes first calls slow; timing is not what these tests check.
settings.register_profile("jaxsel", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxsel")


import collections  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops JAX's compiled programs after each test module: one process runs many modules (the
  whole suite without xdist), and the thousands of XLA CPU executables it would otherwise keep
  (each with its own memory mappings) aborted the run inside the compiler (`Fatal Python
  error: Aborted` in `backend_compile_and_load`) once the suite grew. Tests that count
  compilations do so within a module."""
  yield
  jax.clear_caches()


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
