"""The README's core example runs as written."""

import os
import re

import numpy as np

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")


def test_core_example_runs():
  text = open(README, encoding="utf-8").read()
  section = text.split("## Submodular selection from JAX code", 1)[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  ns = {}
  exec(compile(code, "README.md", "exec"), ns)
  sel, batch = ns["sel"], ns["batch"]
  picks = np.asarray(sel.indices[: int(sel.count)])
  assert float(np.asarray(ns["tokens"])[picks].sum()) <= 256.0
  assert batch.indices.shape == (2, 5)
  assert (np.asarray(batch.indices[1]) < 37).all()
