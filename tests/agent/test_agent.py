"""Configuration agent: losses against NumPy, training, exact resume, valid predictions,
strict saving/loading and clear errors for corrupt or mismatched checkpoints."""

import glob
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxsel._src.agent.config import (SETTINGS, AgentConfig, SearchChoice, denormalize_settings,
                                      normalize_settings)
from jaxsel._src.agent.loss import AgentBatch, LossWeights, agent_loss, contrastive_loss
from jaxsel._src.agent.model import AgentOutput, forward, new_agent
from jaxsel._src.agent.params import agent_params, load_agent, save_agent
from jaxsel._src.agent.train import (
    TrainConfig, best_epoch, agent_metrics, epoch_batches, make_dataset, split_dataset, train_agent)

D = 12
CFG = AgentConfig(in_dim=D, scorers=("relevance", "links"), hidden=(32, 16, 8))


def two_domains(n, seed):
  """Two clusters of query embeddings, each with its own best scorer and settings."""
  rng = np.random.default_rng(seed)
  centers = np.random.default_rng(123).normal(size=(2, D)) * 1.5
  lab = rng.integers(0, 2, n)
  x = centers[lab] + rng.normal(size=(n, D))
  s = np.stack([np.where(lab == 0, 6, 22), np.where(lab == 0, 0.1, 0.4),
                np.where(lab == 0, 1.0, 3.5)], 1)
  return make_dataset(CFG, x, lab, s)


@pytest.fixture(scope="module")
def trained():
  data = two_domains(96, 0)
  train, val = split_dataset(data, validation_fraction=0.25, seed=0)
  res = train_agent(CFG, train, config=TrainConfig(batch_size=16, epochs=25, learning_rate=3e-3,
                                                   seed=0), validation=val)
  return res, train, val


def test_loss_decreases_and_agent_separates_two_domains(trained):
  res, _, _ = trained
  losses = [h["loss"] for h in res.history]
  assert losses[-1] < 0.5 * losses[0]
  assert res.history[-1]["contrastive"] < res.history[0]["contrastive"]
  test = two_domains(64, 7)  # fresh draws from the same two domains
  m = agent_metrics(res.agent, test)
  assert m["scorer_accuracy"] >= 0.95
  assert m["settings_mae"]["iterations"] < 4.0  # the two domains differ by 16
  assert res.metrics["evaluated_on"] == "validation"
  # Features of the same domain are closer than features of different domains.
  f = np.asarray(forward(res.agent, jnp.asarray(test.embeddings)).features)
  d = np.linalg.norm(f[:, None] - f[None], axis=-1)
  same = test.scorer[:, None] == test.scorer[None]
  off = ~np.eye(len(f), dtype=bool)
  assert d[same & off].mean() < d[~same].mean()


def np_contrastive(f, y, w, margin):
  total, count = 0.0, 0
  for i in range(len(f)):
    for j in range(i + 1, len(f)):
      if w[i] > 0 and w[j] > 0:
        d = np.linalg.norm(f[i] - f[j])
        total += d ** 2 if y[i] == y[j] else max(margin - d, 0.0) ** 2
        count += 1
  return total / max(count, 1)


_con = jax.jit(contrastive_loss)
_con_grad = jax.jit(jax.grad(contrastive_loss))


@pytest.mark.parametrize("b", [0, 1, 7])
def test_contrastive_loss_matches_numpy(b):
  rng = np.random.default_rng(b)
  f = rng.normal(size=(b, 5)).astype(np.float32) * 0.4
  if b >= 7:
    f[1] = f[0]  # identical rows: distance 0 must not give NaN gradients
  y = rng.integers(0, 2, b)
  w = (rng.random(b) > 0.2).astype(np.float32)
  got = _con(jnp.asarray(f), jnp.asarray(y), jnp.asarray(w))
  np.testing.assert_allclose(got, np_contrastive(f, y, w, 1.0), rtol=1e-5, atol=1e-6)
  g = _con_grad(jnp.asarray(f), jnp.asarray(y), jnp.asarray(w))
  assert np.isfinite(np.asarray(g)).all()


