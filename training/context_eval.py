"""Context selection through `jaxsel.Pipeline`, scored against the gold paragraphs.

Plain Python and NumPy around the Pipeline. Each question's paragraphs are its documents
(`"title: paragraph"`, `qa_sets.documents`); the Pipeline splits them into passages (long
paragraphs into several pieces) and selects within the budget, exactly as a user's
`pipe.select(question, documents, budget=B)`. A pick is recorded as `[doc, start, end, tokens]`
of its `Passage`.

Metrics per question (`question_metrics`), over the gold paragraphs:

* `recall`: the fraction of gold paragraphs with at least one picked piece (`Passage.doc`);
* `joint`: 1 when every gold paragraph has a picked piece (the primary metric);
* `strict`: 1 when every piece of every gold paragraph is picked;
* `aic`: an answer string occurs in the picked text (`evaluation.answer_in_context`; NaN for
  yes/no answers);
* `tokens`: the tokens picked.

Oracles (`oracle_joint`): whole gold paragraphs, cheapest first, while they fit
(`"paragraph"`), or the cheapest piece of each gold paragraph (`"piece"`).

`batched_select` runs many questions through `Pipeline.select_many` (one `jax.vmap`-ed solve
per shape bucket), for the sweeps of the cross-dataset runs and the agent; it gives `select`'s
picks (tested).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import time
from typing import Callable, Dict, Optional, Sequence

import numpy as np

import jaxsel
from training import evaluation, qa_sets
from training.files import atomic_write
from training.qa import QAExample

BUDGETS = (128, 256, 384)
METRICS = ("joint", "strict", "recall", "aic", "tokens")

# name -> (label, Pipeline settings). "old_default" is the CORAG default before the bridge
# scorer; "mentions_links" the title-link scorer of the registry (no top-up, as it was).
METHODS = {
    "naive": ("NaiveRAG", {"method": "naive"}),
    "old_default": ("CORAG old default (facility location, 16 it, c 2.4, λ 0.1)",
                    {"method": "corag", "corag_scorer": "facility_location", "iterations": 16,
                     "exploration": 2.4, "cost_penalty": 0.1, "top_up": False}),
    "mentions_links": ("CORAG mentions_links (no top-up)",
                       {"method": "corag", "corag_scorer": "mentions_links", "top_up": False}),
    # The CORAG default of these runs (the Pipeline's default scorer is now "learned_hops").
    "default": ("**CORAG default (bridge + top-up)**", {"method": "corag", "corag_scorer": "bridge"}),
}


def pipelines(base, names: Sequence[str]) -> dict:
  """`{name: Pipeline}` for the methods `names`, copies of `base` sharing its embedding cache."""
  return {m: base.replace(**METHODS[m][1]) for m in names}


# ----------------------------------------------------------------------------- metrics


def pieces_of(passages) -> list:
  """`[[doc, start, end, tokens], ...]` of a question's candidate `Passage`s."""
  return [[int(p.doc), int(p.start), int(p.end), int(p.tokens)] for p in passages]


def question_metrics(example: QAExample, picks, pieces) -> dict:
  """The metrics of one question's `picks` (`[[doc, start, end, tokens], ...]`) given all its
  candidate `pieces` (same form)."""
  gold = [d for d, g in enumerate(example.gold) if g]
  picked_docs = {p[0] for p in picks}
  picked = {(p[0], p[1]) for p in picks}
  recall = sum(d in picked_docs for d in gold) / len(gold) if gold else 1.0
  strict = all((p[0], p[1]) in picked for p in pieces if p[0] in set(gold))
  docs = qa_sets.documents(example)
  context = "\n\n".join(docs[p[0]][p[1]:p[2]] for p in picks)
  return {"joint": float(recall == 1.0), "strict": float(strict), "recall": float(recall),
          "aic": evaluation.answer_in_context(context, example.answers),
          "tokens": float(sum(p[3] for p in picks))}


def oracle_joint(example: QAExample, pieces, budget: float, *, level: str) -> float:
  """Joint recall of the oracle at `level` (`"paragraph"` or `"piece"`) within `budget`."""
  gold = [d for d, g in enumerate(example.gold) if g]
  costs = []
  for d in gold:
    c = [p[3] for p in pieces if p[0] == d]
    costs.append(sum(c) if level == "paragraph" else min(c))
  spent, fit = 0.0, 0
  for c in sorted(costs):
    if spent + c <= budget:
      spent += c
      fit += 1
  return float(fit == len(gold))


