"""Training the configuration agent: data set, jit-compiled step, loop with orbax checkpoints.

Shape legend: N examples, B batch, D embedding dimension, P = 3 settings.

Every epoch's order is a pure function of `(seed, epoch)` and every batch has the same
shape (the last one is padded with weight-0 rows), so a run resumed from its checkpoint
after epoch e takes exactly the steps an uninterrupted run takes after epoch e: the
parameters come out identical. A checkpoint holds the parameters, the Adam state and,
as JSON, the agent and training configs, a fingerprint of the data and the history.

Orbax checks no checksums of the arrays it restores, so after orbax commits a checkpoint
`<step>/jaxsel_sha256.json` records the SHA-256 of each of its files, and a resume verifies
them before restoring: a modified or damaged file is a `ValueError` naming the checkpoint and
the file. A checkpoint without that record (written before it existed, or by a run killed
between orbax's commit and the record) is restored with a warning that it is unverified.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import warnings
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from jaxsel._src import checks
from jaxsel._src.agent.config import SETTINGS, AgentConfig, denormalize_settings, normalize_settings
from jaxsel._src.agent.loss import AgentBatch, LossWeights, agent_loss
from jaxsel._src.agent.model import ConfigAgent, check_embeddings, forward, new_agent
from jaxsel._src.agent.params import agent_params, set_agent_params
from jaxsel._src.io import atomic_write, file_sha256

CHECKPOINT_FORMAT = "jaxsel-agent-training/1"
CHECKSUMS_FILE = "jaxsel_sha256.json"  # in each checkpoint's folder, beside orbax's files
SELECTS = ("last", "best_val")


def best_epoch(history: Sequence[dict]) -> Optional[int]:
  """Epoch (1-based) of the highest validation scorer accuracy; ties go to the lower
  validation settings error, then to the earlier epoch. None without validation metrics."""
  scored = [h for h in history if "val_scorer_accuracy" in h]
  if not scored:
    return None
  return min(scored, key=lambda h: (-h["val_scorer_accuracy"], h["val_settings_mae_normalized"],
                                    h["epoch"]))["epoch"]


class AgentDataset(NamedTuple):
  """Labelled queries for the agent (host arrays)."""
  embeddings: np.ndarray  # [N, D] float32 query embeddings
  scorer: np.ndarray  # [N] int32 index into AgentConfig.scorers
  settings: np.ndarray  # [N, P] normalised best settings in [0, 1]

  def __len__(self) -> int:
    return int(self.embeddings.shape[0])

  def subset(self, idx) -> "AgentDataset":
    idx = np.asarray(idx, np.int64)
    return AgentDataset(self.embeddings[idx], self.scorer[idx], self.settings[idx])

  def fingerprint(self) -> str:
    h = hashlib.sha256()
    for a in self:
      h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def make_dataset(config: AgentConfig, embeddings, scorers: Sequence, settings) -> AgentDataset:
  """Builds an `AgentDataset` from raw labels.

  Args:
    config: the agent's config (scorer names and setting ranges).
    embeddings: `[N, D]` query embeddings.
    scorers: `N` best-scorer names (or indices into `config.scorers`).
    settings: `[N, P]` raw best settings `(iterations, cost_penalty, exploration)`.
  """
  x = np.asarray(check_embeddings(embeddings, config.in_dim, "embeddings"))
  if x.ndim != 2:
    raise ValueError(f"`embeddings` must be [N, {config.in_dim}], got {x.shape}.")
  n = x.shape[0]
  scorers = list(scorers)
  if len(scorers) != n:
    raise ValueError(f"`scorers` has {len(scorers)} labels for {n} embeddings.")
  idx = []
  for s in scorers:
    if isinstance(s, str):
      if s not in config.scorers:
        raise ValueError(f"scorer label {s!r} is not among the agent's scorers {config.scorers}.")
      idx.append(config.scorers.index(s))
    else:
      if not 0 <= int(s) < len(config.scorers):
        raise ValueError(f"scorer index {s} out of range for {len(config.scorers)} scorers.")
      idx.append(int(s))
  raw = np.asarray(settings, np.float32).reshape(n, -1) if n else np.zeros((0, len(SETTINGS)), np.float32)
  if raw.shape != (n, len(SETTINGS)):
    raise ValueError(f"`settings` must have shape [{n}, {len(SETTINGS)}] {SETTINGS}, got {np.shape(settings)}.")
  return AgentDataset(x.astype(np.float32), np.asarray(idx, np.int32), normalize_settings(config, raw))


def split_dataset(data: AgentDataset, *, validation_fraction: float = 0.2, seed: int = 0):
  """Seeded random train/validation split; returns `(train, validation)`."""
  if not 0 <= validation_fraction < 1:
    raise ValueError(f"`validation_fraction` must be in [0, 1), got {validation_fraction}.")
  n = len(data)
  perm = np.random.default_rng(seed).permutation(n)
  n_val = int(round(n * validation_fraction))
  return data.subset(np.sort(perm[n_val:])), data.subset(np.sort(perm[:n_val]))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Training settings. Only `epochs` may change when resuming (to train for longer)."""
  batch_size: int = 32
  epochs: int = 60
  learning_rate: float = 1e-3
  seed: int = 0
  alpha: float = 1.0
  beta: float = 1.0
  gamma: float = 1.0
  margin: float = 1.0
  select: str = "last"  # "last" epoch's parameters, or "best_val": the epoch of best validation accuracy

  def __post_init__(self):
    if self.select not in SELECTS:
      raise ValueError(f"`select` must be one of {SELECTS}, got {self.select!r}.")
    for name in ("batch_size", "epochs"):
      v = getattr(self, name)
      checks.integer(v, name, low=1 if name == "batch_size" else 0)
    if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
      raise ValueError(f"`learning_rate` must be positive, got {self.learning_rate}.")
    for name in ("alpha", "beta", "gamma", "margin"):
      v = getattr(self, name)
      if not (v >= 0 and math.isfinite(v)):
        raise ValueError(f"`{name}` must be a non-negative number, got {v}.")

  @property
  def loss_weights(self) -> LossWeights:
    return LossWeights(self.alpha, self.beta, self.gamma, self.margin)

  def resume_key(self) -> dict:
    d = dataclasses.asdict(self)
    d.pop("epochs")
    return d


