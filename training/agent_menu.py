"""The configuration agent over real alternatives: per request, granularity,
scorer and iterations, from the query embedding plus the request's own features.

A *request* is one question in one form (titled or untitled whole paragraphs, as the adapters
send them) at one budget (128 / 256 / 384 tokens). The menu (`MENU`) crosses the granularity
(`"passage"`, `"sentence"`), the CORAG scorer (`learned_hops`, `bridge`) and the iterations (15,
45); its first entry is what `Pipeline(enc)` does. Every entry runs on every request through
`Pipeline.select` (the runner's `AGENT_MENU` grid, `training/grids.py`), scored by
`runner.span_metrics`: answer in context (`aic`, the
target: the only metric every set has and the one a reader needs; NaN for yes/no answers, left
out), supporting-fact joint (`sf`, HotpotQA and 2Wiki) and paragraph joint (`para`).

The agent (`jaxsel.contrib.ConfigAgent`, the documented recipe, `agent_eval.train`) reads the query
embedding `[D]` and `REQUEST_FEATURES` (the budget, titles or not, the number and length of the
paragraphs, their total against the budget; standardised on the training requests) and names a
menu entry. A request's label is its best entry by `aic + 0.1 para + 0.1 sf`, ties to the best
fixed entry (the best mean `aic` on the training requests), so the agent leaves the fixed choice
only where another entry did better. Folds: trained on two of HotpotQA-hard, MuSiQue and 2Wiki,
tested on the third (pooled: leave one dataset out), and trained on all three, tested on HotpotQA
test. The learned scorer's weights for the MuSiQue and 2Wiki requests are trained without that
dataset (`--weights`, as in `python -m training granularity`). Reported: answer in context of the agent, the
best fixed entry and the default, each question's mean over its requests, paired bootstrap 95%
CIs over questions; the menu oracle (the best entry per request) is the ceiling of any agent.

    python -m training agent-menu --limit 100 \\
        --weights 2wiki=out/gran/no_2wiki.safetensors,musique=out/gran/no_musique.safetensors
"""

from __future__ import annotations

import numpy as np

from training import agent_eval, context_eval, hop_features, runner

# (granularity, scorer, iterations); the first is Pipeline(enc)'s default.
MENU = tuple((g, s, it) for it in (15, 45) for s in ("learned_hops", "bridge")
             for g in ("passage", "sentence"))
NAMES = tuple(f"{g}/{s}/{it}" for g, s, it in MENU)
GROUPS = {"HotpotQA-hard": "hotpot_hard", "MuSiQue": "musique", "2Wiki": "2wiki"}
TEST = "hotpot_test"
METRICS = ("aic", "sf", "para")
REQUEST_FEATURES = ("log2 budget / 256", "titled", "log paragraphs", "log mean paragraph tokens",
                    "log total tokens / budget")


def request_features(passages, budget: float, titled: bool) -> np.ndarray:
  """`REQUEST_FEATURES` of one request `[F]`."""
  tokens = np.asarray([p.tokens for p in passages], np.float64)
  return np.asarray([np.log2(budget / 256.0), float(titled), np.log(len(passages)),
                     np.log(tokens.mean()), np.log(tokens.sum() / budget)], np.float32)


def outcomes(cells: dict, name: str, grid, *, base, limit) -> dict:
  """One set's requests from the runner's results (`cells`: `{form: runner.run_cell(...)}` of
  the `AGENT_MENU` grid), stacked: `{metric: [Q, K, R]}` (R = forms x budgets, each question's
  requests side by side), the request features `[Q, R, F]` and the query embeddings `[Q, D]`."""
  data, feats, query = {m: [] for m in METRICS}, [], None
  examples = hop_features.load_examples(name, limit=limit)
  for form, r in cells.items():
    if r["over"]:
      raise AssertionError(f"{name} {form}: {r['over']} selections over their budget")
    per = r["per_question"]
    for m in METRICS:  # [Q, K, B]
      data[m].append(np.asarray([[per[n][b][m] for b in grid.budgets] for n in NAMES],
                                np.float32).transpose(2, 0, 1))
    enc = runner.encoder_for(name, form, base, grid.cache)
    feats.append(np.asarray([[request_features(hop_features.paragraph_passages(ex, form, enc.tokenizer),
                                               b, form == "titled") for b in grid.budgets]
                             for ex in examples]))
    if query is None:
      query = np.asarray(enc.encode([ex.question for ex in examples], prompt_name="query"), np.float32)
  out = {m: np.concatenate(v, axis=2) for m, v in data.items()}
  out["features"] = np.concatenate(feats, axis=1)
  out["query"] = query
  return out


def _requests(data: dict):
  """Flat requests of one set: inputs `[N, D + F]` (unstandardised), scores `[N, K]`, aic
  `[N, K]` and the question of each request `[N]`; requests with a NaN aic left out."""
  q_n, k_n, r_n = data["aic"].shape
  aic = data["aic"].transpose(0, 2, 1).reshape(q_n * r_n, k_n)
  sf = np.nan_to_num(data["sf"].transpose(0, 2, 1).reshape(q_n * r_n, k_n))
  para = data["para"].transpose(0, 2, 1).reshape(q_n * r_n, k_n)
  x = np.concatenate([np.repeat(data["query"], r_n, axis=0),
                      data["features"].reshape(q_n * r_n, -1)], axis=1)
  question = np.repeat(np.arange(q_n), r_n)
  keep = np.isfinite(aic).all(axis=1)
  return x[keep], (aic + 0.1 * para + 0.1 * sf)[keep], aic[keep], question[keep]


