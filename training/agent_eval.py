"""Goal 2: does a per-query choice (the configuration agent) beat the best fixed configuration?

The menu is the registry's scorers (`MENU`, `jaxsel.available_scorers()`), each run by the
Pipeline with the default search settings and top-up, so a trained agent plugs into
`jaxsel.Pipeline(enc, method="corag", agent=agent)` as it is. Every menu scorer runs on every
question through the Pipeline's compiled solve (`context_eval.run_batched`), giving a table of
outcomes; a question's label is the menu scorer of best outcome summed over the budgets
(10 × joint recall + recall; ties go to the default, `DEFAULT`: the Pipeline's own CORAG scorer), so the agent predicts one
choice per question from its embedding alone, as the Pipeline asks it.

The agent is the documented recipe's: `jaxsel.contrib.ConfigAgent` (tower 512-256-128) trained by
`jaxsel.contrib.train_agent` (contrastive + cross-entropy + MSE, Adam, batch 32, 60 epochs, the epoch
of best validation accuracy on a seeded 20% split). Leave one dataset out (train on two groups
of `qa_sets.GROUPS`, test on the third) and all three groups -> HotpotQA test. Reported: the
agent's joint recall against the best fixed menu entry (chosen on the training groups) and the
fixed default, paired bootstrap CIs over questions (each question's mean over budgets), pooled
over the held-out folds; the scorer accuracy against the majority class of the training
labels; and the menu oracle (the best choice per question), the ceiling of any agent.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np

import jaxsel
from training import context_eval, qa_sets

# Every scorer of the registry, the Pipeline's default (the learned second-hop scorer) first.
DEFAULT = jaxsel.PipelineConfig().corag_scorer
MENU = (DEFAULT,) + tuple(s for s in jaxsel.available_scorers() if s != DEFAULT)


def run_menu(base_pipe, prepared: Sequence, store: context_eval.RunStore, *, menu=MENU,
             budgets=context_eval.BUDGETS) -> None:
  """Every menu scorer (`"menu:<scorer>"`) on the `prepared` questions of one set."""
  pipe = base_pipe.replace(method="corag")
  for s in menu:
    settings = {"scorer": s, "pipeline": "corag defaults", **context_eval.scorer_settings(s)}
    context_eval.run_batched(pipe, prepared, store, "menu:" + s, budgets=budgets,
                             settings=settings, scorer=s)


def outcomes(stores, examples, sets: Sequence[str], *, menu=MENU, budgets=context_eval.BUDGETS):
  """`(joint [Q, K, B], recall [Q, K, B])` of the menu on the questions of `sets`."""
  j, r = [], []
  for s in sets:
    per = [[context_eval.stored_metrics(stores[s], examples[s], "menu:" + m, b) for b in budgets]
           for m in menu]
    j.append(np.stack([np.stack([x["joint"] for x in row], 1) for row in per], 1))
    r.append(np.stack([np.stack([x["recall"] for x in row], 1) for row in per], 1))
  return np.concatenate(j), np.concatenate(r)


def labels(joint: np.ndarray, recall: np.ndarray, *, default: int = 0) -> np.ndarray:
  """`[Q]` index of each question's best menu entry (10·joint + recall summed over budgets);
  ties go to `default`, then to the earlier entry."""
  return best_entries((10 * joint + recall).sum(axis=2), default=default)


def best_entries(score: np.ndarray, *, default: int) -> np.ndarray:
  """`[Q]` index of each row's best entry of `score [Q, K]`; ties go to `default`, then to the
  earlier entry."""
  best = score.max(axis=1, keepdims=True)
  top = score >= best - 1e-9
  return np.where(top[:, default], default, np.argmax(top, axis=1)).astype(np.int32)


def agent_config(menu=MENU, dim: int = 384) -> jaxsel.contrib.AgentConfig:
  """The agent over the menu; the settings are the Pipeline's defaults (zero-width ranges)."""
  cfg = jaxsel.PipelineConfig()
  return jaxsel.contrib.AgentConfig(in_dim=dim, scorers=tuple(menu),
                            iterations_range=(cfg.iterations, cfg.iterations),
                            cost_penalty_range=(cfg.cost_penalty, cfg.cost_penalty),
                            exploration_range=(cfg.exploration, cfg.exploration))


def train(embeddings: np.ndarray, label: np.ndarray, *, menu=MENU, seed: int = 0,
          epochs: int = 60) -> jaxsel.contrib.ConfigAgent:
  """A `ConfigAgent` trained by the recipe on `[Q, D]` query embeddings and `[Q]` labels."""
  cfg = agent_config(menu, embeddings.shape[1])
  pc = jaxsel.PipelineConfig()
  settings = np.tile([pc.iterations, pc.cost_penalty, pc.exploration], (len(label), 1))
  data = jaxsel.contrib.make_dataset(cfg, embeddings, label, settings)
  tr, val = jaxsel.contrib.split_dataset(data, validation_fraction=0.2, seed=seed)
  res = jaxsel.contrib.train_agent(cfg, tr, config=jaxsel.contrib.TrainConfig(epochs=epochs, seed=seed,
                                                               select="best_val"), validation=val)
  return res.agent


