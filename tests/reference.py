"""Plain NumPy brute-force references: objectives evaluated from their definitions, and
greedy that re-evaluates f for every candidate at every step (float64)."""

from __future__ import annotations

import itertools

import numpy as np


def fl_value(sim, rel, selected, valid=None):
  """Σ_q Σ_{i valid} max(0, max_{j∈S, j valid} r_qj · s_ij); `rel` None = coverage."""
  sim = np.asarray(sim, np.float64)
  n = sim.shape[0]
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  rel = np.ones((1, n)) if rel is None else np.atleast_2d(np.asarray(rel, np.float64))
  sel = [j for j in range(n) if selected[j] and valid[j]]
  total = 0.0
  for q in range(rel.shape[0]):
    for i in range(n):
      if not valid[i]:
        continue
      total += max([0.0] + [rel[q, j] * sim[i, j] for j in sel])
  return total


def sc_value(sim, rel, selected, valid=None):
  """Σ_q Σ_{i valid} min(r_qi, max(0, max_{j∈S} s_ij))."""
  sim = np.asarray(sim, np.float64)
  n = sim.shape[0]
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  rel = np.atleast_2d(np.asarray(rel, np.float64))
  sel = [j for j in range(n) if selected[j] and valid[j]]
  total = 0.0
  for q in range(rel.shape[0]):
    for i in range(n):
      if valid[i]:
        total += min(rel[q, i], max([0.0] + [sim[i, j] for j in sel]))
  return total


def greedy(f, n, k, *, valid=None, costs=None, budget=None, ratio=False, min_gain=None):
  """Brute-force greedy on a set function `f(mask)`; ties go to the lowest index.

  Returns (picks, gains, values)."""
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  sel = np.zeros(n, bool)
  picks, gains, values = [], [], []
  spent = 0.0
  cur = f(sel)
  for _ in range(k):
    best, best_j, best_g = -np.inf, -1, 0.0
    for j in range(n):
      if sel[j] or not valid[j]:
        continue
      if costs is not None and costs[j] > budget - spent:
        continue
      t = sel.copy()
      t[j] = True
      g = f(t) - cur
      if ratio:
        crit = g / costs[j] if costs[j] > 0 else (np.inf if g > 0 else 0.0)
      else:
        crit = g
      if crit > best:
        best, best_j, best_g = crit, j, g
    if best_j < 0 or (min_gain is not None and best_g < min_gain):
      break
    sel[best_j] = True
    spent += 0.0 if costs is None else costs[best_j]
    cur = f(sel)
    picks.append(best_j)
    gains.append(best_g)
    values.append(cur)
  return picks, gains, values


def budgeted_greedy(f, n, k, *, costs, budget, valid=None):
  """Best of cost-benefit greedy, plain-gain greedy and the best single item (values)."""
  cb = greedy(f, n, k, valid=valid, costs=costs, budget=budget, ratio=True)
  uc = greedy(f, n, k, valid=valid, costs=costs, budget=budget, ratio=False)
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  singles = [f(np.eye(n, dtype=bool)[j]) for j in range(n) if valid[j] and costs[j] <= budget]
  return max([cb[2][-1] if cb[2] else 0.0, uc[2][-1] if uc[2] else 0.0, max(singles, default=0.0)])


def optimum(f, n, k, *, valid=None, costs=None, budget=None):
  """Exact maximum of f over sets of at most k valid items (within the budget)."""
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  items = [j for j in range(n) if valid[j]]
  best = f(np.zeros(n, bool))
  for size in range(1, k + 1):
    for combo in itertools.combinations(items, size):
      if costs is not None and sum(costs[j] for j in combo) > budget:
        continue
      mask = np.zeros(n, bool)
      mask[list(combo)] = True
      best = max(best, f(mask))
  return best


def prefix_bound(f, n, k, picks, *, valid=None, costs=None, budget=None):
  """The online bound at the set `picks` (Leskovec et al. 2007), from its definition:
  f(S) + the most a feasible set can add to S by the gains w.r.t. S (float64), i.e. the sum of
  the k largest gains, and with costs the smaller of that and the best fractional knapsack of
  the gains under `budget` (filled by gain per unit cost, free items first)."""
  valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
  sel = np.zeros(n, bool)
  sel[list(picks)] = True
  cur = f(sel)
  items = []
  for j in range(n):
    if sel[j] or not valid[j] or (costs is not None and costs[j] > budget):
      continue
    t = sel.copy()
    t[j] = True
    items.append((max(f(t) - cur, 0.0), 0.0 if costs is None else float(costs[j])))
  top = sum(sorted((g for g, _ in items), reverse=True)[:k])
  if costs is None:
    return cur + top
  room, sack = float(budget), 0.0
  def ratio(item):
    g, c = item
    return g / c if c > 0 else (np.inf if g > 0 else 0.0)

  for g, c in sorted(items, key=ratio, reverse=True):
    take = 1.0 if c <= room else room / c
    sack += take * g
    room -= take * c
    if room <= 0:
      break
  return cur + min(top, sack)


def greedy_bound(f, n, k, *, valid=None, costs=None, budget=None, ratio=False):
  """The least `prefix_bound` over the prefixes whose gains greedy's steps compute: every set
  before a step (S_0 … S_{k-1}, and the final set where greedy stopped before k picks)."""
  picks, _, _ = greedy(f, n, k, valid=valid, costs=costs, budget=budget, ratio=ratio)
  last = len(picks) if len(picks) < k else k - 1
  return min(prefix_bound(f, n, k, picks[:t], valid=valid, costs=costs, budget=budget)
             for t in range(last + 1))
