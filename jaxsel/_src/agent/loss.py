"""The configuration agent's losses: contrastive (margin 1.0 by default) on the tower's
features, cross-entropy on the scorer head, squared error on the settings head, weighted.
Pure functions of the model's outputs, so `train` jit-compiles them into its step.

Shape legend: B batch, D embedding dimension, F feature dimension, S scorers, P = 3 settings.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxsel._src.agent.model import AgentOutput

Array = jax.Array


class LossWeights(NamedTuple):
  """`L = alpha * L_con + beta * L_cla + gamma * L_reg` and the contrastive margin."""
  alpha: float = 1.0
  beta: float = 1.0
  gamma: float = 1.0
  margin: float = 1.0


class LossParts(NamedTuple):
  total: Array  # []
  contrastive: Array  # []
  classification: Array  # []
  regression: Array  # []


class AgentBatch(NamedTuple):
  """A fixed-size training batch; padded rows carry weight 0."""
  embeddings: Array  # [B, D]
  scorer: Array  # [B] int32 index of the best scorer
  settings: Array  # [B, P] normalised best settings in [0, 1]
  weight: Array  # [B] 1 for real rows, 0 for padding


def contrastive_loss(features: Array, labels: Array, weight: Array, *, margin: float = 1.0) -> Array:
  """Mean pair loss over all pairs `i < j` of real rows (Hadsell et al. 2006).

  A positive pair (same label) costs `d^2`, a negative pair `max(0, margin - d)^2`, with
  `d` the Euclidean distance of the features. Returns 0 when the batch has no pair.

  Args:
    features: `[B, F]`.
    labels: `[B]` int class of each row.
    weight: `[B]` 1 for real rows, 0 for padding.
  """
  diff = features[:, None, :] - features[None, :, :]
  d2 = jnp.sum(diff * diff, axis=-1)
  # sqrt has an infinite gradient at 0 (the diagonal and identical rows); guard it.
  d = jnp.sqrt(jnp.where(d2 > 0, d2, 1.0)) * (d2 > 0)
  same = labels[:, None] == labels[None, :]
  pair = jnp.where(same, d2, jnp.square(jnp.maximum(margin - d, 0.0)))
  b = features.shape[0]
  real = (weight[:, None] > 0) & (weight[None, :] > 0) & jnp.triu(jnp.ones((b, b), bool), k=1)
  w = real.astype(pair.dtype)
  return jnp.sum(pair * w) / jnp.maximum(jnp.sum(w), 1.0)


def _weighted_mean(x: Array, weight: Array) -> Array:
  return jnp.sum(x * weight) / jnp.maximum(jnp.sum(weight), 1e-12)


def agent_loss(out: AgentOutput, batch: AgentBatch, weights: LossWeights = LossWeights()) -> LossParts:
  """The combined loss of one batch; a pure function of the model's outputs."""
  l_con = contrastive_loss(out.features, batch.scorer, batch.weight, margin=weights.margin)
  ce = optax.softmax_cross_entropy_with_integer_labels(out.scorer_logits, batch.scorer)
  l_cla = _weighted_mean(ce, batch.weight)
  l_reg = _weighted_mean(jnp.mean(jnp.square(out.settings - batch.settings), axis=-1), batch.weight)
  total = weights.alpha * l_con + weights.beta * l_cla + weights.gamma * l_reg
  return LossParts(total, l_con, l_cla, l_reg)