def test_combined_loss_parts_match_numpy():
  rng = np.random.default_rng(0)
  b, s = 6, 3
  feats = rng.normal(size=(b, 4)).astype(np.float32)
  logits = rng.normal(size=(b, s)).astype(np.float32)
  pred = rng.random((b, 3)).astype(np.float32)
  y = rng.integers(0, s, b)
  target = rng.random((b, 3)).astype(np.float32)
  w = np.array([1, 1, 1, 1, 0, 0], np.float32)
  out = AgentOutput(jnp.asarray(feats), jnp.asarray(logits), jnp.asarray(pred))
  batch = AgentBatch(jnp.zeros((b, 2)), jnp.asarray(y), jnp.asarray(target), jnp.asarray(w))
  parts = jax.jit(agent_loss, static_argnums=2)(out, batch, LossWeights(alpha=0.5, beta=2.0, gamma=3.0))
  logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  ce = -(logp[np.arange(b), y] * w).sum() / w.sum()
  mse = (((pred - target) ** 2).mean(1) * w).sum() / w.sum()
  con = np_contrastive(feats, y, w, 1.0)
  np.testing.assert_allclose(parts.classification, ce, rtol=1e-5)
  np.testing.assert_allclose(parts.regression, mse, rtol=1e-5)
  np.testing.assert_allclose(parts.contrastive, con, rtol=1e-5)
  np.testing.assert_allclose(parts.total, 0.5 * con + 2 * ce + 3 * mse, rtol=1e-5)


def test_resume_equals_uninterrupted(tmp_path):
  data, val = two_domains(40, 1), two_domains(12, 5)
  full = TrainConfig(batch_size=16, epochs=4, seed=3, select="best_val")
  ref = train_agent(CFG, data, config=full, validation=val)
  ck = str(tmp_path / "ck")
  part = train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=2, seed=3, select="best_val"),
                     checkpoint_dir=ck, validation=val)
  assert len(part.history) == 2
  res = train_agent(CFG, data, config=full, checkpoint_dir=ck, resume=True, validation=val)
  assert res.metrics["selected_epoch"] == ref.metrics["selected_epoch"] == best_epoch(ref.history)
  for a, b in zip(jax.tree.leaves(agent_params(ref.agent)), jax.tree.leaves(agent_params(res.agent))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert [h["loss"] for h in res.history] == [h["loss"] for h in ref.history]
  # An interrupted run leaves its checkpoints; a new run there without resume refuses.
  with pytest.raises(ValueError, match="already holds checkpoints"):
    train_agent(CFG, data, config=full, checkpoint_dir=ck)
  # Mismatched agent config, training settings or data: named in the error.
  other = AgentConfig(in_dim=D, scorers=("relevance", "links", "x"), hidden=(32, 16, 8))
  with pytest.raises(ValueError, match="does not match this run.*agent_config"):
    train_agent(other, make_dataset(other, data.embeddings, data.scorer, np.zeros((40, 3))),
                config=full, checkpoint_dir=ck, resume=True)
  with pytest.raises(ValueError, match="train_config"):
    train_agent(CFG, data, config=TrainConfig(batch_size=8, epochs=4, seed=3, select="best_val"), checkpoint_dir=ck,
                resume=True)
  with pytest.raises(ValueError, match="data"):
    train_agent(CFG, data.subset(range(30)), config=full, checkpoint_dir=ck, resume=True)
  # Corrupt array files: a clear error, not an orbax traceback.
  for p in glob.glob(os.path.join(ck, "4", "state", "**", "*"), recursive=True):
    if os.path.isfile(p) and os.path.getsize(p) > 0 and not p.endswith(("json", "METADATA")):
      with open(p, "r+b") as f:
        f.truncate(3)
  with pytest.raises(ValueError, match="corrupt or unreadable"):
    train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=6, seed=3, select="best_val"), checkpoint_dir=ck,
                resume=True)


def test_corrupt_checkpoint_metadata(tmp_path):
  data = two_domains(20, 2)
  ck = str(tmp_path / "ck")
  train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=1), checkpoint_dir=ck)
  metas = [p for p in glob.glob(os.path.join(ck, "1", "meta", "*")) if os.path.isfile(p)]
  assert metas
  for p in metas:
    with open(p, "w") as f:
      f.write("{not json")
  with pytest.raises(ValueError, match="corrupt or unreadable"):
    train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=2), checkpoint_dir=ck, resume=True)