def predict(agent: jaxsel.contrib.ConfigAgent, embeddings: np.ndarray) -> np.ndarray:
  idx, *_ = agent.predict_arrays(np.asarray(embeddings, np.float32))
  return np.asarray(idx, np.int32)


def query_embeddings(prepared: Sequence) -> np.ndarray:
  return np.concatenate([p.query for p in prepared])


def evaluate(stores, examples, prepared: Dict[str, Sequence], *, menu=MENU,
             budgets=context_eval.BUDGETS, epochs: int = 60, n_resamples: int = 10_000,
             save: Optional[str] = None) -> dict:
  """The folds and the pooled comparison (see the module docstring). With `save`, the agent
  trained on all three groups is saved there (`jaxsel.contrib.save_agent`)."""
  d = menu.index(DEFAULT)
  folds = [(g, [s for s in sets], [s for h, ss in qa_sets.GROUPS.items() if h != g for s in ss])
           for g, sets in qa_sets.GROUPS.items()]
  tuning = [s for ss in qa_sets.GROUPS.values() for s in ss]
  if qa_sets.TEST in stores:
    folds.append((qa_sets.LABELS[qa_sets.TEST], [qa_sets.TEST], tuning))
  rows = []
  pooled = {k: [] for k in ("agent", "fixed", "default", "oracle", "correct", "majority", "lodo")}
  for name, test_sets, train_sets in folds:
    jt, rt = outcomes(stores, examples, train_sets, menu=menu, budgets=budgets)
    je, re_ = outcomes(stores, examples, test_sets, menu=menu, budgets=budgets)
    lt, le = labels(jt, rt, default=d), labels(je, re_, default=d)
    et = np.concatenate([query_embeddings(prepared[s]) for s in train_sets])
    ee = np.concatenate([query_embeddings(prepared[s]) for s in test_sets])
    agent = train(et, lt, menu=menu, epochs=epochs)
    if save is not None and test_sets == [qa_sets.TEST]:
      jaxsel.contrib.save_agent(agent, save, metadata={"menu": list(menu), "trained_on": train_sets})
    choice = predict(agent, ee)
    fixed = int(np.argmax(jt.mean(axis=(0, 2))))  # best single menu entry on the training sets
    q = np.arange(len(choice))
    agent_j = je[q, choice].mean(axis=1)  # [Q] mean over budgets
    fixed_j, default_j = je[:, fixed].mean(axis=1), je[:, d].mean(axis=1)
    oracle_j = je[q, le].mean(axis=1)
    majority = int(np.bincount(lt, minlength=len(menu)).argmax())
    per_budget = {b: context_eval.ci(je[q, choice, i], je[:, fixed, i], n_resamples=n_resamples)._asdict()
                  for i, b in enumerate(budgets)}
    rows.append({
        "held_out": name, "n": int(len(choice)), "fixed": menu[fixed], "majority": menu[majority],
        "agent": float(agent_j.mean() * 100), "fixed_joint": float(fixed_j.mean() * 100),
        "default_joint": float(default_j.mean() * 100), "oracle": float(oracle_j.mean() * 100),
        "vs_fixed": context_eval.ci(agent_j, fixed_j, n_resamples=n_resamples)._asdict(),
        "vs_fixed_per_budget": per_budget,
        "accuracy": float((choice == le).mean() * 100),
        "majority_accuracy": float((le == majority).mean() * 100),
        "non_default": float((choice != d).mean() * 100),
        "label_counts": {m: int((lt == i).sum()) for i, m in enumerate(menu)},
        "choice_counts": {m: int((choice == i).sum()) for i, m in enumerate(menu)}})
    for k, v in (("agent", agent_j), ("fixed", fixed_j), ("default", default_j), ("oracle", oracle_j),
                 ("correct", choice == le), ("majority", le == majority),
                 ("lodo", np.full(len(choice), test_sets != [qa_sets.TEST]))):
      pooled[k].append(v)
  return {"folds": rows, "lodo": _pooled(pooled, n_resamples)}


def _pooled(pooled: dict, n_resamples: int) -> dict:
  """The leave-one-dataset-out folds together (every tuning question held out once)."""
  mask = np.concatenate(pooled["lodo"])
  a, f, dft, o, ok, maj = (np.concatenate(pooled[k])[mask] for k in
                           ("agent", "fixed", "default", "oracle", "correct", "majority"))
  return {"n": int(mask.sum()), "agent": float(a.mean() * 100), "fixed": float(f.mean() * 100),
          "default": float(dft.mean() * 100), "oracle": float(o.mean() * 100),
          "vs_fixed": context_eval.ci(a, f, n_resamples=n_resamples)._asdict(),
          "vs_default": context_eval.ci(a, dft, n_resamples=n_resamples)._asdict(),
          "oracle_vs_fixed": context_eval.ci(o, f, n_resamples=n_resamples)._asdict(),
          "accuracy": float(ok.mean() * 100), "majority_accuracy": float(maj.mean() * 100)}
