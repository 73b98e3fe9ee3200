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

The agent (`jaxsel.contrib.ConfigAgent`, the documented recipe, `agent_eval.train`) reads
`inputs` (`INPUTS`): the query embedding `[D]`, `REQUEST_FEATURES` (the budget, titles or not,
the number and length of the paragraphs, their total against the budget) and, selection-aware,
every entry's `outcomes.OUTCOME_FEATURES` and agreement (what it picked: each entry runs
first); all but the embedding standardised on the training requests; it names a menu entry.
Or a ranker (`fit_ranker`) scores each entry's answer in context from its outcome and the
request's features, and the best-scored entry is chosen. `entries` restricts the menu (e.g.
the granularity pair). A request's label is its best entry by `aic + 0.1 para + 0.1 sf`, ties to the best
fixed entry (the best mean `aic` on the training requests), so the agent leaves the fixed choice
only where another entry did better. Folds: trained on two of HotpotQA-hard, MuSiQue and 2Wiki,
tested on the third (pooled: leave one dataset out), and trained on all three, tested on HotpotQA
test. The learned scorer's weights for the MuSiQue and 2Wiki requests are trained without that
dataset (`--weights`, as in `python -m training granularity`). Reported: answer in context of the agent, the
best fixed entry and the default, each question's mean over its requests, paired bootstrap 95%
CIs over questions; the menu oracle (the best entry per request) is the ceiling of any agent.

    python -m training agent-menu --limit 100 \\
        --weights 2wiki=out/gran/no_2wiki.safetensors,musique=out/gran/no_musique.safetensors \\
        [--inputs request,outcomes] [--chooser ranker] [--entries NAME,NAME]
