"""One evaluation loop for the quality commands: a grid -> stored runs -> one report.

A `Grid` (the commands' grids are declared in `training/grids.py`) names question sets,
candidate forms, budgets and configurations; `run` selects, for every question of every cell,
with each configuration at each budget, scores the picks with the grid's metric function and
stores them; the command's report (`training/reports.py`) reads the per-question values.

Forms (`FORMS`): ``"titled"`` / ``"untitled"``: each paragraph of a question one `jaxsel.Passage`
(`hop_features.paragraph_passages`: ``"title: paragraph"`` with `Passage.title`, or the bare
paragraph; costs in all-MiniLM-L6-v2's word pieces); ``"split"``: each ``"title: paragraph"``
given as a document string, which the Pipeline splits (pieces of at most 128 word pieces) and
whose context as sent, numbers and blank lines included, the budget holds.

Configurations (`Config`): Pipeline settings (`Pipeline.replace`) and a granularity, passed to
`select` only when set (None: whatever the library's default is, as a user who passes none
gets), or a named selection function (`Config.select`, e.g. a framework adapter). With weights
for a set (`run(..., weights={set: path})`, a learned scorer trained without that set), every
configuration that searches with the learned scorer (`learned_hops`, named or the Pipeline's
default) uses them.

Runs: per command, set and form one JSON file in `store` (`Runs`: per configuration its stamp
and `{budget: {question id: {"picks", "metrics", "ms"}}}`, `picks` as `[doc, start, end,
tokens]`), written atomically; a cell stored under the same stamp (the settings, the weights'
SHA-256, jaxsel's source) is skipped, so a rerun resumes and a wider `--limit` adds questions.

Shape legend: Q questions.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import types
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import jax
import numpy as np

import jaxsel
from jaxsel.contrib import hop_scorer as hops
from training import context_eval, evaluation, hop_features, qa, qa_sets
from training.embedding_cache import CachedEncoder
from training.files import atomic_write, file_sha256

SPLIT = "split"
FORMS = hop_features.FORMS + (SPLIT,)
BUDGETS = (128, 256, 384)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORE = os.path.join(ROOT, "out", "runs")
NONE = types.MappingProxyType({})
# Sets with sentence labels: their raw files (a JSONL file set is its own raw file).
RAW = {"hotpot_hard": hop_features.HARD, "2wiki": qa_sets.FILES["2wiki"]}


class Config(NamedTuple):
  """One configuration of a grid."""
  name: str
  label: str
  settings: Mapping = NONE  # Pipeline settings (`Pipeline.replace`)
  granularity: Optional[str] = None  # passed to `select` when set
  # A selection function instead of the Pipeline: `select(encoder) -> fn(questions, budget)`,
  # `fn` giving per question `(picks, context, extra metrics)`.
  select: Optional[Callable] = None
  every: int = 1  # run on every `every`-th question only (NaN elsewhere)


class Grid(NamedTuple):
  """Sets x forms x budgets x configurations, scored by `metrics(question, picks, context,
  budget) -> {metric: value}`; embeddings cached in `cache`; `settings` apply to every
  configuration's Pipeline (e.g. CORAG's widening)."""
  command: str
  sets: tuple
  forms: tuple
  budgets: tuple
  configs: tuple  # of Config
  metrics: Callable
  cache: str
  settings: Mapping = NONE

  def only(self, names: Sequence[str]) -> "Grid":
    """The grid with the configurations `names` only (in the grid's order)."""
    unknown = set(names) - {c.name for c in self.configs}
    if unknown:
      raise ValueError(f"unknown configuration(s) {sorted(unknown)}; use {[c.name for c in self.configs]}")
    return self._replace(configs=tuple(c for c in self.configs if c.name in names))


class Question(NamedTuple):
  """One question of a set in one form."""
  example: qa.QAExample
  passages: list  # [N] Passage: the paragraphs in the form ("titled" for "split")
  source: list  # what `select` receives: `passages`, or their texts for "split"
  facts: Optional[list]  # per supporting fact [(paragraph, start, end), ...]; None: no labels
  pieces: list  # [[doc, start, end, tokens], ...] of the candidates as the Pipeline sees them


# ----------------------------------------------------------------------------- questions


def _joined_spans(sentences) -> tuple:
  """(paragraph, [(start, end)] of each sentence in it), joined as `qa._join_sentences` joins."""
  out, spans = "", []
  for s in sentences:
    if out and not s.startswith(" ") and not out.endswith(" "):
      out += " "
    spans.append((len(out), len(out) + len(s)))
    out += s
  lead = len(out) - len(out.lstrip())
  text = out.strip()
  fixed = []
  for a, b in spans:
    a, b = max(a - lead, 0), min(b - lead, len(text))
    while a < b and text[a].isspace():
      a += 1
    while b > a and text[b - 1].isspace():
      b -= 1
    fixed.append((a, b))
  return text, fixed


def supporting_spans(name: str, examples, form: str) -> list:
  """Per question, `[[(paragraph, start, end), ...] per supporting fact]` (a fact's sentence in
  every paragraph of its title, offsets in the passage text of `form`); None for a set without
  sentence labels. Facts naming a sentence a paragraph does not have are left out. A file set
  (`qa_sets.is_file`) has sentence labels where its lines are in the HotpotQA / 2Wiki format
  (`context` sentences and `supporting_facts`)."""
  if qa_sets.is_file(name):
    path = name
  elif name in RAW:
    path = os.path.join(qa_sets.DATA_ROOT, RAW[name])
  else:
    return [None] * len(examples)
  raw = {}
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, 1):  # ids as `qa.load_qa_jsonl` gives them
      if line.strip():
        obj = json.loads(line)
        raw[qa.parse_example(obj, line_no, path).id] = obj
  out = []
  for ex in examples:
    obj = raw[ex.id]
    if "context" not in obj or "supporting_facts" not in obj:
      out.append(None)
      continue
    facts = []
    for title, sid in obj["supporting_facts"]:
      where = []
      for i, (t, sents) in enumerate(obj["context"]):
        if t != title or not 0 <= sid < len(sents):
          continue
        text, spans = _joined_spans(sents)
        assert text == ex.passages[i], (ex.id, i)
        a, b = spans[sid]
        shift = len(f"{t}: ") if form == "titled" and ex.titles[i] else 0
        if b > a:
          where.append((i, a + shift, b + shift))
      if where:
        facts.append(where)
    out.append(facts)
  return out


