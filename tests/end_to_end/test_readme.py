"""Every Python block of the README runs as written: the README is the contract a newcomer
copies. The blocks run in order in one namespace (a later block may use an earlier one's
names, as a reader would); the names the README leaves to the reader (`document`, `llm`, your
own `embeddings`, ...) are defined by `reader_inputs` below from the bundled data."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxsel
from jaxsel.cli import DEMO_DOCUMENT

README = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "README.md")


def blocks() -> list:
  text = open(README, encoding="utf-8").read()
  return re.findall(r"```python\n(.*?)```", text, re.S)


def reader_inputs(tmp_path) -> dict:
  """What a reader brings: a document, an LLM call, embeddings of their own, a saved agent."""
  rng = np.random.default_rng(0)
  document = DEMO_DOCUMENT.read_text("utf-8")
  embeddings = rng.normal(size=(100, 384)).astype(np.float32)
  agent = jaxsel.ConfigAgent(jaxsel.AgentConfig(in_dim=384, scorers=("relevance", "links")),
                             rngs=nnx.Rngs(0))
  jaxsel.save_agent(agent, tmp_path / "out" / "agent")
  return {
      "document": document,
      "documents": [document, "A second document about Kansas City."],
      "llm": lambda prompt: prompt[:10],
      "embeddings": embeddings,
      "texts": [f"passage {i}" for i in range(100)],
      "urls": [f"https://example.org/{i}" for i in range(100)],
      "query_embeddings": rng.normal(size=(3, 384)).astype(np.float32),
      "query_embedding": rng.normal(size=384).astype(np.float32),
      "passages": ["Shirley Temple was an actress.", "Kiss and Tell is a 1945 film."],
  }


def test_every_python_block_runs(tmp_path, monkeypatch):
  code = blocks()
  assert len(code) >= 8
  monkeypatch.chdir(tmp_path)
  ns = reader_inputs(tmp_path)
  ns["encoder"] = None  # set below, once the README has loaded one
  for i, block in enumerate(code):
    if "encoder" in block and ns.get("enc") is not None:
      ns["encoder"] = ns["enc"]
    try:
      exec(compile(block, f"README.md python block {i + 1}", "exec"), ns)
    except Exception as e:  # name the block, not just the line
      pytest.fail(f"README python block {i + 1} failed: {type(e).__name__}: {e}\n{block}")
  assert ns["picks"].indices.shape == (2, 5) and int(ns["sel"].count) == 10


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
