"""Run selection methods over a batch of QA questions and score them against the gold.

Shape legend: Q questions, N passages, T positions of an order (-1 padded).

Every method maps a batch of `QAFeatures` and a token budget to orders `[Q, T]`, one
`jax.vmap`-ed, jit-compiled call per batch (the first call compiles; `evaluate_methods`
warms each method up before timing it, so latency excludes compilation):

* `naive`: NaiveRAG, passages by decreasing relevance while they fit;
* `mmr`: maximal marginal relevance (diversity 0.3, i.e. relevance weight 0.7);
* `facility_location`, `saturated_coverage`: budgeted greedy on the objective;
* `corag_fixed`: CORAG search with one scorer and fixed settings;
* `corag_agent`: CORAG search with the configuration agent's scorer and settings per query;
* `exhaustive`: every ordered combination of up to 4 passages (CORAG Upper) for a scorer;
* `oracle`: the gold passages that fit (the ceiling of joint recall at a budget).
"""

from __future__ import annotations

import functools
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel import exhaustive_search, greedy, mmr, naive_rag
from jaxsel._src import methods
from training import evaluation, labels, qa
from training.qa import QAExample, QAFeatures, take


def _jnp(f: QAFeatures) -> QAFeatures:
  return QAFeatures(*(jnp.asarray(a) for a in f))


def _indices_to_orders(idx: np.ndarray, t: int) -> np.ndarray:
  out = np.full((idx.shape[0], t), -1, np.int32)
  w = min(t, idx.shape[1])
  out[:, :w] = idx[:, :w]
  return out


@functools.partial(jax.jit, static_argnames=("max_depth",))
def _naive(f: QAFeatures, budget, *, max_depth):
  def one(x):
    req = qa.request(x)
    return naive_rag(methods.scorer("relevance", req), x.costs, budget=budget,
                     max_depth=max_depth, valid=x.valid).order
  return jax.vmap(one)(f)


@functools.partial(jax.jit, static_argnames=("max_depth",))
def _mmr(f: QAFeatures, budget, diversity, *, max_depth):
  def one(x):
    req = qa.request(x)
    return mmr(methods.scorer("relevance", req), x.costs, budget=budget, similarity=req.similarity,
               diversity=diversity, max_depth=max_depth, valid=x.valid).order
  return jax.vmap(one)(f)


@functools.partial(jax.jit, static_argnames=("kind",))
def _greedy_objective(f: QAFeatures, budget, *, kind):
  def one(x):
    obj = methods.objective(kind, qa.request(x))
    return greedy(obj, k=x.costs.shape[0], costs=x.costs, budget=budget, method="dense").indices
  return jax.vmap(one)(f)


@functools.partial(jax.jit, static_argnames=("name", "max_size"))
def _exhaustive(f: QAFeatures, budget, *, name, max_size):
  def one(x):
    return exhaustive_search(methods.scorer(name, qa.request(x)), x.costs, budget=budget,
                             max_size=max_size, valid=x.valid, batch_size=1024).order
  return jax.vmap(one)(f)


def oracle_orders(features: QAFeatures, budget: float, t: int) -> np.ndarray:
  """Gold passages, cheapest first, while they fit."""
  out = np.full((features.costs.shape[0], t), -1, np.int32)
  for i in range(features.costs.shape[0]):
    gold = np.nonzero(features.gold[i] & features.valid[i])[0]
    gold = gold[np.argsort(features.costs[i][gold], kind="stable")]
    spent, k = 0.0, 0
    for j in gold:
      if spent + features.costs[i][j] <= budget and k < t:
        out[i, k] = j
        spent += features.costs[i][j]
        k += 1
  return out