def per_question(values: np.ndarray, question: np.ndarray) -> np.ndarray:
  """The mean of each question's requests."""
  _, inv = np.unique(question, return_inverse=True)
  return np.bincount(inv, weights=values) / np.bincount(inv)


def fold(train: list, test: dict, *, dim: int, epochs: int = 60, seed: int = 0,
         n_resamples: int = 10_000) -> dict:
  """Train on the requests of the `train` sets' data, test on `test`'s (see the module doc)."""
  parts = [_requests(d) for d in train]
  x = np.concatenate([p[0] for p in parts])
  score = np.concatenate([p[1] for p in parts])
  aic = np.concatenate([p[2] for p in parts])
  fixed = int(np.argmax(aic.mean(axis=0)))
  label = agent_eval.best_entries(score, default=fixed)
  mu, sd = x[:, dim:].mean(axis=0), x[:, dim:].std(axis=0) + 1e-6

  def inputs(a):
    return np.concatenate([a[:, :dim], (a[:, dim:] - mu) / sd], axis=1).astype(np.float32)

  agent = agent_eval.train(inputs(x), label, menu=NAMES, seed=seed, epochs=epochs)
  xt, _, aic_t, q_t = _requests(test)
  choice = agent_eval.predict(agent, inputs(xt))
  n = np.arange(len(choice))
  a = per_question(aic_t[n, choice], q_t)
  f = per_question(aic_t[:, fixed], q_t)
  d = per_question(aic_t[:, 0], q_t)
  o = per_question(aic_t.max(axis=1), q_t)
  return {"agent": a, "fixed": f, "default": d, "oracle": o, "fixed_name": NAMES[fixed],
          "choices": {NAMES[k]: int((choice == k).sum()) for k in range(len(NAMES))},
          "labels": {NAMES[k]: int((label == k).sum()) for k in range(len(NAMES))},
          "requests": int(len(choice)),
          "vs_fixed": context_eval.ci(a, f, n_resamples=n_resamples)._asdict(),
          "vs_default": context_eval.ci(a, d, n_resamples=n_resamples)._asdict(),
          "entries": {NAMES[k]: float(aic_t[:, k].mean() * 100) for k in range(len(NAMES))}}


def evaluate(data: dict, *, dim: int, epochs: int = 60, n_resamples: int = 10_000) -> dict:
  """The leave-one-dataset-out folds, pooled, and the HotpotQA test fold."""
  rows, pooled = {}, {k: [] for k in ("agent", "fixed", "default", "oracle")}
  for label, name in GROUPS.items():
    r = fold([data[s] for s in GROUPS.values() if s != name], data[name], dim=dim, epochs=epochs,
             n_resamples=n_resamples)
    rows[label] = r
    for k in pooled:
      pooled[k].append(r[k])
  if TEST in data:
    rows["HotpotQA test"] = fold([data[s] for s in GROUPS.values()], data[TEST], dim=dim,
                                 epochs=epochs, n_resamples=n_resamples)
  p = {k: np.concatenate(v) for k, v in pooled.items()}
  rows["pooled, leave one dataset out"] = {
      **p, "vs_fixed": context_eval.ci(p["agent"], p["fixed"], n_resamples=n_resamples)._asdict(),
      "vs_default": context_eval.ci(p["agent"], p["default"], n_resamples=n_resamples)._asdict(),
      "fixed_name": "per fold"}
  return rows


def _entry(name: str) -> str:
  return name.replace("/", ", ")


def markdown(rows: dict) -> list:
  """The tables of `evaluate`'s rows (answer in context, %): the agent against the best fixed
  entry and the default per held-out set, then each entry alone."""
  lines = ["| held out (questions) | agent | best fixed on training | default (`passage`, "
           "`learned_hops`, 15) | Δ agent − fixed | Δ agent − default | menu oracle |",
           "|---|---|---|---|---|---|---|"]
  pooled = [k for k in rows if k.startswith("pooled")]
  for name in [k for k in rows if k not in pooled and k != "HotpotQA test"] + pooled + \
      [k for k in rows if k == "HotpotQA test"]:
    r = rows[name]
    fixed = f"{r['fixed'].mean() * 100:.1f}" + (
        f" ({_entry(r['fixed_name'])})" if r["fixed_name"] in NAMES else "")
    label = f"**{name}**" if name in pooled else name
    lines.append(f"| {label} ({len(r['agent'])}) | {r['agent'].mean() * 100:.1f} | {fixed} | "
                 f"{r['default'].mean() * 100:.1f} | {context_eval.fmt_ci(r['vs_fixed'])} | "
                 f"{context_eval.fmt_ci(r['vs_default'])} | {r['oracle'].mean() * 100:.1f} |")
  held = [k for k in rows if "entries" in rows[k]]
  lines += ["", "| entry (granularity, scorer, iterations) | " + " | ".join(held) + " |",
            "|---" * (1 + len(held)) + "|"]
  for i, n in enumerate(NAMES):
    lines.append(f"| {_entry(n)}{' (the default)' if i == 0 else ''} | " +
                 " | ".join(f"{rows[k]['entries'][n]:.1f}" for k in held) + " |")
  return lines
