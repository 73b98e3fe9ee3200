"""The reports of the grids (`training/grids.py`): a summary (means in %, paired bootstrap 95%
CIs of differences over questions, `context_eval.ci`) and the markdown tables of
training/RESULTS.md, from `runner.run`'s results (`{"set:form": {"n", "weights",
"per_question": {config: {budget: {metric: [Q]}}}, "picks", ...}}`)."""

from __future__ import annotations

import numpy as np

from training import context_eval, hop_features

ci, fmt_ci = context_eval.ci, context_eval.fmt_ci


def _better(values: dict, names) -> str:
  """Of the configurations `names`, the one whose `values` (`[Q]` each) have the higher mean
  (the first on a tie)."""
  return max(names, key=lambda m: np.nanmean(values[m]))


# ----------------------------------------------------------------------------- granularity

GRAN_LABELS = {"hotpot_hard": "HotpotQA-hard", "2wiki": "2Wiki", "musique": "MuSiQue",
               "hotpot_test": "HotpotQA test"}
GRAN_METRICS = {"sf": "supporting-fact joint", "aic": "answer in context",
                "para": "paragraph joint", "whole": "gold paragraphs whole"}
GRAN_COLUMNS = {"naive_p": "NaiveRAG ¶", "naive_s": "NaiveRAG sentences", "default_p": "default ¶",
                "default_s": 'default, `"sentence"`'}
NAIVE, DEFAULTS = ("naive_p", "naive_s"), ("default_p", "default_s")


def granularity_summary(per_question: dict, budgets) -> dict:
  """Per budget and metric: the means (%) of the configurations, each default's difference
  from the better NaiveRAG (by that metric's mean) and, with the default as users call it
  (``default``), its difference from the better of ``default_p`` / ``default_s``."""
  out = {}
  for b in budgets:
    row = {}
    for k in GRAN_METRICS:
      v = {m: np.asarray(per_question[m][b][k], float) for m in per_question}
      if not np.isfinite(v["naive_p"]).any():
        continue
      best = _better(v, NAIVE)
      row[k] = {m: float(np.nanmean(x) * 100) for m, x in v.items()}
      row[k]["best_naive"] = best
      for m in DEFAULTS + ("default",):
        if m in v:
          row[k][m + "_diff"] = ci(v[m], v[best])._asdict()
      if "default" in v:
        bd = row[k]["best_default"] = _better(v, DEFAULTS)
        row[k]["default_vs_best"] = ci(v["default"], v[bd])._asdict()
    out[str(b)] = row
  return out


def _gran_set(name: str, r: dict, each: bool) -> str:
  label = GRAN_LABELS.get(name) or hop_features.label(name)
  label += " (LOO)" if r.get("weights", "shipped") != "shipped" else ""
  return label if each else f"{label} ({r['n']})"