def _flip_middle_byte(path):
  raw = bytearray(open(path, "rb").read())
  raw[len(raw) // 2] ^= 0x01
  with open(path, "wb") as f:
    f.write(bytes(raw))


def test_flipped_byte_in_a_checkpoint_is_named_on_resume(tmp_path):
  """Orbax restores a flipped byte in the arrays' data silently; the recorded checksums don't."""
  data = two_domains(20, 2)
  ck = str(tmp_path / "ck")
  train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=1), checkpoint_dir=ck)
  where = os.path.join(os.path.abspath(ck), "1")
  files = glob.glob(os.path.join(where, "state", "ocdbt.process_*", "d", "*"))
  assert files, "orbax's OCDBT data files moved; pick the arrays' data files anew"
  biggest = max(files, key=os.path.getsize)  # array data, restored without any check by orbax
  _flip_middle_byte(biggest)
  rel = os.path.relpath(biggest, where).replace(os.sep, "/")
  with pytest.raises(ValueError, match=rf"checkpoint {re.escape(where)} is corrupt or unreadable: "
                                       rf"{re.escape(rel)} is missing or differs"):
    train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=2), checkpoint_dir=ck, resume=True)
  _flip_middle_byte(biggest)  # restored: resumes; without the record it resumes with a warning
  os.remove(os.path.join(where, "jaxsel_sha256.json"))
  with pytest.warns(UserWarning, match="cannot be detected"):
    res = train_agent(CFG, data, config=TrainConfig(batch_size=16, epochs=2), checkpoint_dir=ck,
                      resume=True)
  assert len(res.history) == 2


def test_flipped_byte_in_saved_params_is_named(trained, tmp_path):
  res, _, val = trained
  path = save_agent(res.agent, str(tmp_path / "a"))
  params = os.path.join(path, "params.safetensors")
  _flip_middle_byte(params)
  with pytest.raises(ValueError, match=re.escape(params) + " is corrupt.*SHA-256.*config.json"):
    load_agent(path)
  _flip_middle_byte(params)
  cfg_path = os.path.join(path, "config.json")
  cfg = json.load(open(cfg_path))
  del cfg["params_sha256"]
  json.dump(cfg, open(cfg_path, "w"))
  with pytest.raises(ValueError, match="lacks `params_sha256`"):
    load_agent(path)
  # The format before checksums still loads, with a warning.
  json.dump({**cfg, "format": "jaxsel-config-agent/1"}, open(cfg_path, "w"))
  with pytest.warns(UserWarning, match="without a checksum"):
    old = load_agent(path)
  assert old.predict(val.embeddings[:3]) == res.agent.predict(val.embeddings[:3])


def test_best_epoch():
  h = [{"epoch": 1, "val_scorer_accuracy": 0.5, "val_settings_mae_normalized": 0.3},
       {"epoch": 2, "val_scorer_accuracy": 0.7, "val_settings_mae_normalized": 0.3},
       {"epoch": 3, "val_scorer_accuracy": 0.7, "val_settings_mae_normalized": 0.2},
       {"epoch": 4, "val_scorer_accuracy": 0.7, "val_settings_mae_normalized": 0.2}]
  assert best_epoch(h) == 3 and best_epoch([{"epoch": 1, "loss": 1.0}]) is None
  with pytest.raises(ValueError, match="select"):
    TrainConfig(select="best")


def test_epoch_batches_cover_every_example_once():
  idx, w = epoch_batches(37, 16, seed=0, epoch=3)
  assert idx.shape == (3, 16) and w.sum() == 37
  assert sorted(idx[w > 0].tolist()) == list(range(37))
  idx2, _ = epoch_batches(37, 16, seed=0, epoch=3)
  np.testing.assert_array_equal(idx, idx2)
  assert not np.array_equal(idx, epoch_batches(37, 16, seed=0, epoch=4)[0])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=D, max_size=D),
       st.integers(0, 3))
def test_predictions_always_valid(values, seed):
  agent = _agents(seed)
  c = agent.predict(np.asarray(values, np.float32))
  assert isinstance(c, SearchChoice) and c.scorer in CFG.scorers
  assert isinstance(c.iterations, int) and 5 <= c.iterations <= 25
  assert 0.0 <= c.cost_penalty <= 0.5 and 0.0 <= c.exploration <= 4.0


_AGENTS = {}


def _agents(seed):
  if seed not in _AGENTS:
    _AGENTS[seed] = new_agent(CFG, seed=seed)
  return _AGENTS[seed]


def test_denormalize_maps_back_and_clips():
  raw = np.array([[5, 0.0, 0.0], [25, 0.5, 4.0], [14, 0.2, 2.5], [100, 9.0, -3.0]], np.float32)
  norm = normalize_settings(CFG, raw)
  assert norm.min() >= 0 and norm.max() <= 1
  it, lam, c = (np.asarray(a) for a in denormalize_settings(CFG, jnp.asarray(norm)))
  np.testing.assert_array_equal(it, [5, 25, 14, 25])
  np.testing.assert_allclose(lam, [0, 0.5, 0.2, 0.5], atol=1e-6)
  np.testing.assert_allclose(c, [0, 4.0, 2.5, 0.0], atol=1e-6)
  it, lam, c = denormalize_settings(CFG, jnp.array([[-3.0, 7.0, 0.5]]))
  assert int(it[0]) == 5 and float(lam[0]) == 0.5 and float(c[0]) == 2.0
  snap = AgentConfig(in_dim=D, scorers=("a",), iterations_choices=(25, 5, 15))
  assert snap.iterations_choices == (5, 15, 25)
  it, _, _ = denormalize_settings(snap, jnp.asarray(normalize_settings(snap, [[9, 0, 0], [11, 0, 0], [24, 0, 0]])))
  np.testing.assert_array_equal(np.asarray(it), [5, 15, 25])
  with pytest.raises(ValueError, match="iterations_choices"):
    AgentConfig(in_dim=D, scorers=("a",), iterations_choices=(3, 15))