def encoder_for(name: str, form: str, base, cache: str) -> CachedEncoder:
  """A `CachedEncoder` in `cache`, started from the paragraph embeddings other evaluations
  cached (`out/hops`) when there are some."""
  path = os.path.join(cache, f"emb_{qa_sets.cache_tag(name)}_{form}.npz")
  seed = os.path.join(hop_features.CACHE, os.path.basename(path))
  if not os.path.exists(path) and os.path.exists(seed):
    os.makedirs(cache, exist_ok=True)
    shutil.copyfile(seed, path)
  return CachedEncoder(base, path)


def questions(name: str, form: str, *, encoder, pipe, limit: Optional[int] = None) -> list:
  """The first `limit` questions of set `name` in `form` (see the module docstring)."""
  examples = hop_features.load_examples(name, limit=limit)
  paragraphs = "titled" if form == SPLIT else form
  facts = supporting_spans(name, examples, paragraphs)
  out = []
  for ex, f in zip(examples, facts):
    passages = hop_features.paragraph_passages(ex, paragraphs, encoder.tokenizer)
    source = [p.text for p in passages] if form == SPLIT else passages
    pieces = context_eval.pieces_of(pipe.split(source) if form == SPLIT else passages)
    out.append(Question(ex, passages, source, f, pieces))
  return out


# ----------------------------------------------------------------------------- metrics


def span_metrics(q: Question, picks, context: str, budget: float) -> dict:
  """``sf`` supporting-fact joint recall (every supporting sentence wholly inside a sent piece;
  NaN for a set without sentence labels), ``aic`` the gold answer occurs in the context as
  sent (`evaluation.answer_in_context`, NaN for yes/no), ``para`` paragraph joint recall (every
  gold paragraph has a piece in the context), ``whole`` (every gold paragraph sent whole) and
  ``tokens`` (the picks' own)."""
  del budget
  gold = [i for i, g in enumerate(q.example.gold) if g]
  docs = {p.doc for p in picks}
  whole = {p.doc for p in picks if p.start == 0 and p.end == len(q.passages[p.doc].text)}

  def covered(fact):
    return any(p.doc == i and p.start <= a and p.end >= b for p in picks for i, a, b in fact)

  return {"sf": float("nan") if q.facts is None else float(all(covered(f) for f in q.facts)),
          "aic": evaluation.answer_in_context(context, q.example.answers),
          "para": float(all(d in docs for d in gold)),
          "whole": float(all(d in whole for d in gold)),
          "tokens": float(sum(p.tokens for p in picks))}


def piece_metrics(q: Question, picks, context: str, budget: float) -> dict:
  """`context_eval.question_metrics` (``joint``, ``strict``, ``recall``, ``aic``, ``tokens``)
  and ``oracle``: whole gold paragraphs, cheapest first, fit in `budget`."""
  del context
  row = context_eval.question_metrics(q.example, _records(picks), q.pieces)
  row["oracle"] = context_eval.oracle_joint(q.example, q.pieces, budget, level="paragraph")
  return row


