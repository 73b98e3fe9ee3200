"""The configuration agent: a Siamese MLP that picks a scorer and search settings per query.

Shape legend: B batch, D query-embedding dimension, F feature dimension (last tower
width, 128 by default), S scorers, P = 3 search settings (iterations, cost penalty
lambda, exploration c).

CORAG's observation is that no single scorer ("reranker") or search setting is best for
every query. The agent reads the query embedding alone and predicts

* a scorer, by a classification head over `AgentConfig.scorers`, and
* the search settings, by a regression head whose sigmoid outputs lie in `[0, 1]` and
  are mapped affinely onto the configured ranges (iterations rounded to an integer), so
  every prediction is a valid setting by construction.

The encoder tower `D -> 512 -> 256 -> 128` is shared ("Siamese"): the contrastive loss
pulls together the features of queries with the same best scorer and pushes apart the
others by a margin. The model is a `flax.nnx` module; the losses are pure functions of
its outputs, so the training step (`jaxsel.agent_training`) jit-compiles them.

A trained agent is saved as a directory holding `config.json` and `params.safetensors`
(`save_agent` / `load_agent`); `config.json` records the SHA-256 of `params.safetensors`, so a
modified or damaged weights file is an error that names it, and loading is strict and names every
missing, unexpected or mis-shaped weight.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import warnings
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from safetensors.numpy import load as st_load, save as st_save

from jaxsel._src.io import atomic_write

Array = jax.Array

SETTINGS = ("iterations", "cost_penalty", "exploration")
AGENT_FORMAT = "jaxsel-config-agent/2"  # /2: config.json holds `params_sha256`
_UNCHECKED_FORMAT = "jaxsel-config-agent/1"  # loaded with a warning: no checksum to verify
CONFIG_FILE = "config.json"
PARAMS_FILE = "params.safetensors"


def _check_range(name: str, r, *, integer: bool = False) -> tuple:
  if not (isinstance(r, (tuple, list)) and len(r) == 2):
    raise TypeError(f"`{name}` must be a (low, high) pair, got {r!r}.")
  lo, hi = r
  if integer and not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in r):
    raise TypeError(f"`{name}` must hold integers, got {r!r}.")
  if not all(isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v) for v in r):
    raise TypeError(f"`{name}` must hold finite numbers, got {r!r}.")
  if lo < 0 or hi < lo:
    raise ValueError(f"`{name}` must satisfy 0 <= low <= high, got {r!r}.")
  if integer and lo < 1:
    raise ValueError(f"`{name}` must start at 1 or more (a search needs an iteration), got {r!r}.")
  return (int(lo), int(hi)) if integer else (float(lo), float(hi))


@dataclasses.dataclass(frozen=True)
class AgentConfig:
  """Static shape and range settings of a `ConfigAgent`.

  Attributes:
    in_dim: D, the query-embedding width (384 for all-MiniLM-L6-v2, 1024 for BGE-M3).
    scorers: names of the scorers the classification head chooses among, in head order.
    hidden: tower widths; the last one is the feature width F used by the contrastive loss.
    iterations_range, cost_penalty_range, exploration_range: the valid `[low, high]` of
      each search setting; the regression head predicts inside them.
    iterations_choices: optional iteration counts (e.g. the labelling grid) that predictions
      snap to (the nearest one). Each count is a separately compiled search, so a few
      choices keep a batch of queries to a few compilations. None: any integer in range.
  """
  in_dim: int
  scorers: tuple
  hidden: tuple = (512, 256, 128)
  iterations_range: tuple = (5, 25)
  cost_penalty_range: tuple = (0.0, 0.5)
  exploration_range: tuple = (0.0, 4.0)
  iterations_choices: Optional[tuple] = None

  def __post_init__(self):
    if not isinstance(self.in_dim, (int, np.integer)) or isinstance(self.in_dim, bool) or self.in_dim < 1:
      raise ValueError(f"`in_dim` must be a positive int (the query-embedding width), got {self.in_dim!r}.")
    scorers = self.scorers
    if isinstance(scorers, str) or not isinstance(scorers, Sequence):
      raise TypeError(f"`scorers` must be a sequence of scorer names, got {type(scorers).__name__}.")
    scorers = tuple(scorers)
    if not scorers or not all(isinstance(s, str) and s for s in scorers):
      raise ValueError(f"`scorers` must hold at least one non-empty name, got {scorers!r}.")
    if len(set(scorers)) != len(scorers):
      raise ValueError(f"`scorers` has duplicate names: {scorers!r}.")
    hidden = tuple(self.hidden)
    if not hidden or not all(isinstance(h, (int, np.integer)) and h > 0 for h in hidden):
      raise ValueError(f"`hidden` must be positive layer widths, got {self.hidden!r}.")
    object.__setattr__(self, "in_dim", int(self.in_dim))
    object.__setattr__(self, "scorers", scorers)
    object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
    object.__setattr__(self, "iterations_range",
                       _check_range("iterations_range", self.iterations_range, integer=True))
    object.__setattr__(self, "cost_penalty_range",
                       _check_range("cost_penalty_range", self.cost_penalty_range))
    object.__setattr__(self, "exploration_range",
                       _check_range("exploration_range", self.exploration_range))
    if self.iterations_choices is not None:
      ch = self.iterations_choices
      if isinstance(ch, (str, bytes)) or not isinstance(ch, Sequence) or not ch or not all(
          isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in ch):
        raise TypeError(f"`iterations_choices` must be a non-empty sequence of ints or None, got {ch!r}.")
      lo, hi = self.iterations_range
      if not all(lo <= c <= hi for c in ch):
        raise ValueError(f"`iterations_choices` {tuple(ch)} must lie in `iterations_range` {(lo, hi)}.")
      object.__setattr__(self, "iterations_choices", tuple(sorted({int(c) for c in ch})))

  @property
  def feature_dim(self) -> int:
    return self.hidden[-1]

  @property
  def ranges(self) -> np.ndarray:
    """`[P, 2]` low/high of each setting, in `SETTINGS` order."""
    return np.array([self.iterations_range, self.cost_penalty_range, self.exploration_range],
                    np.float32)

  def to_dict(self) -> dict:
    return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
            for f in dataclasses.fields(self)}

  @classmethod
  def from_dict(cls, d: dict) -> "AgentConfig":
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
      raise ValueError(f"unknown AgentConfig field(s) {sorted(unknown)}; expected {sorted(names)}.")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


class SearchChoice(NamedTuple):
  """One query's predicted scorer and search settings (all valid by construction)."""
  scorer: str
  iterations: int
  cost_penalty: float
  exploration: float

  def search_kwargs(self) -> dict:
    """Keyword arguments for the CORAG search: iterations, cost penalty and exploration."""
    return {"iterations": self.iterations, "cost_penalty": self.cost_penalty,
            "exploration": self.exploration}


