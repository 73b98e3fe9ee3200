import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from hypothesis import settings  # noqa: E402

# JIT compilation makes first calls slow; timing is not what these tests check.
settings.register_profile("jaxsel", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxsel")
