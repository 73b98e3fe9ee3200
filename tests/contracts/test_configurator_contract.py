"""The `jaxsel.contrib.Configurator` contract (what the Pipeline asks per CORAG request: given the
request's features, which scorer and search settings), asserted against the trained agent
class and a rule written by hand: `predict(features [D])` returns one choice whose scorer is
a registry name, with a positive int of iterations and finite, non-negative settings."""

import math

import numpy as np
import pytest
from flax import nnx

import jaxsel

D = 8


class FixedRule:
  """A configurator written by hand: the same scorer and settings for every request."""

  def predict(self, features):
    return jaxsel.contrib.SearchChoice(scorer="bridge", iterations=15, cost_penalty=0.2, exploration=2.0)


def _configurators():
  agent = jaxsel.contrib.ConfigAgent(jaxsel.contrib.AgentConfig(in_dim=D, scorers=("relevance", "bridge"),
                                                hidden=(16, 8)), rngs=nnx.Rngs(0))
  return {"config_agent": agent, "fixed_rule": FixedRule()}


CONFIGURATORS = _configurators()


@pytest.mark.parametrize("name", sorted(CONFIGURATORS))
def test_one_valid_choice_per_request(name):
  conf = CONFIGURATORS[name]
  assert isinstance(conf, jaxsel.contrib.Configurator)
  features = np.random.default_rng(0).normal(size=D).astype(np.float32)
  choice = conf.predict(features)
  assert choice.scorer in jaxsel.available_scorers()
  assert isinstance(choice.iterations, int) and choice.iterations >= 1
  for x in (choice.exploration, choice.cost_penalty):
    assert isinstance(x, float) and math.isfinite(x) and x >= 0
  again = conf.predict(features)
  assert tuple(again) == tuple(choice)  # the same request gets the same answer


def test_a_plain_object_is_not_a_configurator():
  assert not isinstance(object(), jaxsel.contrib.Configurator)
