"""The `jaxsel.Generator` contract, asserted against the test double the Pipeline tests use
and the real back ends that need no network: one stripped answer per prompt, in order."""

import pytest

import jaxsel
from doubles import EchoGenerator

PROMPTS = ["Context:\nParis is in France.\n\nQuestion: Where is Paris?\nAnswer:",
           "Context:\n2 + 2 = 4\n\nQuestion: 2 + 2?\nAnswer:"]


def _generators():
  gens = {"echo_double": EchoGenerator()}
  try:
    gens["smollm2"] = jaxsel.load_generator()
  except ModuleNotFoundError as e:  # the llm extra is part of `make test`: never expected here
    pytest.fail(f"the offline default generator must load in the test environment: {e}")
  return gens


@pytest.fixture(scope="module")
def generators():
  return _generators()


@pytest.mark.parametrize("name", ["echo_double", "smollm2"])
def test_one_answer_per_prompt_in_order(generators, name):
  gen = generators[name]
  assert isinstance(gen, jaxsel.Generator) and isinstance(gen.name, str)
  batch = gen.generate(PROMPTS, max_new_tokens=12)
  assert isinstance(batch, list) and len(batch) == 2 and all(isinstance(a, str) for a in batch)
  assert [a == a.strip() for a in batch] == [True, True]
  assert [gen.generate([p], max_new_tokens=12)[0] for p in PROMPTS] == batch