def granularity_markdown(report: dict) -> list:
  """One table per metric (supporting-fact joint, answer in context, paragraph joint) of the
  four configurations by set, form and budget, Δ: the default at sentence granularity minus
  the better NaiveRAG; then, when it ran, the default as users call it against the better
  granularity of the default and the better NaiveRAG."""
  ns = {r["n"] for r in report.values()}
  each = len(ns) == 1
  qs = f"%, {ns.pop()} questions each" if each else "%"
  lines = []
  for k in ("sf", "aic", "para"):
    rows = [(key, r, b, row[k]) for key, r in report.items() for b, row in r["summary"].items()
            if k in row]
    if not rows:
      continue
    lines += [f"**{GRAN_METRICS[k]}** ({qs}):", "",
              "| set | form | budget | " + " | ".join(GRAN_COLUMNS.values()) +
              " | Δ vs better NaiveRAG |", "|---" * 8 + "|"]
    for key, r, b, c in rows:
      name, form = key.split(":")
      lines.append(f"| {_gran_set(name, r, each)} | {form} | {b} | " +
                   " | ".join(f"{c[m]:.1f}" for m in GRAN_COLUMNS) +
                   f" | {fmt_ci(c['default_s_diff'])} |")
    lines.append("")
  rows = [(key, r, b, k, row[k]) for key, r in report.items() for b, row in r["summary"].items()
          for k in ("sf", "aic", "para") if k in row and "default" in row[k]]
  if rows:
    short = {"naive_p": "¶", "naive_s": "sent.", "default_p": "¶", "default_s": "sent."}
    lines += ["**The default as users call it** (`Pipeline(enc).select(question, passages, "
              f"budget=B)`, no method, no granularity; {qs}), against the better granularity of the "
              "default and the better NaiveRAG on that metric:", "",
              "| set | form | budget | metric | default | better default | Δ vs it | "
              "better NaiveRAG | Δ vs it |", "|---" * 9 + "|"]
    for key, r, b, k, c in rows:
      name, form = key.split(":")
      bd, bn = c["best_default"], c["best_naive"]
      lines.append(f"| {_gran_set(name, r, each)} | {form} | {b} | {GRAN_METRICS[k]} | "
                   f"{c['default']:.1f} | {short[bd]} {c[bd]:.1f} | {fmt_ci(c['default_vs_best'])} | "
                   f"{short[bn]} {c[bn]:.1f} | {fmt_ci(c['default_diff'])} |")
    lines.append("")
  return lines


# ----------------------------------------------------------------------------- forms

FORM_LABELS = {"titled": "titled", "untitled": "no titles", "split": "split documents"}


def forms_summary(cell: dict, budgets, *, n_resamples: int = 10_000) -> dict:
  """Strict joint recall (%) per budget and configuration, its difference from NaiveRAG, joint
  recall of any piece (``_any``) beside it, the median ms per call and the oracle's room."""
  out = {"n": cell["n"]}
  per = cell["per_question"]
  for b in budgets:
    naive = per["naive"][b]
    row = {"naive": float(np.mean(naive["strict"]) * 100),
           "naive_any": float(np.mean(naive["joint"]) * 100),
           "oracle_room": float((np.mean(naive["oracle"]) - np.mean(naive["strict"])) * 100)}
    for m in per:
      if m == "naive":
        continue
      p = per[m][b]
      row[m], row[m + "_any"] = float(np.mean(p["strict"]) * 100), float(np.mean(p["joint"]) * 100)
      row[m + "_diff"] = ci(p["strict"], naive["strict"], n_resamples=n_resamples)._asdict()
      row[m + "_any_diff"] = ci(p["joint"], naive["joint"], n_resamples=n_resamples)._asdict()
      row[m + "_ms"] = float(np.median(p["ms"]))
    out[str(b)] = row
  return out


def forms_markdown(report: dict, budgets, labels: dict) -> list:
  """One table per budget: a row per set and form, strict joint recall (every gold paragraph
  picked whole) of NaiveRAG, each configuration's Δ vs NaiveRAG [95% CI] (for split documents
  any-piece joint recall in brackets) and the oracle's room; `labels`: configuration ->
  column."""
  lines = []
  for b in budgets:
    ran = [m for m in labels if m != "naive" and any(m in r[str(b)] for r in report.values())]
    lines += [f"Budget {b} tokens, strict joint recall %:", "",
              "| set (questions) | candidates | NaiveRAG | " + " | ".join(
                  f"{labels[m]} Δ" for m in ran) + " | oracle room |", "|---" * (4 + len(ran)) + "|"]
    for key, r in report.items():
      name, form = key.split(":")
      row, split = r[str(b)], form == "split"
      cells = ["–" if m not in row else fmt_ci(row[m + "_diff"]) + (
          f" [any {row[m + '_any']:.1f}, Δ {row[m + '_any_diff']['mean']:+.1f}]" if split else "")
          for m in ran]
      naive = f"{row['naive']:.1f}" + (f" [any {row['naive_any']:.1f}]" if split else "")
      lines.append(f"| {hop_features.label(name)} ({r['n']}) | {FORM_LABELS[form]} | {naive} | "
                   + " | ".join(cells) + f" | {row['oracle_room']:+.1f} |")
    lines.append("")
  return lines


