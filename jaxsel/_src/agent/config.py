"""The configuration agent's static config and its outputs' meaning: which scorers the
classification head chooses among, the valid range of each search setting, the settings'
`[0, 1]` encoding for the regression head, and the decoded choice (`SearchChoice`).

Shape legend: P = 3 search settings (iterations, cost penalty lambda, exploration c).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import checks

Array = jax.Array

SETTINGS = ("iterations", "cost_penalty", "exploration")


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
    checks.integer(self.in_dim, "in_dim", what=" (the query-embedding width)")
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

