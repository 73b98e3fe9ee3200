"""Every Python block of the README runs as written: the README is the contract a newcomer
copies. No glue: the blocks run in order in one namespace, as a reader pastes them into one
session, and each defines the inputs it uses (the bundled document, a placeholder `llm`, random
embeddings), except the framework adapters' blocks, which say they use the first example's
`enc`, `pipe` and `document`."""

import builtins
import os
import re
import symtable

import numpy as np
import pytest

README = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "README.md")


def blocks() -> list:
  text = open(README, encoding="utf-8").read()
  return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.slow
def test_every_python_block_runs(tmp_path, monkeypatch):
  code = blocks()
  assert len(code) >= 8
  monkeypatch.chdir(tmp_path)
  ns = {}
  for i, block in enumerate(code):
    try:
      exec(compile(block, f"README.md python block {i + 1}", "exec"), ns)
    except Exception as e:  # name the block, not just the line
      pytest.fail(f"README python block {i + 1} failed: {type(e).__name__}: {e}\n{block}")
  assert ns["picks"].indices.shape == (2, 5) and int(ns["sel"].count) == 10


def test_each_block_defines_the_names_it_uses():
  """Pasted on its own, a block finds every name it reads: its own or Python's. The adapters'
  blocks are the exception they state (the first example's `enc`, `pipe`, `document`)."""
  for i, block in enumerate(blocks()):
    if "as in the first example" in block:
      continue
    table = symtable.symtable(block, f"block {i + 1}", "exec")
    free = {s.get_name() for s in table.get_symbols()
            if s.is_referenced() and not s.is_assigned() and not s.is_imported()}
    assert not free - set(dir(builtins)), f"README python block {i + 1} uses {free}, undefined"


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
