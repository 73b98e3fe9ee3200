"""Trains the learned second-hop scorer (`jaxsel._src.scorers.hops`) with optax.

Shape legend: B questions of a batch, N candidates (padded), Fu / Fp unary / pair features.

Data: whole paragraphs as `Passage`s of multi-hop questions (`training/hop_features.py`), each
question in both forms, with titles (`"title: paragraph"`, `Passage.title`) and without, so the
model cannot rest on titles. Targets: `u_j` = paragraph j is gold; `g_ij` = j is gold, for
every ordered pair i ≠ j (the pair model sees i's features, so it learns what reading i says
about j). Loss: mean binary cross-entropy of both heads (pairs whose first paragraph is gold
weighted `--gold-row-weight`). Adam, batches of questions in a seeded order per epoch.

Checkpoints (orbax) every `--save-every` steps hold the weights, the optimiser state and the
step; a rerun with the same folder resumes from the latest and ends bit-identical to an
uninterrupted run (the batch order depends only on the seed and the epoch).

    python -m training train-hops --sets hotpot_dev_train,hotpot_train,musique,2wiki \\
        --out jaxsel/data/hop_scorer.safetensors --ckpt out/hops/ckpt_all

Never train on `hotpot_test` (refused).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from jaxsel.contrib import hop_scorer as hops  # noqa: E402
from jaxsel.contrib import registry as methods  # noqa: E402
from training import hop_features, hop_search, qa_sets  # noqa: E402

N_PAD = 20  # every question padded to 20 candidates (HotpotQA and 2Wiki have 10, MuSiQue 20)


def _features_one(x):
  req = methods.pipeline_request(x)  # the Pipeline's own request of a padded question
  rel, sig = jnp.max(req.relevance, axis=0), methods.signals_of(req)
  uf = hops.unary_features(rel, req.similarity, sig.mentioned, req.costs, req.valid,
                           overlap=sig.overlap)
  pf = hops.pair_features(rel, req.similarity, sig.links, sig.entities, req.valid,
                          overlap=sig.overlap, covered=sig.covered, shared=sig.shared)
  return uf, pf


_features = jax.jit(jax.vmap(_features_one))


def arrays(feats: Sequence, *, n: int = N_PAD, chunk: int = 128) -> dict:
  """`{"unary": [Q, N, Fu], "pair": [Q, N, N, Fp], "gold": [Q, N], "valid": [Q, N]}` (host)."""
  us, ps = [], []
  for s in range(0, len(feats), chunk):
    x = hop_search.pad_batch(feats[s:s + chunk], n)
    u, p = _features(x)
    us.append(np.asarray(u))
    ps.append(np.asarray(p))
  gold = np.zeros((len(feats), n), np.float32)
  valid = np.zeros((len(feats), n), bool)
  for r, f in enumerate(feats):
    gold[r, :len(f.gold)] = f.gold
    valid[r, :len(f.gold)] = True
  return {"unary": np.concatenate(us), "pair": np.concatenate(ps), "gold": gold, "valid": valid}


def stats(x: np.ndarray, mask: np.ndarray):
  v = x[mask]
  return v.mean(0), np.maximum(v.std(0), 1e-3)


def split_params(params: dict):
  w = {k: v for k, v in params.items() if not k.endswith((".mean", ".scale"))}
  s = {k: v for k, v in params.items() if k.endswith((".mean", ".scale"))}
  return w, s


def loss_fn(weights, fixed, batch, gold_row_weight):
  params = {**weights, **fixed}
  valid, gold = batch["valid"], batch["gold"]
  ul = hops.mlp(params, "unary", batch["unary"])
  pl = hops.mlp(params, "pair", batch["pair"])
  vu = valid.astype(jnp.float32)
  lu = jnp.sum(optax.sigmoid_binary_cross_entropy(ul, gold) * vu) / jnp.maximum(jnp.sum(vu), 1)
  n = valid.shape[-1]
  vp = (valid[:, :, None] & valid[:, None, :] & ~jnp.eye(n, dtype=bool)).astype(jnp.float32)
  vp = vp * (1.0 + (gold_row_weight - 1.0) * gold[:, :, None])
  target = jnp.broadcast_to(gold[:, None, :], pl.shape)
  lp = jnp.sum(optax.sigmoid_binary_cross_entropy(pl, target) * vp) / jnp.maximum(jnp.sum(vp), 1)
  return lu + lp


def make_step(opt, gold_row_weight: float):
  @jax.jit
  def step(weights, opt_state, fixed, batch):
    loss, grads = jax.value_and_grad(loss_fn)(weights, fixed, batch, gold_row_weight)
    updates, opt_state = opt.update(grads, opt_state, weights)
    return optax.apply_updates(weights, updates), opt_state, loss
  return step


def batch_rows(step: int, q: int, batch_size: int, seed: int) -> np.ndarray:
  """The question rows of `step`: epoch `e` walks a permutation seeded by (seed, e)."""
  per_epoch = max(q // batch_size, 1)
  epoch, i = divmod(step, per_epoch)
  perm = np.random.default_rng([seed, epoch]).permutation(q)
  return perm[i * batch_size:(i + 1) * batch_size]


def train(data: dict, *, steps: int, batch_size: int = 64, lr: float = 3e-3, hidden: int = 32,
          layers: int = 2, seed: int = 0, gold_row_weight: float = 2.0, ckpt: str = None,
          save_every: int = 200, log=print) -> tuple:
  """Trains from `arrays(...)`; with `ckpt`, saves every `save_every` steps and resumes from the
  latest checkpoint there. -> (params, losses per step run here)."""
  params = hops.init_params(
      jax.random.key(seed), hidden=hidden, layers=layers,
      unary_stats=stats(data["unary"], data["valid"]),
      pair_stats=stats(data["pair"], data["valid"][:, :, None] & data["valid"][:, None, :]))
  weights, fixed = split_params(params)
  opt = optax.adam(lr)
  opt_state = opt.init(weights)
  start = 0
  mgr = None
  if ckpt:
    mgr = ocp.CheckpointManager(os.path.abspath(ckpt), options=ocp.CheckpointManagerOptions(
        max_to_keep=2, save_interval_steps=1))
    latest = mgr.latest_step()
    if latest is not None:
      restored = mgr.restore(latest, args=ocp.args.StandardRestore(
          {"weights": weights, "opt_state": opt_state, "fixed": fixed}))
      weights, opt_state, fixed = restored["weights"], restored["opt_state"], restored["fixed"]
      start = int(latest)
      log(f"resumed from step {start}")
  step_fn = make_step(opt, gold_row_weight)
  q = len(data["gold"])
  losses = []
  t0 = time.time()
  for s in range(start, steps):
    rows = batch_rows(s, q, batch_size, seed)
    batch = {k: jnp.asarray(v[rows]) for k, v in data.items()}
    weights, opt_state, loss = step_fn(weights, opt_state, fixed, batch)
    losses.append(float(loss))
    if mgr is not None and ((s + 1) % save_every == 0 or s + 1 == steps):
      mgr.save(s + 1, args=ocp.args.StandardSave(
          {"weights": weights, "opt_state": opt_state, "fixed": fixed}))
    if (s + 1) % 200 == 0:
      log(f"step {s + 1}: loss {np.mean(losses[-200:]):.4f} ({time.time() - t0:.0f}s)")
  if mgr is not None:
    mgr.wait_until_finished()
    mgr.close()
  return {**weights, **fixed}, losses


def with_distractors(feats: Sequence, *, n: int = N_PAD) -> list:
  """Each question's paragraphs followed by the next question's (of `feats`, cyclically; at most
  `n` candidates in all) as extra non-gold candidates, with the text signals recomputed over
  all of them: questions with twice the candidates (20 for HotpotQA and 2Wiki, as MuSiQue has),
  so the model sees ranks and distractor counts beyond 10. Questions that already have `n`
  candidates (MuSiQue) are left out (they would be copies)."""
  out = []
  for i, a in enumerate(feats):
    b = feats[(i + 1) % len(feats)]
    extra = min(len(b.passages), n - len(a.passages))
    if extra <= 0:
      continue
    shift = max(p.doc for p in a.passages) + 1
    ps = list(a.passages) + [dataclasses.replace(p, doc=p.doc + shift) for p in b.passages[:extra]]
    sig = methods.text_signals([p.text for p in ps], [p.doc for p in ps], [p.title for p in ps],
                               [a.example.question])
    out.append(hop_features.Features(a.example, ps, a.query, np.concatenate([a.emb, b.emb[:extra]]),
                                     sig, np.concatenate([a.gold, np.zeros(extra, bool)])))
  return out


def load_data(sets: Sequence[str], *, cache: str = hop_features.CACHE, limits=None,
              base=None, distractors: bool = False) -> dict:
  """Both forms of every set in `sets` (the first `limits[set]` questions), stacked; with
  `distractors`, each set-form is followed by its `with_distractors` copy."""
  limits = limits or {}
  if qa_sets.TEST in sets:
    raise SystemExit(f"{qa_sets.TEST} is the held-out test split; never train on it.")
  parts = []
  for name in sets:
    for form in hop_features.FORMS:
      feats = hop_features.load(name, form, cache=cache, base=base, limit=limits.get(name))
      parts.append(arrays(feats))
      more = with_distractors(feats) if distractors else []
      if more:
        parts.append(arrays(more))
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default="hotpot_dev_train,hotpot_train,musique,2wiki")
  p.add_argument("--out", required=True, help="safetensors file of the trained weights")
  p.add_argument("--ckpt", default=None, help="orbax checkpoint folder (resumable)")
  p.add_argument("--steps", type=int, default=3000)
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--lr", type=float, default=3e-3)
  p.add_argument("--hidden", type=int, default=32)
  p.add_argument("--layers", type=int, default=2)
  p.add_argument("--gold-row-weight", type=float, default=2.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--save-every", type=int, default=500)
  p.add_argument("--limits", default="", help="SET=N,...: the first N questions of SET only")
  p.add_argument("--cache", default=hop_features.CACHE)
  p.add_argument("--distractors", action="store_true",
                 help="also train on every question with the next one's paragraphs as distractors")
  args = p.parse_args(argv)
  sets = [s for s in args.sets.split(",") if s]
  limits = {k: int(v) for k, v in (kv.split("=", 1) for kv in args.limits.split(",") if kv)}
  t0 = time.time()
  data = load_data(sets, cache=args.cache, limits=limits, distractors=args.distractors)
  print(f"{len(data['gold'])} question-forms loaded in {time.time() - t0:.0f}s", flush=True)
  params, losses = train(data, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                         hidden=args.hidden, layers=args.layers, seed=args.seed,
                         gold_row_weight=args.gold_row_weight, ckpt=args.ckpt,
                         save_every=args.save_every)
  meta = {"sets": sets, "limits": limits, "forms": list(hop_features.FORMS), "steps": args.steps,
          "batch_size": args.batch_size, "lr": args.lr, "hidden": args.hidden,
          "layers": args.layers, "gold_row_weight": args.gold_row_weight, "seed": args.seed,
          "unary_features": list(hops.UNARY_FEATURES), "pair_features": list(hops.PAIR_FEATURES),
          "encoder": hop_features.ENCODER}
  if args.distractors:  # recorded only when used: the shipped weights' recipe predates it
    meta["distractors"] = True
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  sha = hops.save_hop_params(args.out, params, meta)
  print(json.dumps({"out": args.out, "sha256": sha, "final_loss": float(np.mean(losses[-100:]))
                    if losses else None, "seconds": time.time() - t0}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
