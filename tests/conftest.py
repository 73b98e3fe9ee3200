import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tests/reference.py
sys.path.insert(0, os.path.dirname(HERE))  # the repository: `training` is a folder of it

from hypothesis import settings  # noqa: E402

# JIT compilation makes first calls slow; timing is not what these tests check.
settings.register_profile("jaxsel", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxsel")


import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops JAX's compiled programs after each test module: one process runs the whole suite,
  and the thousands of XLA CPU executables it would otherwise keep (each with its own memory
  mappings) aborted the run inside the compiler (`Fatal Python error: Aborted` in
  `backend_compile_and_load`) once the suite grew. Tests that count compilations do so within
  a module."""
  yield
  jax.clear_caches()
