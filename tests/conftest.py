import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tests/reference.py
sys.path.insert(0, os.path.dirname(HERE))  # the repository: `training` is a folder of it

from hypothesis import settings  # noqa: E402

# JIT compilation makes first calls slow; timing is not what these tests check.
settings.register_profile("jaxsel", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxsel")