class TrainResult(NamedTuple):
  agent: ConfigAgent
  history: list  # one dict per epoch: loss parts (and validation metrics)
  metrics: dict  # final metrics on the validation set (or the training set without one)


_STEPS: dict = {}


def cached_train_step(graphdef, learning_rate: float, weights: LossWeights):
  """`(tx, step)` for Adam at `learning_rate`, shared by runs of the same model and settings
  (a resumed run reuses the compiled step)."""
  key = (graphdef, float(learning_rate), tuple(weights))
  if key not in _STEPS:
    tx = optax.adam(learning_rate)
    _STEPS[key] = (tx, make_train_step(graphdef, tx, weights))
  return _STEPS[key]


def make_train_step(graphdef, tx: optax.GradientTransformation, weights: LossWeights) -> Callable:
  """A jit-compiled `(params, opt_state, batch) -> (params, opt_state, LossParts)`."""

  @jax.jit
  def step(params, opt_state, batch: AgentBatch):
    def loss_fn(p):
      parts = agent_loss(nnx.merge(graphdef, p)(batch.embeddings), batch, weights)
      return parts.total, parts

    (_, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, parts

  return step


def epoch_batches(n: int, batch_size: int, *, seed: int, epoch: int):
  """`(indices [M, B], weight [M, B])`: the epoch's shuffled order, padded to full batches."""
  perm = np.random.default_rng([seed, epoch]).permutation(n)
  m = max(1, math.ceil(n / batch_size))
  idx = np.zeros(m * batch_size, np.int64)
  w = np.zeros(m * batch_size, np.float32)
  idx[:n], w[:n] = perm, 1.0
  return idx.reshape(m, batch_size), w.reshape(m, batch_size)


def agent_metrics(agent: ConfigAgent, data: AgentDataset) -> dict:
  """Scorer accuracy and mean absolute error of each decoded setting (in its own units)."""
  if len(data) == 0:
    return {"examples": 0}
  out = forward(agent, jnp.asarray(data.embeddings))
  pred = np.asarray(jnp.argmax(out.scorer_logits, -1))
  got = [np.asarray(a, np.float64) for a in denormalize_settings(agent.config, out.settings)]
  want = [np.asarray(a, np.float64) for a in denormalize_settings(agent.config, jnp.asarray(data.settings))]
  mae = {name: float(np.mean(np.abs(g - w))) for name, g, w in zip(SETTINGS, got, want)}
  return {"examples": len(data), "scorer_accuracy": float(np.mean(pred == data.scorer)),
          "settings_mae": mae,
          "settings_mae_normalized": float(np.mean(np.abs(np.asarray(out.settings) - data.settings)))}


# ----------------------------------------------------------------------------- checkpoints


def _orbax():
  """Orbax's checkpointing (the `train` extra), imported by the first checkpoint."""
  return checks.optional_module("orbax.checkpoint", feature="agent training checkpoints",
                                extra="train")


def _manager(directory: str):
  ocp = _orbax()
  return ocp.CheckpointManager(os.path.abspath(directory),
                               options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))