def method_orders(method: str, features: QAFeatures, *, budget: float, max_depth: int = 6,
                  scorer: str = "mentions_links", iterations: int = 15, cost_penalty: float = 0.2,
                  exploration: float = 2.0, agent=None, mmr_diversity: float = 0.3,
                  exhaustive_size: int = 4) -> np.ndarray:
  """Orders `[Q, max_depth]` of one method for a batch of questions."""
  n = features.costs.shape[1]
  t = min(max_depth, n)
  f = _jnp(features)
  b = jnp.float32(budget)
  if method == "naive":
    return np.asarray(_naive(f, b, max_depth=t))
  if method == "mmr":
    return np.asarray(_mmr(f, b, jnp.float32(mmr_diversity), max_depth=t))
  if method in ("facility_location", "saturated_coverage"):
    return _indices_to_orders(np.asarray(_greedy_objective(f, b, kind=method)), t)
  if method == "corag_fixed":
    return labels.search_orders(features, scorer, budget=budget, iterations=iterations,
                                cost_penalty=cost_penalty, exploration=exploration, max_depth=t)
  if method == "corag_agent":
    if agent is None:
      raise ValueError("method 'corag_agent' needs `agent` (jaxsel.load_agent(path)).")
    return agent_orders(agent, features, budget=budget, max_depth=t)
  if method == "exhaustive":
    return _indices_to_orders(np.asarray(_exhaustive(f, b, name=scorer, max_size=min(exhaustive_size, n))), t)
  if method == "oracle":
    return oracle_orders(features, budget, t)
  raise ValueError(f"Unknown method {method!r}.")


def agent_orders(agent, features: QAFeatures, *, budget: float, max_depth: int = 6) -> np.ndarray:
  """CORAG orders with the agent's scorer and settings per question: questions are grouped by
  predicted scorer (one vmapped search per scorer and iteration count)."""
  unknown = [s for s in agent.config.scorers if s not in methods.SCORERS]
  if unknown:
    raise ValueError(f"the agent chooses among scorers {unknown} that this evaluation cannot build; "
                     f"available: {', '.join(methods.SCORERS)}.")
  idx, its, lam, c = (np.asarray(a) for a in agent.predict_arrays(jnp.asarray(features.query)))
  q, n = features.costs.shape
  t = min(max_depth, n)
  out = np.full((q, t), -1, np.int32)
  for s in np.unique(idx):
    rows = np.nonzero(idx == s)[0]
    out[rows] = labels.search_orders(take(features, rows), agent.config.scorers[int(s)], budget=budget,
                                     iterations=its[rows], cost_penalty=lam[rows],
                                     exploration=c[rows], max_depth=t)
  return out


def score_orders(examples: Sequence[QAExample], features: QAFeatures, orders: np.ndarray) -> list:
  """Per-question metrics (dicts) of the orders."""
  return [evaluation.selection_metrics(orders[i], texts=e.texts(), gold=e.gold,
                                       costs=features.costs[i][:len(e.passages)], answers=e.answers)
          for i, e in enumerate(examples)]


def evaluate_methods(examples: Sequence[QAExample], features: QAFeatures, *, methods: Sequence[str],
                     budgets: Sequence[float], baseline: str = "naive", n_resamples: int = 10_000,
                     progress: bool = False, **kwargs) -> dict:
  """`{budget: {method: summary}}` with means, latency per query (ms, compiled, batched) and
  paired bootstrap CIs of each method's difference from `baseline`."""
  out = {}
  for budget in budgets:
    per = {}
    for m in methods:
      method_orders(m, features, budget=budget, **kwargs)  # compiles; the timed run below does not
      t0 = time.perf_counter()
      orders = method_orders(m, features, budget=budget, **kwargs)
      ms = (time.perf_counter() - t0) * 1000 / max(len(examples), 1)
      rows = score_orders(examples, features, orders)
      for r in rows:
        r["latency_ms"] = ms
      per[m] = rows
      if progress:
        jr = np.mean([r["joint_recall"] for r in rows])
        print(f"budget {budget:g} {m:20s} joint recall {jr:.3f} ({ms:.2f} ms/query)", flush=True)
    base = per.get(baseline)
    out[float(budget)] = {m: evaluation.summarize(rows, baseline=None if m == baseline else base,
                                                  n_resamples=n_resamples)
                          for m, rows in per.items()}
  return out