class AgentOutput(NamedTuple):
  features: Array  # [B, F] tower output used by the contrastive loss
  scorer_logits: Array  # [B, S]
  settings: Array  # [B, P] normalised settings in [0, 1]


def normalize_settings(config: AgentConfig, settings) -> np.ndarray:
  """Maps raw settings `[..., P]` (iterations, lambda, c) onto `[0, 1]` per the config's
  ranges; values outside a range clip to its ends. A zero-width range maps to 0."""
  s = np.asarray(settings, np.float32)
  if s.shape[-1:] != (len(SETTINGS),):
    raise ValueError(f"`settings` must end in {len(SETTINGS)} values {SETTINGS}, got shape {s.shape}.")
  if not np.isfinite(s).all():
    raise ValueError("`settings` contains NaN or infinite values.")
  lo, hi = config.ranges[:, 0], config.ranges[:, 1]
  width = np.where(hi > lo, hi - lo, 1.0)
  return np.clip((s - lo) / width, 0.0, 1.0).astype(np.float32)


def denormalize_settings(config: AgentConfig, normalized: Array) -> tuple:
  """Maps normalised settings `[..., P]` back to valid values.

  Returns `(iterations int32 [...], cost_penalty [...], exploration [...])`; iterations are
  rounded (or snapped to the nearest of `config.iterations_choices`) and every value is
  clipped into its range, so the result is always valid."""
  r = jnp.asarray(config.ranges)
  x = jnp.clip(normalized, 0.0, 1.0)
  raw = r[:, 0] + x * (r[:, 1] - r[:, 0])
  raw = jnp.clip(raw, r[:, 0], r[:, 1])
  iterations = jnp.clip(jnp.round(raw[..., 0]), r[0, 0], r[0, 1]).astype(jnp.int32)
  if config.iterations_choices is not None:
    ch = jnp.asarray(config.iterations_choices, jnp.int32)
    iterations = ch[jnp.argmin(jnp.abs(raw[..., 0:1] - ch), axis=-1)]
  return iterations, raw[..., 1], raw[..., 2]


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


# ----------------------------------------------------------------------------- losses


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


# ----------------------------------------------------------------------------- saving


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


def agent_params(agent: ConfigAgent) -> dict:
  """The agent's parameters as a plain nested dict of arrays."""
  return nnx.to_pure_dict(nnx.state(agent, nnx.Param))


