"""Cross-dataset runs: is the default CORAG configuration chosen by the data it is tested on?

A compact grid around the default (`GRID`: each bridge weight, the same-group penalty and the
search settings moved one at a time, and the top-up off) runs on the tuning sets through the
Pipeline's compiled solve (`context_eval.batched_select`; a weight change is a scorer builder
`(request) -> scorer` passed as `corag_scorer`, `bridge_builder`). Leave one dataset out: for
each group of `qa_sets.GROUPS`, the configuration with the best mean gain in joint recall over
NaiveRAG (budgets 128/256/384) on the two other groups is chosen, a configuration with any
negative gain there excluded, and its gain on the held-out group is reported with a paired
bootstrap CI. The same rule on all three groups chooses the configuration for HotpotQA test.
"""

from __future__ import annotations

import functools
import json
from typing import Dict, Sequence

import numpy as np

from jaxsel.contrib import registry
from training import context_eval, qa_sets

# label -> changes to the default (weights of the bridge scorer, search settings, top-up).
GRID = {
    "default": {},
    "mention 1.0": {"mention": 1.0},
    "mention 0": {"mention": 0.0},
    "link 0.5": {"link": 0.5},
    "link 0": {"link": 0.0},
    "entities 0.3": {"entities": 0.3},
    "entities 0": {"entities": 0.0},
    "same group 0": {"same_group": 0.0},
    "same group 5": {"same_group": 5.0},
    "mention 1.0, link 0.5": {"mention": 1.0, "link": 0.5},
    "5 iterations": {"iterations": 5},
    "30 iterations": {"iterations": 30},
    "c 1.0": {"exploration": 1.0},
    "λ 0.1": {"cost_penalty": 0.1},
    "no top-up": {"top_up": False},
}
SEARCH = ("iterations", "exploration", "cost_penalty")
_BUILDERS: dict = {}


def bridge_builder(**weights):
  """The registry's bridge scorer with some weights changed, as a scorer builder
  `(request) -> scorer` for `Pipeline(corag_scorer=...)`; `"bridge"` itself when nothing
  changes. One object per set of weights (a static argument of the compiled solve)."""
  unknown = set(weights) - set(registry.BRIDGE_WEIGHTS)
  if unknown:
    raise ValueError(f"Unknown bridge weights {sorted(unknown)}; use {sorted(registry.BRIDGE_WEIGHTS)}.")
  changed = {k: float(v) for k, v in weights.items() if v != registry.BRIDGE_WEIGHTS[k]}
  if not changed:
    return "bridge"
  key = tuple(sorted(changed.items()))
  if key not in _BUILDERS:
    _BUILDERS[key] = functools.partial(registry.SCORERS["bridge"], discount=1.0, **changed)
  return _BUILDERS[key]


def run_grid(base_pipe, prepared: Sequence, store: context_eval.RunStore, *,
             grid: Dict[str, dict] = GRID, budgets=context_eval.BUDGETS) -> None:
  """NaiveRAG (`"grid:naive"`) and every configuration of `grid` (`"grid:<label>"`) on the
  `prepared` questions of one set, stored in `store`."""
  naive = base_pipe.replace(method="naive")
  context_eval.run_batched(naive, prepared, store, "grid:naive", budgets=budgets,
                           settings={"method": "naive"})
  for label, changes in grid.items():
    weights = {k: v for k, v in changes.items() if k in registry.BRIDGE_WEIGHTS}
    search = {k: v for k, v in changes.items() if k in SEARCH}
    pipe = base_pipe.replace(method="corag", top_up=changes.get("top_up", True))
    settings = {"config": json.dumps({**registry.BRIDGE_WEIGHTS, **weights, **search,
                                      "top_up": pipe.config.top_up}, sort_keys=True)}
    context_eval.run_batched(pipe, prepared, store, "grid:" + label, budgets=budgets,
                             settings=settings, scorer=bridge_builder(**weights), **search)


def joint(stores: Dict[str, context_eval.RunStore], examples: Dict[str, list], sets: Sequence[str],
          name: str, budget: int) -> np.ndarray:
  """`[Q]` joint recall of stored method `name` over the questions of `sets`, concatenated."""
  return np.concatenate([context_eval.stored_metrics(stores[s], examples[s], name, budget)["joint"]
                         for s in sets])


def choose(stores, examples, sets: Sequence[str], *, grid=GRID, budgets=context_eval.BUDGETS) -> tuple:
  """`(label, score)`: the configuration of best mean gain in joint recall over NaiveRAG on
  `sets` (each dataset group and budget weighs the same), none negative."""
  groups = [[s for s in g if s in sets] for g in qa_sets.GROUPS.values()]
  groups = [g for g in groups if g]

  def score(label):
    gains = [joint(stores, examples, g, "grid:" + label, b).mean()
             - joint(stores, examples, g, "grid:naive", b).mean() for g in groups for b in budgets]
    return -np.inf if min(gains) < 0 else float(np.mean(gains)) * 100

  scores = {label: score(label) for label in grid}
  best = max(scores, key=lambda k: (scores[k], k == "default"))
  return best, scores[best]


def leave_one_out(stores, examples, *, grid=GRID, budgets=context_eval.BUDGETS,
                  n_resamples: int = 10_000) -> list:
  """One row per held-out group (and HotpotQA test when it is in `stores`): the configuration
  chosen on the others, NaiveRAG's joint recall and the chosen configuration's gain with CIs
  per budget, the default's gain, and the held-out group's own best configuration."""
  rows = []
  folds = [(name, sets, [s for g, ss in qa_sets.GROUPS.items() if g != name for s in ss])
           for name, sets in qa_sets.GROUPS.items()]
  if qa_sets.TEST in stores:
    folds.append((qa_sets.LABELS[qa_sets.TEST], (qa_sets.TEST,),
                  [s for ss in qa_sets.GROUPS.values() for s in ss]))
  for name, held, train in folds:
    label, train_score = choose(stores, examples, train, grid=grid, budgets=budgets)
    base = {b: joint(stores, examples, held, "grid:naive", b) for b in budgets}
    gains = {b: context_eval.ci(joint(stores, examples, held, "grid:" + label, b), base[b],
                                n_resamples=n_resamples) for b in budgets}
    default = {b: context_eval.ci(joint(stores, examples, held, "grid:default", b), base[b],
                                  n_resamples=n_resamples) for b in budgets}
    own = {c: np.mean([joint(stores, examples, held, "grid:" + c, b).mean() - base[b].mean()
                       for b in budgets]) * 100 for c in grid}
    own_best = max(own, key=own.get)
    rows.append({"held_out": name, "sets": list(held), "n": int(len(base[budgets[0]])),
                 "chosen": label, "train_score": train_score,
                 "naive": {b: float(base[b].mean() * 100) for b in budgets},
                 "gain": {b: gains[b]._asdict() for b in budgets},
                 "default_gain": {b: default[b]._asdict() for b in budgets},
                 "own_best": own_best, "own_best_mean": float(own[own_best]),
                 "chosen_mean": float(own[label])})
  return rows