def _records(picks) -> list:
  return [[int(p.doc), int(p.start), int(p.end), int(p.tokens)] for p in picks]


# ----------------------------------------------------------------------------- configurations


def _learned(settings: Mapping, pipe) -> bool:
  """Whether a configuration searches with the learned scorer."""
  method = settings.get("method", pipe.config.method)
  return method in (None, "corag") and \
      settings.get("corag_scorer", pipe.config.corag_scorer) == "learned_hops"


def pipeline_select(pipe, granularity: Optional[str]) -> Callable:
  """`fn(questions, budget)` of a Pipeline: `select` for one question, `select_many` (the same
  picks) for several."""
  kw = {} if granularity is None else {"granularity": granularity}

  def fn(qs, budget):
    if len(qs) == 1:
      results = [pipe.select(qs[0].example.question, qs[0].source, budget=budget, **kw)]
    else:
      results = pipe.select_many([(q.example.question, q.source) for q in qs], budget=budget, **kw)
    return [(r.passages, r.context(numbered=False), {}) for r in results]

  return fn


def _stamp(cfg: Config, grid: Grid, weights: Optional[str]) -> str:
  settings = {**grid.settings, **cfg.settings}
  scorer = settings.get("corag_scorer")
  return json.dumps({"settings": settings, "granularity": cfg.granularity,
                     "select": cfg.select is not None, **context_eval.scorer_settings(scorer),
                     "weights": None if weights is None else file_sha256(weights),
                     "jaxsel_source": context_eval.code_fingerprint()}, sort_keys=True, default=str)


class Runs:
  """The stored runs of one command, set and form (see the module docstring)."""

  FORMAT = "jaxsel-runs/1"

  def __init__(self, path: str, stamps: Mapping[str, str]):
    self.path = path
    self.data = {"format": self.FORMAT, "configs": {}}
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        data = json.load(f)
      if data.get("format") != self.FORMAT:
        raise ValueError(f"{path} is not a {self.FORMAT} file; delete it or choose another --store.")
      self.data = data
    for name, stamp in stamps.items():  # a configuration run otherwise is run again
      entry = self.data["configs"].get(name)
      if entry is None or entry["stamp"] != stamp:
        self.data["configs"][name] = {"stamp": stamp, "runs": {}}

  def get(self, config: str, budget, qid: str) -> Optional[dict]:
    return self.data["configs"][config]["runs"].get(str(budget), {}).get(qid)

  def put(self, config: str, budget, qid: str, record: dict) -> None:
    self.data["configs"][config]["runs"].setdefault(str(budget), {})[qid] = record

  def save(self) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
    atomic_write(self.path, json.dumps(self.data).encode("utf-8"))


# ----------------------------------------------------------------------------- the loop


def _log(msg: str) -> None:
  print(msg, flush=True)


def run_cell(grid: Grid, name: str, form: str, *, base, limit: Optional[int] = None,
             weights: Optional[str] = None, store: str = STORE, batched: bool = False,
             save_every: int = 20, log=_log) -> dict:
  """Every configuration at every budget on the first `limit` questions of set `name` in
  `form`: `{"n", "ids", "over", "weights", "per_question": {config: {budget: {metric: [Q]}}},
  "picks": {config: {budget: [Q] picks}}}` (NaN / None where a configuration skips a
  question); `over` counts the selections above their budget. `batched`: each cell's
  questions in one `select_many` (the same picks as `select`)."""
  enc = encoder_for(name, "titled" if form == SPLIT else form, base, grid.cache)
  pipe = jaxsel.Pipeline(enc, cache_size=64).replace(**grid.settings)
  qs = questions(name, form, encoder=enc, pipe=pipe, limit=limit)
  scorer = hops.learned_hops_builder(hops.load_hop_params(weights)) if weights else None
  select, stamps = {}, {}
  for cfg in grid.configs:
    if cfg.select is not None:
      select[cfg.name], used = cfg.select(enc), None
    else:
      settings, used = dict(cfg.settings), None
      if scorer is not None and _learned(settings, pipe):
        settings["corag_scorer"], used = scorer, weights
      select[cfg.name] = pipeline_select(pipe.replace(**settings), cfg.granularity)
    stamps[cfg.name] = _stamp(cfg, grid, used)
  runs = Runs(os.path.join(store, f"{grid.command}_{qa_sets.cache_tag(name)}_{form}.json"), stamps)
  t0, every = time.time(), {c.name: max(c.every, 1) for c in grid.configs}
  size, indexed = (max(len(qs), 1) if batched else 1), list(enumerate(qs))
  for start in range(0, len(qs), size):
    group = indexed[start:start + size]
    for cfg in grid.configs:
      for b in grid.budgets:
        todo = [q for i, q in group if i % every[cfg.name] == 0 and
                runs.get(cfg.name, b, q.example.id) is None]
        if not todo:
          continue
        t = time.perf_counter()
        picked = select[cfg.name](todo, b)
        ms = (time.perf_counter() - t) * 1000 / len(todo)
        for q, (picks, context, extra) in zip(todo, picked):
          for p in picks:
            assert q.passages[p.doc].text[p.start:p.end] == p.text, (q.example.id, p)
          runs.put(cfg.name, b, q.example.id, {
              "picks": _records(picks), "ms": ms,
              "metrics": {**grid.metrics(q, picks, context, b), **extra}})
    if batched or start % save_every == save_every - 1:
      enc.save()
      runs.save()
      log(f"  {name} {form}: {start + len(group)} questions, {time.time() - t0:.0f}s")
  enc.save()
  runs.save()
  log(f"{name} {form}: {len(qs)} questions in {time.time() - t0:.0f}s")
  return _collect(grid, runs, [q.example.id for q in qs], weights)