def _save(mngr, epoch: int, params, opt_state, best_params, meta: dict) -> None:
  ocp = _orbax()
  mngr.save(epoch, args=ocp.args.Composite(
      state=ocp.args.StandardSave({"params": params, "opt_state": opt_state, "best_params": best_params}),
      meta=ocp.args.JsonSave(meta)))
  mngr.wait_until_finished()
  _record_checksums(_step_dir(mngr, epoch))


def _step_dir(mngr, step: int) -> str:
  return os.path.join(os.fspath(mngr.directory), str(step))


def _file_checksums(folder: str) -> dict:
  """`{relative path: SHA-256}` of every file under `folder` but the checksum record."""
  out = {}
  for root, _, files in os.walk(folder):
    for name in files:
      rel = os.path.relpath(os.path.join(root, name), folder)
      if rel != CHECKSUMS_FILE:
        out[rel.replace(os.sep, "/")] = file_sha256(os.path.join(root, name))
  return out


def _record_checksums(where: str) -> None:
  record = {"format": CHECKPOINT_FORMAT, "sha256": _file_checksums(where)}
  atomic_write(os.path.join(where, CHECKSUMS_FILE), json.dumps(record, indent=1).encode("utf-8"))


def _verify_checksums(where: str) -> None:
  """Raises a ValueError naming checkpoint `where` and its files that changed since saving."""
  path = os.path.join(where, CHECKSUMS_FILE)
  if not os.path.isfile(path):
    warnings.warn(f"checkpoint {where} has no {CHECKSUMS_FILE} (saved by an older jaxsel, or the "
                  "run was killed while recording it), so damage to its files cannot be detected.",
                  stacklevel=3)
    return
  try:
    with open(path, "rb") as f:
      want = json.loads(f.read())["sha256"]
    if not isinstance(want, dict):
      raise TypeError(f"`sha256` is a {type(want).__name__}")
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"checkpoint {where} is corrupt or unreadable: its {CHECKSUMS_FILE} is "
                     f"damaged ({e}).") from None
  got = _file_checksums(where)
  bad = sorted(k for k in want if got.get(k) != want[k])
  if bad:
    raise ValueError(f"checkpoint {where} is corrupt or unreadable: {', '.join(bad)} "
                     f"{'is missing or differs' if len(bad) == 1 else 'are missing or differ'} "
                     f"from the SHA-256 recorded in {CHECKSUMS_FILE} when it was saved. Delete "
                     f"{where} to resume from the checkpoint before it.")


def _restore(mngr, directory: str, params, opt_state, best_params, expected: dict):
  """Restores the latest checkpoint after checking that it belongs to this run."""
  step = mngr.latest_step()
  where = os.path.join(os.path.abspath(directory), str(step))
  _verify_checksums(where)
  ocp = _orbax()
  try:
    meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
  except Exception as e:
    raise ValueError(f"checkpoint {where} is corrupt or unreadable (its metadata): {e}") from None
  if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
    raise ValueError(f"checkpoint {where} is not a jaxsel agent-training checkpoint "
                     f"(format {meta.get('format') if isinstance(meta, dict) else None!r}).")
  diffs = [f"{k}: checkpoint {meta.get(k)!r} != now {v!r}" for k, v in expected.items()
           if meta.get(k) != v]
  if diffs:
    raise ValueError(f"checkpoint {where} does not match this run (resume needs the same agent "
                     f"config, training settings and data; only `epochs` may change): " + "; ".join(diffs))
  target = {"params": params, "opt_state": opt_state, "best_params": best_params}
  try:
    state = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))).state
  except Exception as e:
    raise ValueError(f"checkpoint {where} is corrupt or unreadable (its arrays): {e}") from None
  ok = jax.tree.map(lambda a, b: np.shape(a) == np.shape(b), state, target)
  if not all(jax.tree.leaves(ok)):
    raise ValueError(f"checkpoint {where} holds arrays whose shapes differ from the agent's.")
  return (int(step), state["params"], state["opt_state"], state["best_params"],
          list(meta.get("history", [])))