def _flatten(tree: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in tree.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = np.asarray(v)
  return out


def set_agent_params(agent: ConfigAgent, params: dict, *, source: str = "params") -> None:
  """Loads a plain nested dict into `agent`, strictly: every weight must be present with
  the model's shape, and no extra weight may appear."""
  want = _flatten(agent_params(agent))
  got = _flatten(params)
  missing = sorted(set(want) - set(got))
  extra = sorted(set(got) - set(want))
  if missing or extra:
    raise ValueError(f"{source} does not match the agent's config: missing weights {missing}, "
                     f"unexpected weights {extra}.")
  for k in want:
    if got[k].shape != want[k].shape:
      raise ValueError(f"{source}: weight `{k}` has shape {got[k].shape}, the agent's config "
                       f"expects {want[k].shape} (was it trained with another in_dim, hidden or scorers?).")
    if not np.isfinite(got[k]).all():
      raise ValueError(f"{source}: weight `{k}` contains NaN or infinite values.")
  state = nnx.state(agent, nnx.Param)
  nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, params))
  nnx.update(agent, state)


def save_agent(agent: ConfigAgent, path: str, *, metadata: Optional[dict] = None) -> str:
  """Writes `path/params.safetensors`, then `path/config.json` with the weights' SHA-256
  (each atomically; the config is written last, so it never vouches for weights not on disk)."""
  if not isinstance(agent, ConfigAgent):
    raise TypeError(f"`agent` must be a ConfigAgent, got {type(agent).__name__}.")
  os.makedirs(path, exist_ok=True)
  params = st_save(_flatten(agent_params(agent)), metadata={"format": AGENT_FORMAT})
  cfg = {"format": AGENT_FORMAT, "config": agent.config.to_dict(), "metadata": metadata or {},
         "params_sha256": hashlib.sha256(params).hexdigest()}
  atomic_write(os.path.join(path, PARAMS_FILE), params)
  atomic_write(os.path.join(path, CONFIG_FILE), json.dumps(cfg, indent=2).encode())
  return path


def _unflatten(flat: dict) -> dict:
  out: dict = {}
  for k, v in flat.items():
    node = out
    *head, last = k.split(".")
    for h in head:
      node = node.setdefault(h, {})
    node[last] = v
  return out


def load_agent(path: str) -> ConfigAgent:
  """Loads an agent saved by `save_agent` (a local directory).

  The weights must match the SHA-256 that `config.json` records (a `ValueError` names the
  file otherwise). An agent saved before checksums were recorded (format
  `jaxsel-config-agent/1`) still loads, with a warning that its weights are unverified;
  `save_agent` it again to add the checksum."""
  cfg_path, params_path = os.path.join(path, CONFIG_FILE), os.path.join(path, PARAMS_FILE)
  for p in (cfg_path, params_path):
    if not os.path.isfile(p):
      raise FileNotFoundError(f"{p} not found: `path` must be a directory written by "
                              "jaxsel.save_agent (config.json + params.safetensors).")
  try:
    with open(cfg_path) as f:
      cfg = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{cfg_path} is corrupt (not valid JSON): {e}") from None
  if not isinstance(cfg, dict) or cfg.get("format") not in (AGENT_FORMAT, _UNCHECKED_FORMAT):
    raise ValueError(f"{cfg_path} is not a jaxsel agent config (format "
                     f"{cfg.get('format') if isinstance(cfg, dict) else None!r}, expected {AGENT_FORMAT!r}).")
  config = AgentConfig.from_dict(cfg["config"])
  with open(params_path, "rb") as f:
    raw = f.read()
  _check_params_sha256(raw, cfg, params_path)
  try:
    flat = st_load(raw)
  except Exception as e:  # safetensors raises its own error types for truncated files
    raise ValueError(f"{params_path} is corrupt or truncated: {e}") from None
  agent = new_agent(config)
  set_agent_params(agent, _unflatten(flat), source=params_path)
  return agent


def _check_params_sha256(raw: bytes, cfg: dict, params_path: str) -> None:
  if cfg["format"] == _UNCHECKED_FORMAT:
    warnings.warn(f"{params_path} was saved without a checksum ({_UNCHECKED_FORMAT}), so damage to "
                  "it cannot be detected; save the agent again with jaxsel.save_agent to add one.",
                  stacklevel=3)
    return
  want = cfg.get("params_sha256")
  if not isinstance(want, str):
    raise ValueError(f"{params_path} cannot be verified: its {CONFIG_FILE} lacks `params_sha256` "
                     f"(required by {AGENT_FORMAT}); save the agent again with jaxsel.save_agent.")
  if hashlib.sha256(raw).hexdigest() != want:
    raise ValueError(f"{params_path} is corrupt or truncated: its SHA-256 does not match the one "
                     f"recorded in {CONFIG_FILE} (modified or damaged on disk); save or train the "
                     "agent again.")