def _collect(grid: Grid, runs: Runs, ids: list, weights: Optional[str]) -> dict:
  per, picks, over = {}, {}, 0
  for cfg in grid.configs:
    per[cfg.name], picks[cfg.name] = {}, {}
    for b in grid.budgets:
      rows = [runs.get(cfg.name, b, i) for i in ids]
      keys = next((list(r["metrics"]) for r in rows if r is not None), [])
      per[cfg.name][b] = {k: [np.nan if r is None else r["metrics"][k] for r in rows] for k in keys}
      per[cfg.name][b]["ms"] = [np.nan if r is None else r["ms"] for r in rows]
      picks[cfg.name][b] = [None if r is None else r["picks"] for r in rows]
      over += sum(int(r is not None and sum(p[3] for p in r["picks"]) > b) for r in rows)
  return {"n": len(ids), "ids": ids, "over": over, "weights": weights or "shipped",
          "per_question": per, "picks": picks}


def run(grid: Grid, *, base, limits: Optional[Mapping] = None, weights: Optional[Mapping] = None,
        store: str = STORE, batched: bool = False, log=_log) -> dict:
  """`run_cell` over the grid's sets and forms: `{"set:form": cell}`. `limits`: `{set: N}`,
  `"*"` for every other set; `weights`: `{set: path}`."""
  limits, weights = limits or {}, weights or {}
  out = {}
  for name in grid.sets:
    for form in grid.forms:
      out[f"{name}:{form}"] = run_cell(grid, name, form, base=base, store=store, batched=batched,
                                       limit=limits.get(name, limits.get("*")),
                                       weights=weights.get(name), log=log)
      # Every cell compiles its own programs (its scorer's weights, its requests' shapes), and
      # XLA:CPU keeps each one's code mapped (~30 memory maps) while JAX's caches hold it: a
      # whole grid in one process passed Linux's 65,530 maps and crashed. Freed per cell.
      jax.clear_caches()
  return out


def means_lines(results: Mapping) -> list:
  """The means (%) of every configuration, budget and metric: a probe's output."""
  lines = []
  for key, r in results.items():
    for m, per in r["per_question"].items():
      for b, row in per.items():
        cells = ", ".join(f"{k} {np.nanmean(np.asarray(v, float)) * 100:.1f}" for k, v in row.items()
                          if k not in ("ms", "tokens") and np.isfinite(np.asarray(v, float)).any())
        lines.append(f"{key} {m} {b}: {cells}")
  return lines


def paired_lines(results: Mapping, a: str, b: str) -> list:
  """Configuration `a` minus `b` per cell, budget and metric over the questions both ran
  (mean and paired bootstrap 95% CI, in points): a probe of two configurations' output."""
  lines = []
  for key, r in results.items():
    per = r["per_question"]
    for budget in per[a]:
      cells = []
      for k, va in per[a][budget].items():
        if k in ("ms", "tokens") or k not in per[b][budget]:
          continue
        iv = evaluation.paired_bootstrap(va, per[b][budget][k])
        if np.isfinite(iv.mean):
          cells.append(f"{k} {iv.mean * 100:+.1f} [{iv.low * 100:+.1f}, {iv.high * 100:+.1f}]")
      lines.append(f"{key} {budget}: {a} - {b}: {', '.join(cells)}")
  return lines
