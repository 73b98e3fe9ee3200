"""Every Python block of the README and of each docs page runs as written: they are the contract
a newcomer copies. No glue: a page's blocks run in order in one namespace, as a reader pastes
them into one session (one namespace per page), and each block defines the inputs it uses
(the bundled document, the encoder, random embeddings), so it also runs pasted on its own."""

import builtins
import os
import re
import symtable

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
PAGES = ["README.md"] + sorted(f"docs/{name}" for name in os.listdir(DOCS) if name.endswith(".md"))
# Pages whose blocks load a model (the encoder or the answer model): seconds to minutes each.
SLOW = ("load_encoder", "load_generator", "Pipeline(")


def text(page: str) -> str:
  return open(os.path.join(ROOT, page), encoding="utf-8").read()


def blocks(page: str) -> list:
  return re.findall(r"```python\n(.*?)```", text(page), re.S)


def page_param(page: str):
  slow = any(word in block for block in blocks(page) for word in SLOW)
  return pytest.param(page, marks=[pytest.mark.slow] if slow else [], id=page)


def run_page(page: str) -> dict:
  ns = {}
  for i, block in enumerate(blocks(page)):
    try:
      exec(compile(block, f"{page} python block {i + 1}", "exec"), ns)
    except Exception as e:  # name the block, not just the line
      pytest.fail(f"{page} python block {i + 1} failed: {type(e).__name__}: {e}\n{block}")
  return ns


@pytest.mark.parametrize("page", [page_param(p) for p in PAGES if blocks(p)])
def test_every_python_block_runs(page, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  ns = run_page(page)
  if page == "README.md":
    assert 1 <= int(ns["sel"].count) <= 6  # 40 tokens each within 256
    assert ns["batch"].order.shape == (2, 3)  # the CORAG block's batch (it reuses the name)
    assert ns["fl"].method == "facility_location" and "Kiss and Tell?" in ns["prompt"]
  if page == "docs/scale.md":
    assert ns["picks"].indices.shape == (2, 5)


def test_pages_have_python_blocks():
  assert len(blocks("README.md")) == 3  # Pipeline, JAX core, CORAG
  for page in ("docs/pipeline.md", "docs/objectives.md", "docs/corag.md", "docs/encoders.md",
               "docs/vector-index.md", "docs/answering.md", "docs/integrations.md", "docs/scale.md"):
    assert blocks(page), f"{page} has no python block"
  for page in ("README.md", "docs/methods.md"):  # the measured defaults against NaiveRAG
    assert "NaiveRAG" in text(page) and "`Pipeline(enc)`" in text(page), page


@pytest.mark.parametrize("page", PAGES)
def test_each_block_defines_the_names_it_uses(page):
  """Pasted on its own, a block finds every name it reads: its own or Python's."""
  for i, block in enumerate(blocks(page)):
    table = symtable.symtable(block, f"{page} block {i + 1}", "exec")
    free = {s.get_name() for s in table.get_symbols()
            if s.is_referenced() and not s.is_assigned() and not s.is_imported()}
    assert not free - set(dir(builtins)), f"{page} python block {i + 1} uses {free}, undefined"


def test_core_example_runs():
  section = text("README.md").split("## Submodular selection from JAX code", 1)[1]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  ns = {}
  exec(compile(code, "README.md", "exec"), ns)
  sel, batch = ns["sel"], ns["batch"]
  picks = np.asarray(sel.indices[: int(sel.count)])
  assert float(np.asarray(ns["tokens"])[picks].sum()) <= 256.0
  assert batch.indices.shape == (2, 5)
  assert (np.asarray(batch.indices[1]) < 37).all()