"""

from __future__ import annotations

import numpy as np

from training import agent_eval, context_eval, hop_features, runner
from training import outcomes as outcomes_lib

# (granularity, scorer, iterations); the first is what Pipeline(enc) does on these requests
# (each holds more than its budget, so the default granularity, "auto", cuts sentences).
MENU = tuple((g, s, it) for it in (15, 45) for s in ("learned_hops", "bridge")
             for g in ("sentence", "passage"))
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
  data, feats, outs, docs, query = {m: [] for m in METRICS}, [], [], [], None
  examples = hop_features.load_examples(name, limit=limit)
  for form, r in cells.items():
    if r["over"]:
      raise AssertionError(f"{name} {form}: {r['over']} selections over their budget")
    per = r["per_question"]
    for m in METRICS:  # [Q, K, B]
      data[m].append(np.asarray([[per[n][b][m] for b in grid.budgets] for n in NAMES],
                                np.float32).transpose(2, 0, 1))
    enc = runner.encoder_for(name, form, base, grid.cache)
    paragraphs = [hop_features.paragraph_passages(ex, form, enc.tokenizer) for ex in examples]
    feats.append(np.asarray([[request_features(ps, b, form == "titled") for b in grid.budgets]
                             for ps in paragraphs]))
    q_emb = np.asarray(enc.encode([ex.question for ex in examples], prompt_name="query"), np.float32)
    if query is None:
      query = q_emb
    found, sets = [], []  # [Q, B, K, F], [Q, B, K] touched paragraphs
    for i, (ex, ps) in enumerate(zip(examples, paragraphs)):
      req = outcomes_lib.Request(ex.question, ps, q_emb[i],
                                 np.asarray(enc.encode([p.text for p in ps]), np.float32))
      found.append([[req.features(r["picks"][n][b][i], b) for n in NAMES] for b in grid.budgets])
      sets.append([[frozenset(int(p[0]) for p in r["picks"][n][b][i]) for n in NAMES]
                   for b in grid.budgets])
    outs.append(np.asarray(found, np.float32))
    touched = np.empty((len(sets), len(grid.budgets), len(NAMES)), object)
    for i in np.ndindex(touched.shape):
      touched[i] = sets[i[0]][i[1]][i[2]]
    docs.append(touched)
  out = {m: np.concatenate(v, axis=2) for m, v in data.items()}
  out["features"] = np.concatenate(feats, axis=1)
  out["outcomes"] = np.concatenate(outs, axis=1)  # [Q, R, K, F]
  out["docs"] = np.concatenate(docs, axis=1)  # [Q, R, K] sets
  out["query"] = query
  return out


INPUTS = ("query", "request", "outcomes")


def _requests(data: dict, entries: tuple, inputs: tuple):
  """Flat requests of one set over the menu `entries`: inputs `[N, D + F]` (unstandardised:
  the query embedding first, `D` = 0 without "query" in `inputs`, then the request features and
  the entries' outcome features), scores `[N, K]`, aic `[N, K]` and the question of each request
  `[N]`; requests with a NaN aic left out."""
  q_n, _, r_n = data["aic"].shape
  e = list(entries)

  def flat(m):
    return data[m][:, e].transpose(0, 2, 1).reshape(q_n * r_n, len(e))

  aic, sf, para = flat("aic"), np.nan_to_num(flat("sf")), flat("para")
  parts = []
  if "query" in inputs:
    parts.append(np.repeat(data["query"], r_n, axis=0))
  if "request" in inputs:
    parts.append(data["features"].reshape(q_n * r_n, -1))
  if "outcomes" in inputs:
    agree = outcomes_lib.agreement(data["docs"][:, :, e])[..., None]
    parts.append(np.concatenate([data["outcomes"][:, :, e], agree], -1).reshape(q_n * r_n, -1))
  x = np.concatenate(parts, axis=1)
  question = np.repeat(np.arange(q_n), r_n)
  keep = np.isfinite(aic).all(axis=1)
  return x[keep], (aic + 0.1 * para + 0.1 * sf)[keep], aic[keep], question[keep]


def per_question(values: np.ndarray, question: np.ndarray) -> np.ndarray:
  """The mean of each question's requests."""
  _, inv = np.unique(question, return_inverse=True)
  return np.bincount(inv, weights=values) / np.bincount(inv)


def _entry_rows(x: np.ndarray, k_n: int) -> np.ndarray:
  """Standardised request inputs `[N, R + K F]` (request features, then each entry's outcome
  features) -> per entry `[N, K, K + F + F + K R]`: the entry (one-hot), its outcome
  features, the same less their mean over the entries, and the request features per entry."""
  n, width = x.shape
  f_n = (width - len(REQUEST_FEATURES)) // k_n
  req, out = x[:, :-k_n * f_n], x[:, -k_n * f_n:].reshape(n, k_n, f_n)
  onehot = np.broadcast_to(np.eye(k_n, dtype=np.float32), (n, k_n, k_n))
  per = (onehot[..., None] * req[:, None, None, :]).reshape(n, k_n, -1)
  return np.concatenate([onehot, out, out - out.mean(axis=1, keepdims=True), per], axis=-1)


def fit_ranker(rows: np.ndarray, aic: np.ndarray, *, l2: float = 1.0, steps: int = 50):
  """A logistic regression of each entry's answer in context on its `_entry_rows` (Newton
  steps, L2 weight `l2`): `rows [N, K, G] -> [N, K]` scores; the choice is the best score."""
  g = rows.shape[-1]
  a = np.concatenate([rows.reshape(-1, g), np.ones((rows.shape[0] * rows.shape[1], 1))], axis=1)
  y, w = aic.reshape(-1), np.zeros(g + 1)
  reg = np.diag(np.r_[np.full(g, l2), 0.0])
  for _ in range(steps):
    p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -30, 30)))
    grad = a.T @ (p - y) + reg @ w
    hess = (a * (p * (1 - p))[:, None]).T @ a + reg + 1e-6 * np.eye(g + 1)
    w -= np.linalg.solve(hess, grad)
  return lambda r: np.concatenate([r, np.ones(r.shape[:2] + (1,))], axis=-1) @ w


