"""The configuration agent over real alternatives (issue 36, part 3): per request, granularity,
scorer and iterations, from the query embedding plus the request's own features.

A *request* is one question in one form (titled or untitled whole paragraphs, as the adapters
send them) at one budget (128 / 256 / 384 tokens). The menu (`MENU`) crosses the granularity
(`"passage"`, `"sentence"`), the CORAG scorer (`learned_hops`, `bridge`) and the iterations (15,
45); its first entry is what `Pipeline(enc)` does. Every entry runs on every request through
`Pipeline.select`, scored by `granularity_eval.question_metrics`: answer in context (`aic`, the
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
dataset (`--weights`, as in `granularity_eval`). Reported: answer in context of the agent, the
best fixed entry and the default, each question's mean over its requests, paired bootstrap 95%
CIs over questions; the menu oracle (the best entry per request) is the ceiling of any agent.

    python -m training agent-menu --limit 100 \\
        --weights 2wiki=out/gran/no_2wiki.safetensors,musique=out/gran/no_musique.safetensors
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from training import agent_eval, context_eval, granularity_eval as ge, hop_features  # noqa: E402
from training.files import atomic_savez, atomic_write  # noqa: E402

# (granularity, scorer, iterations); the first is Pipeline(enc)'s default.
MENU = tuple((g, s, it) for it in (15, 45) for s in ("learned_hops", "bridge")
             for g in ("passage", "sentence"))
NAMES = tuple(f"{g}/{s}/{it}" for g, s, it in MENU)
GROUPS = {"HotpotQA-hard": "hotpot_hard", "MuSiQue": "musique", "2Wiki": "2wiki"}
TEST = "hotpot_test"
FORMS = ("titled", "untitled")
BUDGETS = ge.BUDGETS
METRICS = ("aic", "sf", "para")
REQUEST_FEATURES = ("log2 budget / 256", "titled", "log paragraphs", "log mean paragraph tokens",
                    "log total tokens / budget")
CACHE = os.path.join(ROOT, "out", "agent_menu")


def request_features(passages, budget: float, titled: bool) -> np.ndarray:
  """`REQUEST_FEATURES` of one request `[F]`."""
  tokens = np.asarray([p.tokens for p in passages], np.float64)
  return np.asarray([np.log2(budget / 256.0), float(titled), np.log(len(passages)),
                     np.log(tokens.mean()), np.log(tokens.sum() / budget)], np.float32)


def run_set(name: str, form: str, *, base, cache: str, limit, weights=None, log=print) -> dict:
  """Every menu entry on every request of set `name` in `form` (`granularity_eval.run_set`):
  `{metric: [Q, K, B]}`, the query embeddings `[Q, D]` and request features `[Q, B, F]`."""
  menu = {n: ({"method": "corag", "corag_scorer": s, "iterations": it}, g)
          for n, (g, s, it) in zip(NAMES, MENU)}
  res = ge.run_set(name, form, base=base, cache=cache, limit=limit, weights=weights, menu=menu,
                   log=log)
  if res["over"]:
    raise AssertionError(f"{name} {form}: {res['over']} selections over their budget")
  per = res["per_question"]
  out = {m: np.asarray([[per[n][b][m] for b in BUDGETS] for n in NAMES], np.float32).transpose(2, 0, 1)
         for m in METRICS}  # [Q, K, B]
  examples = hop_features.load_examples(name, limit=limit)
  enc = ge.encoder_for(name, form, base, cache)
  feats = np.asarray([[request_features(hop_features.paragraph_passages(ex, form, enc.tokenizer), b,
                                        form == "titled") for b in BUDGETS] for ex in examples])
  query = enc.encode([ex.question for ex in examples], prompt_name="query")
  return {**out, "query": np.asarray(query, np.float32), "features": feats}


def outcomes(name: str, *, base, cache: str, limit, weights=None, embeddings: str = ge.CACHE,
             log=print) -> dict:
  """`run_set` over `FORMS`, requests stacked `[Q, R]` (R = forms × budgets: each question's
  requests side by side), kept in `cache` per set, weights and jaxsel source; the texts'
  embeddings in `embeddings` (shared with `granularity_eval`)."""
  path = os.path.join(cache, f"menu_{name}_{limit}.npz")
  stamp = json.dumps({"weights": weights or "shipped", "menu": NAMES,
                      "jaxsel_source": context_eval.code_fingerprint()})
  if os.path.exists(path):
    data = dict(np.load(path))
    if str(data.pop("stamp")) == stamp:
      return data
  runs = [run_set(name, f, base=base, cache=embeddings, limit=limit, weights=weights, log=log)
          for f in FORMS]
  data = {m: np.concatenate([r[m] for r in runs], axis=2) for m in METRICS}  # [Q, K, R]
  data["features"] = np.concatenate([r["features"] for r in runs], axis=1)  # [Q, R, F]
  data["query"] = runs[0]["query"]
  os.makedirs(cache, exist_ok=True)
  atomic_savez(path, stamp=np.asarray(stamp), **data)
  return data


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


def markdown(rows: dict) -> list:
  """The table of `evaluate`'s rows (answer in context, %)."""
  lines = ["| held out (questions) | agent | best fixed (on training) | default | Δ agent − fixed [CI] "
           "| Δ agent − default [CI] | menu oracle | agent's choices |",
           "|---|---|---|---|---|---|---|---|"]
  for name, r in rows.items():
    choices = ", ".join(f"{k} {v}" for k, v in r.get("choices", {}).items() if v)
    lines.append(f"| {name} ({len(r['agent'])}) | {r['agent'].mean() * 100:.1f} | "
                 f"{r['fixed'].mean() * 100:.1f} ({r['fixed_name']}) | {r['default'].mean() * 100:.1f} | "
                 f"{context_eval.fmt_ci(r['vs_fixed'])} | {context_eval.fmt_ci(r['vs_default'])} | "
                 f"{r['oracle'].mean() * 100:.1f} | {choices} |")
  return lines


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--limit", type=int, default=100, help="first N questions of each set")
  p.add_argument("--weights", default="", help="SET=path,...: learned weights trained without SET")
  p.add_argument("--epochs", type=int, default=60)
  p.add_argument("--resamples", type=int, default=10_000)
  p.add_argument("--cache", default=CACHE, help="where the menu's outcomes are kept")
  p.add_argument("--embeddings", default=ge.CACHE, help="embedding caches (granularity's)")
  p.add_argument("--out", default=os.path.join(CACHE, "agent_menu.json"))
  args = p.parse_args(argv)
  weights = dict(kv.split("=", 1) for kv in args.weights.split(",") if kv)
  base = jaxsel.load_encoder(hop_features.ENCODER)
  data = {s: outcomes(s, base=base, cache=args.cache, limit=args.limit, weights=weights.get(s),
                      embeddings=args.embeddings)
          for s in (*GROUPS.values(), TEST)}
  dim = data[TEST]["query"].shape[1]
  rows = evaluate(data, dim=dim, epochs=args.epochs, n_resamples=args.resamples)
  report = {k: {kk: (vv.tolist() if isinstance(vv, np.ndarray) else vv) for kk, vv in r.items()}
            for k, r in rows.items()}
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  atomic_write(args.out, json.dumps(report, indent=1).encode("utf-8"))
  print("\n".join(markdown(rows)))
  for name, r in rows.items():
    if "entries" in r:
      print(name, "entries (aic %):", {k: round(v, 1) for k, v in r["entries"].items()})
  return 0


if __name__ == "__main__":
  sys.exit(main())