def paired_lines(now: dict, before: dict) -> list:
  """Markdown rows comparing two `--per-question` runs key by key (`SET:FORM:BUDGET:CONFIG`,
  the keys both have, same questions): means, questions gained and lost, paired 95% CI."""
  lines = ["| set | form | budget | configuration | before | now | gained / lost | Δ [95% CI] |",
           "|---|---|---|---|---:|---:|---|---|"]
  for key in now:
    if key not in before:
      continue
    a, b = np.asarray(now[key], float), np.asarray(before[key], float)
    if a.shape != b.shape:
      raise ValueError(f"--against: {key} has {b.shape[0]} questions there, {a.shape[0]} here; "
                       f"run both with the same --limit.")
    name, form, budget, m = key.split(":")
    lines.append(f"| {hop_features.label(name)} | {form} | {budget} | {m} | {b.mean() * 100:.1f} | "
                 f"{a.mean() * 100:.1f} | +{int((a > b).sum())} / -{int((a < b).sum())} | "
                 f"{fmt_ci(ci(a, b))} |")
  return lines


# ----------------------------------------------------------------------------- defaults


def defaults_summary(cell: dict, budget: int, adapters) -> dict:
  """Joint recall (%, a piece of every gold paragraph sent) of each configuration and its
  difference from the better NaiveRAG (`naive`: the configurations named "naive...", the one of
  higher mean) on the questions it ran; the adapters' selections above their budget in the
  encoder's and the second tokenizer's count; `agree`: questions where an adapter picked
  exactly the pieces (paragraphs or runs of their sentences) `Pipeline(enc)` picked."""
  per, picks = cell["per_question"], cell["picks"]
  joint = {m: np.asarray(per[m][budget]["para"], float) for m in per}
  best = max((m for m in per if m.startswith("naive")), key=lambda m: np.nanmean(joint[m]))
  naive = joint[best]
  out = {"n": cell["n"], "naive": float(naive.mean() * 100), "naive_name": best,
         "over_budget": {}, "agree": {}}
  for m in per:
    a = joint[m]
    ran = ~np.isnan(a)
    out[m + "_n"] = int(ran.sum())
    out[m] = float(a[ran].mean() * 100)
    if m != best:
      out[m + "_diff"] = ci(a[ran], naive[ran])._asdict()
  for a in adapters:
    for unit in ("encoder", "second"):
      out["over_budget"][f"{a}:{unit}"] = int(np.nansum(per[a][budget][f"over_{unit}"]))
    out["agree"][a] = sum(int(x is not None and {tuple(p[:3]) for p in x} == {tuple(p[:3]) for p in y})
                          for x, y in zip(picks[a][budget], picks["pipeline"][budget]))
  return out


def defaults_markdown(report: dict, budget: int, labels: dict) -> list:
  lines = [f"Joint recall % at {budget} tokens (whole paragraphs given; a piece of every gold "
           "paragraph sent), Δ vs the better NaiveRAG [95% paired bootstrap CI]; over budget: "
           "adapter selections above their budget in the encoder's / SmolLM2's count.", "",
           "| set (questions) | form | " + " | ".join(labels.values()) + " | over budget |",
           "|---" * (3 + len(labels)) + "|"]
  for key, r in report.items():
    name, form = key.split(":")
    cells = [f"{r[m]:.1f}" + (f" ({fmt_ci(r[m + '_diff'])})" if m + "_diff" in r else "")
             for m in labels]
    first = next((m for m in r["agree"]), None)
    ran = f"; adapters {r[first + '_n']}" if first else ""
    lines.append(f"| {hop_features.label(name)} ({r['n']}{ran}) | {form} | " + " | ".join(cells)
                 + f" | {sum(r['over_budget'].values())} |")
  return lines
