"""The configuration agent: a Siamese MLP that picks a scorer and search settings per query.

Shape legend: B batch, D query-embedding dimension, F feature dimension (last tower
width, 128 by default), S scorers, P = 3 search settings (iterations, cost penalty
lambda, exploration c).

CORAG's observation is that no single scorer ("reranker") or search setting is best for
every query. The agent reads the query embedding alone and predicts

* a scorer, by a classification head over `AgentConfig.scorers`, and
* the search settings, by a regression head whose sigmoid outputs lie in `[0, 1]` and
  are mapped affinely onto the configured ranges (iterations rounded to an integer), so
  every prediction is a valid setting by construction (`config.denormalize_settings`).

The encoder tower `D -> 512 -> 256 -> 128` is shared ("Siamese"): the contrastive loss
(`loss`) pulls together the features of queries with the same best scorer and pushes apart
the others by a margin. The model is a `flax.nnx` module; `train` compiles its training
step, `params` saves and loads it. A `ConfigAgent` is a `jaxsel.contrib.Configurator`: `predict`
answers the Pipeline's question per request.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxsel._src.agent.config import SETTINGS, AgentConfig, SearchChoice, denormalize_settings

Array = jax.Array


class AgentOutput(NamedTuple):
  features: Array  # [B, F] tower output used by the contrastive loss
  scorer_logits: Array  # [B, S]
  settings: Array  # [B, P] normalised settings in [0, 1]



class ConfigAgent(nnx.Module):
  """Siamese MLP: a shared tower, a scorer-classification head and a settings-regression head.

  Call it on query embeddings `[B, D]` (or `[D]`) to get an `AgentOutput`; use `predict`
  for decoded choices.
  """

  def __init__(self, config: AgentConfig, *, rngs: nnx.Rngs):
    if not isinstance(config, AgentConfig):
      raise TypeError(f"`config` must be an AgentConfig, got {type(config).__name__}.")
    self.config = config
    widths = (config.in_dim,) + config.hidden
    # Named attributes (not a list) keep parameter paths string-keyed for checkpoints.
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
      setattr(self, f"tower_{i}", nnx.Linear(a, b, rngs=rngs))
    self.scorer_head = nnx.Linear(config.feature_dim, len(config.scorers), rngs=rngs)
    self.settings_head = nnx.Linear(config.feature_dim, len(SETTINGS), rngs=rngs)

  def features(self, x: Array) -> Array:
    """Tower output `[B, F]`: ReLU between layers, linear last layer."""
    n = len(self.config.hidden)
    for i in range(n):
      x = getattr(self, f"tower_{i}")(x)
      if i < n - 1:
        x = nnx.relu(x)
    return x

  def __call__(self, x: Array) -> AgentOutput:
    f = self.features(x)
    h = nnx.relu(f)
    return AgentOutput(f, self.scorer_head(h), nnx.sigmoid(self.settings_head(h)))

  def predict_arrays(self, query_embeddings) -> tuple:
    """Decoded predictions as arrays (jit-able): `(scorer_index int32 [B], iterations
    int32 [B], cost_penalty [B], exploration [B])`."""
    out = self(query_embeddings)
    it, lam, c = denormalize_settings(self.config, out.settings)
    return jnp.argmax(out.scorer_logits, axis=-1).astype(jnp.int32), it, lam, c

  def predict(self, query_embeddings):
    """Scorer name and search settings per query.

    Args:
      query_embeddings: `[D]` for one query or `[B, D]` for a batch.

    Returns:
      A `SearchChoice` for `[D]` input, a list of `B` of them for `[B, D]`.
    """
    x = check_embeddings(query_embeddings, self.config.in_dim)
    single = x.ndim == 1
    idx, it, lam, c = _predict_jit(self, x[None] if single else x)
    idx, it, lam, c = (np.asarray(a) for a in (idx, it, lam, c))
    choices = [SearchChoice(self.config.scorers[int(i)], int(n), float(l), float(e))
               for i, n, l, e in zip(idx, it, lam, c)]
    return choices[0] if single else choices


@nnx.jit
def _predict_jit(agent: ConfigAgent, x: Array):
  return agent.predict_arrays(x)


@nnx.jit
def forward(agent: ConfigAgent, x: Array) -> AgentOutput:
  """`agent(x)` compiled once per agent config and input shape."""
  return agent(x)


def check_embeddings(x, in_dim: int, name: str = "query_embeddings") -> Array:
  if isinstance(x, (str, bytes)) or x is None:
    raise TypeError(f"`{name}` must be an array of shape [D] or [B, D], got {type(x).__name__}.")
  arr = np.asarray(x)
  if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
    raise TypeError(f"`{name}` must hold real numbers, got dtype {arr.dtype}.")
  if arr.ndim not in (1, 2) or arr.shape[-1] != in_dim:
    raise ValueError(f"`{name}` must have shape [{in_dim}] or [B, {in_dim}] (the agent's in_dim), "
                     f"got {arr.shape}; encode queries with the encoder the agent was trained on.")
  if not np.isfinite(arr).all():
    raise ValueError(f"`{name}` contains NaN or infinite values.")
  return jnp.asarray(arr, jnp.float32)


def new_agent(config: AgentConfig, *, seed: int = 0) -> ConfigAgent:
  """A freshly initialised agent; initialisation is one compiled call, not one per layer."""
  if not isinstance(config, AgentConfig):
    raise TypeError(f"`config` must be an AgentConfig, got {type(config).__name__}.")
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: ConfigAgent(config, rngs=nnx.Rngs(0))))
  state = _init_state(config, jax.random.key(int(seed)))
  return nnx.merge(graphdef, state)


@functools.partial(jax.jit, static_argnums=0)
def _init_state(config: AgentConfig, key: Array):
  return nnx.state(ConfigAgent(config, rngs=nnx.Rngs(key)))