# ----------------------------------------------------------------------------- the Pipeline path


def source_hash(root: str) -> str:
  """SHA-256 of the `.py` files and C++ sources under `root`, with their relative paths."""
  h = hashlib.sha256()
  for dirpath, dirnames, files in os.walk(root):
    dirnames.sort()
    for f in sorted(files):
      if f.endswith((".py", ".cc", ".cpp", ".h")):
        path = os.path.join(dirpath, f)
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as fh:
          h.update(fh.read() + b"\0")
  return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
  """`source_hash` of the jaxsel package (its native kernels' sources included): a stored run
  is stale once the library that made it changes."""
  return source_hash(os.path.dirname(os.path.abspath(jaxsel.__file__)))


class RunStore:
  """Picks and timings of Pipeline runs for one question set, in a JSON file written atomically
  (resumable: questions already stored are skipped). A method's entry is kept only while its
  settings and jaxsel's source (`code_fingerprint`) are unchanged."""

  FORMAT = "jaxsel-context-eval/1"

  def __init__(self, path: Optional[str]):
    self.path = path
    self.data = {"format": self.FORMAT, "pieces": {}, "methods": {}}
    if path is not None and os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        data = json.load(f)
      if data.get("format") != self.FORMAT:
        raise ValueError(f"{path} is not a {self.FORMAT} file; delete it or choose another --out.")
      self.data = data

  def method(self, name: str, settings: dict) -> dict:
    """The stored runs of method `name` (`{budget: {question id: {"picks", "ms"}}}`), emptied
    when they were made with other settings or by another jaxsel source."""
    key = json.dumps({**settings, "jaxsel_source": code_fingerprint()}, sort_keys=True, default=str)
    entry = self.data["methods"].get(name)
    if entry is None or entry["settings"] != key:
      entry = self.data["methods"][name] = {"settings": key, "runs": {}}
    return entry["runs"]

  def save(self) -> None:
    if self.path is not None:
      os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
      atomic_write(self.path, json.dumps(self.data).encode("utf-8"))


def scorer_settings(scorer) -> dict:
  """What a stored run with the registry scorer `scorer` depends on besides its name: the
  bridge scorer's weights, which may change between runs."""
  return {"bridge_weights": dict(jaxsel.contrib.registry.BRIDGE_WEIGHTS)} if scorer == "bridge" else {}


def _settings(pipe) -> dict:
  cfg = pipe.config
  out = {k: getattr(cfg, k) for k in ("method", "corag_scorer", "iterations", "exploration",
                                       "cost_penalty", "top_up", "discount", "unit", "max_tokens")}
  if cfg.method == "corag":
    out.update(scorer_settings(cfg.corag_scorer))
  return out


def run_pipelines(pipes: Dict[str, object], examples: Sequence[QAExample], store: RunStore, *,
                  budgets: Sequence[int] = BUDGETS, settings: Optional[Dict[str, dict]] = None,
                  save_every: int = 25, progress: Optional[Callable[[int, int], None]] = None,
                  candidates: Optional[Callable[[QAExample], list]] = None) -> None:
  """`pipe.select(question, documents, budget=B)` for every question, method and budget not in
  `store` yet; records the picks and the wall time of each call (embeddings come from the
  encoder's cache when it has one). A method's stored runs are kept while its `settings`
  (default: the Pipeline's search settings) are unchanged. `candidates(example)` replaces the
  documents (e.g. whole paragraphs as `Passage`s, which the Pipeline takes as they are)."""
  runs = dict(pipes)
  settings = settings or {}
  stored = {m: store.method(m, settings.get(m) or _settings(p)) for m, p in runs.items()}
  for i, ex in enumerate(examples):
    docs = qa_sets.documents(ex) if candidates is None else candidates(ex)
    todo = [(m, b) for m in runs for b in budgets if ex.id not in stored[m].get(str(b), {})]
    if not todo:
      continue
    if ex.id not in store.data["pieces"]:
      store.data["pieces"][ex.id] = pieces_of(
          docs if candidates is not None else next(iter(runs.values())).split(docs))
    for m, b in todo:
      t0 = time.perf_counter()
      res = runs[m].select(ex.question, docs, budget=b)
      ms = (time.perf_counter() - t0) * 1000
      picks = [[int(p.doc), int(p.start), int(p.end), int(p.tokens)] for p in res.passages]
      stored[m].setdefault(str(b), {})[ex.id] = {"picks": picks, "ms": ms}
    if (i + 1) % save_every == 0:
      store.save()
    if progress is not None:
      progress(i + 1, len(examples))
  store.save()