def train_agent(agent_config: AgentConfig, train: AgentDataset, *,
                config: TrainConfig = TrainConfig(), validation: Optional[AgentDataset] = None,
                checkpoint_dir: Optional[str] = None, resume: bool = False,
                progress: bool = False) -> TrainResult:
  """Trains a `ConfigAgent` with Adam on the combined loss.

  Args:
    agent_config: the agent's shape and ranges.
    train: labelled queries.
    config: batch size, epochs, learning rate, seed and loss weights.
    validation: optional held-out queries; their metrics go into the history each epoch.
    checkpoint_dir: where to save an orbax checkpoint after every epoch.
    resume: continue from the last checkpoint in `checkpoint_dir` (same result as an
      uninterrupted run). Without it, a directory that already holds checkpoints is an error.
    progress: show a tqdm bar with the loss parts.

  With `config.select == "best_val"` (and a validation set) the returned agent has the
  parameters of the epoch with the best validation scorer accuracy (`best_epoch`).
  """
  if not isinstance(agent_config, AgentConfig):
    raise TypeError(f"`agent_config` must be an AgentConfig, got {type(agent_config).__name__}.")
  if not isinstance(config, TrainConfig):
    raise TypeError(f"`config` must be a TrainConfig, got {type(config).__name__}.")
  for name, d in (("train", train), ("validation", validation)):
    if d is None:
      continue
    if not isinstance(d, AgentDataset):
      raise TypeError(f"`{name}` must be an AgentDataset (see make_dataset), got {type(d).__name__}.")
    if d.embeddings.ndim != 2 or d.embeddings.shape[1] != agent_config.in_dim:
      raise ValueError(f"`{name}.embeddings` must be [N, {agent_config.in_dim}], got {d.embeddings.shape}.")
  if len(train) == 0:
    raise ValueError("`train` is empty; label some queries first.")
  if resume and checkpoint_dir is None:
    raise ValueError("`resume=True` needs a `checkpoint_dir`.")

  agent = new_agent(agent_config, seed=config.seed)
  graphdef, _ = nnx.split(agent)
  params = agent_params(agent)
  tx, step = cached_train_step(graphdef, config.learning_rate, config.loss_weights)
  opt_state = tx.init(params)
  expected = {"format": CHECKPOINT_FORMAT, "agent_config": agent_config.to_dict(),
              "train_config": config.resume_key(), "data": train.fingerprint()}

  start, history, mngr = 0, [], None
  best_params = params
  if checkpoint_dir is not None:
    mngr = _manager(checkpoint_dir)
    if mngr.latest_step() is not None:
      if not resume:
        mngr.close()
        raise ValueError(f"`checkpoint_dir` {checkpoint_dir} already holds checkpoints (last epoch "
                         f"{mngr.latest_step()}); pass resume=True (--resume) or use an empty directory.")
      start, params, opt_state, best_params, history = _restore(
          mngr, checkpoint_dir, params, opt_state, best_params, expected)

  epochs = range(start, config.epochs)
  bar = None
  if progress:
    bar = tqdm(total=config.epochs, initial=min(start, config.epochs), desc="agent", unit="epoch")
  try:
    for epoch in epochs:
      idx, w = epoch_batches(len(train), config.batch_size, seed=config.seed, epoch=epoch)
      sums = np.zeros(4)
      for bi, bw in zip(idx, w):
        batch = AgentBatch(jnp.asarray(train.embeddings[bi]), jnp.asarray(train.scorer[bi]),
                           jnp.asarray(train.settings[bi]), jnp.asarray(bw))
        params, opt_state, parts = step(params, opt_state, batch)
        sums += np.asarray(jnp.stack(parts)) * bw.sum()
      parts = dict(zip(("loss", "contrastive", "classification", "regression"), (sums / len(train)).tolist()))
      entry = {"epoch": epoch + 1, **parts}
      if validation is not None and len(validation):
        set_agent_params(agent, params)
        m = agent_metrics(agent, validation)
        entry.update(val_scorer_accuracy=m["scorer_accuracy"],
                     val_settings_mae_normalized=m["settings_mae_normalized"])
      history.append(entry)
      if best_epoch(history) == epoch + 1:
        best_params = params
      if mngr is not None:
        _save(mngr, epoch + 1, params, opt_state, best_params, {**expected, "history": history})
      if bar is not None:
        bar.update(1)
        bar.set_postfix({k[:5]: f"{v:.3f}" for k, v in entry.items() if k != "epoch"})
  finally:
    if bar is not None:
      bar.close()
    if mngr is not None:
      mngr.close()

  chosen = best_epoch(history) if config.select == "best_val" else None
  set_agent_params(agent, best_params if chosen is not None else params)
  metrics = agent_metrics(agent, validation if validation is not None and len(validation) else train)
  metrics["selected_epoch"] = chosen if chosen is not None else len(history)
  metrics["evaluated_on"] = "validation" if validation is not None and len(validation) else "train"
  return TrainResult(agent, history, metrics)