def fold(train: list, test: dict, *, entries: tuple = tuple(range(len(MENU))),
         inputs: tuple = ("query", "request"), chooser: str = "agent", epochs: int = 60,
         seed: int = 0, n_resamples: int = 10_000) -> dict:
  """Train on the requests of the `train` sets' data, test on `test`'s (see the module doc),
  over the menu `entries` (indices into `MENU`; the first is the default) from `inputs`, by
  the `chooser`: ``"agent"`` (`ConfigAgent`, the best entry as a class) or ``"ranker"``
  (`fit_ranker`, each entry's answer in context from its outcome; inputs request, outcomes)."""
  if chooser == "ranker" and tuple(inputs) != ("request", "outcomes"):
    raise ValueError("chooser='ranker' reads inputs=('request', 'outcomes')")
  names = tuple(NAMES[k] for k in entries)
  dim = test["query"].shape[1] if "query" in inputs else 0
  parts = [_requests(d, entries, inputs) for d in train]
  x = np.concatenate([p[0] for p in parts])
  score = np.concatenate([p[1] for p in parts])
  aic = np.concatenate([p[2] for p in parts])
  fixed = int(np.argmax(aic.mean(axis=0)))
  label = agent_eval.best_entries(score, default=fixed)
  mu, sd = x[:, dim:].mean(axis=0), x[:, dim:].std(axis=0) + 1e-6

  def standard(a):
    return np.concatenate([a[:, :dim], (a[:, dim:] - mu) / sd], axis=1).astype(np.float32)

  xt, _, aic_t, q_t = _requests(test, entries, inputs)
  if chooser == "ranker":
    ranker = fit_ranker(_entry_rows(standard(x), len(names)), aic)
    choice = np.argmax(ranker(_entry_rows(standard(xt), len(names))), axis=1)
  else:
    agent = agent_eval.train(standard(x), label, menu=names, seed=seed, epochs=epochs)
    choice = agent_eval.predict(agent, standard(xt))
  n = np.arange(len(choice))
  a = per_question(aic_t[n, choice], q_t)
  f = per_question(aic_t[:, fixed], q_t)
  d = per_question(aic_t[:, 0], q_t)
  o = per_question(aic_t.max(axis=1), q_t)
  return {"agent": a, "fixed": f, "default": d, "oracle": o, "fixed_name": names[fixed],
          "choices": {names[k]: int((choice == k).sum()) for k in range(len(names))},
          "labels": {names[k]: int((label == k).sum()) for k in range(len(names))},
          "requests": int(len(choice)),
          "vs_fixed": context_eval.ci(a, f, n_resamples=n_resamples)._asdict(),
          "vs_default": context_eval.ci(a, d, n_resamples=n_resamples)._asdict(),
          "entries": {names[k]: float(aic_t[:, k].mean() * 100) for k in range(len(names))}}


def evaluate(data: dict, *, entries: tuple = tuple(range(len(MENU))),
             inputs: tuple = ("query", "request"), chooser: str = "agent", epochs: int = 60,
             n_resamples: int = 10_000) -> dict:
  """The leave-one-dataset-out folds, pooled, and the HotpotQA test fold."""
  kw = dict(entries=entries, inputs=inputs, chooser=chooser, epochs=epochs,
            n_resamples=n_resamples)
  rows, pooled = {}, {k: [] for k in ("agent", "fixed", "default", "oracle")}
  for label, name in GROUPS.items():
    r = fold([data[s] for s in GROUPS.values() if s != name], data[name], **kw)
    rows[label] = r
    for k in pooled:
      pooled[k].append(r[k])
  if TEST in data:
    rows["HotpotQA test"] = fold([data[s] for s in GROUPS.values()], data[TEST], **kw)
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
  held = [k for k in rows if "entries" in rows[k]]
  names = list(rows[held[0]]["entries"])
  lines = [f"| held out (questions) | agent | best fixed on training | default ({_entry(names[0])}) "
           "| Δ agent − fixed | Δ agent − default | menu oracle |",
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
  lines += ["", "| entry (granularity, scorer, iterations) | " + " | ".join(held) + " |",
            "|---" * (1 + len(held)) + "|"]
  for i, n in enumerate(names):
    lines.append(f"| {_entry(n)}{' (the default)' if i == 0 else ''} | " +
                 " | ".join(f"{rows[k]['entries'][n]:.1f}" for k in held) + " |")
  return lines