def test_predict_batch_and_save_load_roundtrip(trained, tmp_path):
  res, _, val = trained
  agent = res.agent
  batch = agent.predict(val.embeddings[:5])
  assert len(batch) == 5 and all(isinstance(c, SearchChoice) for c in batch)
  one = agent.predict(val.embeddings[0])
  assert one.scorer == batch[0].scorer  # batch size may change float rounding, not choices
  np.testing.assert_allclose(one[1:], batch[0][1:], rtol=1e-4, atol=1e-5)
  assert set(batch[0].search_kwargs()) == {"iterations", "cost_penalty", "exploration"}
  path = save_agent(agent, str(tmp_path / "agent"), metadata={"note": "test"})
  loaded = load_agent(path)
  assert loaded.config == agent.config
  assert loaded.predict(val.embeddings[:5]) == batch
  for a, b in zip(jax.tree.leaves(agent_params(agent)), jax.tree.leaves(agent_params(loaded))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_load_agent_errors(trained, tmp_path):
  res, _, _ = trained
  path = save_agent(res.agent, str(tmp_path / "a"))
  with pytest.raises(FileNotFoundError, match="save_agent"):
    load_agent(str(tmp_path / "missing"))
  # Truncated weights.
  p = os.path.join(path, "params.safetensors")
  data = open(p, "rb").read()
  with open(p, "wb") as f:
    f.write(data[: len(data) // 2])
  with pytest.raises(ValueError, match="corrupt or truncated"):
    load_agent(path)
  # Weights of another shape (config says another hidden width).
  save_agent(res.agent, path)
  import json
  cfg_path = os.path.join(path, "config.json")
  cfg = json.load(open(cfg_path))
  cfg["config"]["hidden"] = [32, 16, 4]
  json.dump(cfg, open(cfg_path, "w"))
  with pytest.raises(ValueError, match="has shape"):
    load_agent(path)
  cfg["config"]["hidden"] = [32, 16]
  json.dump(cfg, open(cfg_path, "w"))
  with pytest.raises(ValueError, match="missing weights|unexpected weights"):
    load_agent(path)
  with open(cfg_path, "w") as f:
    f.write("{oops")
  with pytest.raises(ValueError, match="not valid JSON"):
    load_agent(path)


def test_bad_inputs():
  with pytest.raises(ValueError, match="in_dim"):
    AgentConfig(in_dim=0, scorers=("a",))
  with pytest.raises(ValueError, match="duplicate"):
    AgentConfig(in_dim=3, scorers=("a", "a"))
  with pytest.raises(TypeError, match="scorers"):
    AgentConfig(in_dim=3, scorers="a")
  with pytest.raises(ValueError, match="iterations_range"):
    AgentConfig(in_dim=3, scorers=("a",), iterations_range=(0, 5))
  with pytest.raises(ValueError, match="cost_penalty_range"):
    AgentConfig(in_dim=3, scorers=("a",), cost_penalty_range=(-1.0, 0.5))
  agent = _agents(0)
  with pytest.raises(ValueError, match=r"\[12\] or \[B, 12\]"):
    agent.predict(np.zeros(7))
  with pytest.raises(ValueError, match="NaN"):
    agent.predict(np.full(D, np.nan))
  with pytest.raises(ValueError, match="not among"):
    make_dataset(CFG, np.zeros((1, D)), ["nope"], np.zeros((1, 3)))
  with pytest.raises(ValueError, match="settings"):
    make_dataset(CFG, np.zeros((2, D)), [0, 1], np.zeros((2, 2)))
  with pytest.raises(ValueError, match="empty"):
    train_agent(CFG, make_dataset(CFG, np.zeros((0, D)), [], np.zeros((0, 3))))
  with pytest.raises(ValueError, match="checkpoint_dir"):
    train_agent(CFG, two_domains(4, 0), resume=True)
  with pytest.raises(ValueError, match="batch_size"):
    TrainConfig(batch_size=0)
  assert SETTINGS == ("iterations", "cost_penalty", "exploration")