def stored_metrics(store: RunStore, examples: Sequence[QAExample], method: str,
                   budget: int) -> Dict[str, np.ndarray]:
  """`{metric: [Q]}` of a stored method at `budget`, plus `"ms"` per select call."""
  runs = store.data["methods"][method]["runs"][str(budget)]
  rows = [question_metrics(e, runs[e.id]["picks"], store.data["pieces"][e.id]) for e in examples]
  out = {k: np.asarray([r[k] for r in rows], np.float64) for k in METRICS}
  out["ms"] = np.asarray([runs[e.id]["ms"] for e in examples], np.float64)
  return out


def oracle_metrics(store: RunStore, examples: Sequence[QAExample], budget: int,
                   level: str) -> np.ndarray:
  return np.asarray([oracle_joint(e, store.data["pieces"][e.id], budget, level=level)
                     for e in examples])


# ----------------------------------------------------------------------------- batched


class Prepared(collections.namedtuple("Prepared", "example passages query")):
  """One question as the Pipeline sees it: its candidate passages and `[1, D]` query embedding."""


def prepare(pipe, examples: Sequence[QAExample]) -> list:
  """Splits every question's documents and embeds its question (through `pipe`, so its
  encoder's cache serves), as `Pipeline.select` does before its solve."""
  return [Prepared(ex, pipe.split(qa_sets.documents(ex)), pipe.embed([ex.question], "query"))
          for ex in examples]


def batched_select(pipe, prepared: Sequence[Prepared], *, budget: float, scorer=None,
                   iterations: Optional[int] = None, exploration: Optional[float] = None,
                   cost_penalty: Optional[float] = None) -> list:
  """The picks (`[[doc, start, end, tokens], ...]` per question) of `pipe`'s method for all
  `prepared` questions, by `Pipeline.select_many` (so each equals `select`'s). The search
  settings default to the Pipeline's; a scorer may be a registry name or a builder
  `(request) -> scorer` (pass the same object each time: a new one compiles again)."""
  search = {"corag_scorer": scorer, "iterations": iterations, "exploration": exploration,
            "cost_penalty": cost_penalty}
  pipe = pipe.replace(**{k: v for k, v in search.items() if v is not None})
  results = pipe.select_many([(p.example.question, p.passages) for p in prepared], budget=budget)
  return [pieces_of(r.passages) for r in results]


def run_batched(pipe, prepared: Sequence[Prepared], store: RunStore, name: str, *,
                budgets: Sequence[int] = BUDGETS, settings: Optional[dict] = None, **search) -> None:
  """`batched_select` for every budget, stored in `store` as method `name` (skipped when
  `store` holds it for every question with the same `settings`); `ms` is the batch's wall
  time per question, compilation included."""
  runs = store.method(name, settings if settings is not None else {**_settings(pipe), **{
      k: (v if not callable(v) else repr(v)) for k, v in search.items()}})
  for b in budgets:
    have = runs.setdefault(str(b), {})
    if all(p.example.id in have for p in prepared):
      continue
    t0 = time.perf_counter()
    picks = batched_select(pipe, prepared, budget=b, **search)
    ms = (time.perf_counter() - t0) * 1000 / max(len(prepared), 1)
    for p, pk in zip(prepared, picks):
      store.data["pieces"].setdefault(p.example.id, pieces_of(p.passages))
      have[p.example.id] = {"picks": pk, "ms": ms}
  store.save()


# ----------------------------------------------------------------------------- tables


def ci(a, b, *, n_resamples: int = 10_000) -> evaluation.Interval:
  """Paired bootstrap 95% CI of `mean(a - b)`, in points (×100)."""
  r = evaluation.paired_bootstrap(np.asarray(a, float), np.asarray(b, float), n_resamples=n_resamples)
  return evaluation.Interval(r.mean * 100, r.low * 100, r.high * 100)


def fmt_ci(r) -> str:
  """`mean [low, high]` of an `evaluation.Interval`, or of its `_asdict()` as reports keep it."""
  if isinstance(r, dict):
    r = evaluation.Interval(**r)
  return f"{r.mean:+.1f} [{r.low:+.1f}, {r.high:+.1f}]"


def cell(a, base, *, n_resamples: int = 10_000) -> str:
  """`mean (Δ [CI])` in % of per-question values `a` against the baseline's `base`."""
  return f"{np.nanmean(a) * 100:.1f} ({fmt_ci(ci(a, base, n_resamples=n_resamples))})"
