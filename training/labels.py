"""Labels for the configuration agent: sweep scorers and search settings per question.

Shape legend: Q questions, N passages, T positions of an order, G grid settings.

For every question the CORAG search runs with every scorer of a menu over a grid of
settings (iterations, cost penalty lambda, exploration c); each result is scored against
the gold (ROUGE-L of the selected context against the gold passages, plus gold-passage
recall) into a quality table (`sweep_batch`), and the best scorer and settings become the
question's label (`finalize_labels`, ties to the choice best on average). A question is
kept for training only when its best scorer beats the best *other* scorer by more than a
margin (the CORAG paper keeps questions whose best and second-best rerankers differ by > 10%).

The searches are batched: one `jax.vmap`-ed, jit-compiled search per (scorer, iterations)
covers all questions and all (lambda, c) pairs of the grid at once.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
from typing import Callable, Dict, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tqdm.auto import tqdm

import jaxsel
from jaxsel import corag_search, cross_encoder_scorer, embedding_scorer
from jaxsel.contrib import registry
from training.files import atomic_write
from training import answers, evaluation, qa
from training.qa import QAExample, QAFeatures

# The paper's grid.
PAPER_EXPLORATION = (1.5, 2.0, 2.5, 3.0)
PAPER_COST_PENALTY = (0.15, 0.2, 0.25, 0.3)
PAPER_ITERATIONS = (5, 15, 25)


# ----------------------------------------------------------------------------- scorer menu

# The scorers of the product's registry (`jaxsel.contrib.registry.SCORERS`: relevance, the
# objectives, the title-link scorers), built from a question's features with discount 1; the
# model scorers (`model_scorer_builders`) are added per run.
SCORERS = tuple(registry.SCORERS)


def build_scorer(name: str, features: QAFeatures, tokens=None,
                 builders: Optional[Dict[str, Callable]] = None):
  """The scorer `name` for one question's features: a registry scorer, or a model scorer of
  `builders` (`model_scorer_builders`, called with the question's `tokens`)."""
  builders = builders or {}
  if name in builders:
    return builders[name](features, tokens)
  if name not in registry.SCORERS:
    raise ValueError(f"Unknown scorer {name!r}; available: {', '.join(SCORERS + tuple(builders))}.")
  return registry.scorer(name, qa.request(features), discount=1.0)


def model_scorer_builders(encoder=None, *, cross_encoder=None, max_len: int = 256) -> Dict[str, Callable]:
  """Builders of the model-based scorers, called as `builder(features, tokens)` with the
  question's `QATokens` from that model's tokenizer (`training.qa.tokenize`):

  * `"embedding"`: cosine of the query embedding with the encoder's embedding of the
    concatenated ordered passages (`jaxsel.embedding_scorer`);
  * `"cross_encoder"`: a cross-encoder's logit for `[CLS] question [SEP] passages… [SEP]`.

  Each scored order runs the model, so sweeping them is far slower than the other scorers."""
  out = {}
  if encoder is not None:
    def emb(f, tok):
      return embedding_scorer(encoder.apply, f.query, tok.chunk_ids, tok.chunk_lens,
                              cls_id=encoder.cls_token_id, sep_id=encoder.sep_token_id,
                              pad_id=encoder.pad_token_id, max_len=max_len, params=encoder.params)
    out["embedding"] = emb
  if cross_encoder is not None:
    pair = cross_encoder.pair_format  # tokenises a probe pair: once, not per question

    def ce(f, tok):
      return cross_encoder_scorer(cross_encoder.apply, tok.query_ids, tok.query_len, tok.chunk_ids,
                                  tok.chunk_lens, cls_id=cross_encoder.cls_token_id,
                                  sep_id=cross_encoder.sep_token_id, pad_id=cross_encoder.pad_token_id,
                                  max_len=max(max_len, tok.query_ids.shape[-1] + 2 + pair["pair_sep"]),
                                  params=cross_encoder.params, **pair)
    out["cross_encoder"] = ce
  return out


# ----------------------------------------------------------------------------- batched search


def _as_jnp(f: QAFeatures) -> QAFeatures:
  return QAFeatures(*(jnp.asarray(a) for a in f))


@functools.partial(jax.jit, static_argnames=("name", "iterations", "max_depth", "builders"))
def _search_batch(features: QAFeatures, tokens, budget, cost_penalty, exploration, *, name,
                  iterations, max_depth, builders):
  builders = dict(builders)

  def one(f, tok, lam, c):
    scorer = build_scorer(name, f, tok, builders)
    res = corag_search(scorer, f.costs, budget=budget, iterations=iterations, exploration=c,
                       cost_penalty=lam, max_depth=max_depth, valid=f.valid)
    return res.order, res.nonfinite

  return jax.vmap(one)(features, tokens, cost_penalty, exploration)


def search_orders(features: QAFeatures, scorer: str, *, budget: float, iterations, cost_penalty,
                  exploration, max_depth: int = 6, builders: Optional[Dict[str, Callable]] = None,
                  tokens=None):
  """CORAG orders `[Q, T]` for a batch of questions with one scorer.

  `tokens`: the questions' `QATokens` for a model-based scorer (see `model_scorer_builders`),
  or a dict `{scorer name: QATokens}`; None for the others.

  `iterations` is an int (static) or a `[Q]` array of per-question values (grouped, one
  compiled search per distinct value); `cost_penalty` and `exploration` are scalars or `[Q]`.
  """
  builders = builders or {}
  if scorer not in builders and scorer not in registry.SCORERS:
    raise ValueError(f"Unknown scorer {scorer!r}; available: {', '.join(SCORERS + tuple(builders))}.")
  q = features.costs.shape[0]
  n = features.costs.shape[1]
  max_depth = min(max_depth, n)
  lam = np.broadcast_to(np.asarray(cost_penalty, np.float32), (q,))
  c = np.broadcast_to(np.asarray(exploration, np.float32), (q,))
  its = np.broadcast_to(np.asarray(iterations, np.int64), (q,))
  out = np.full((q, max_depth), -1, np.int32)
  frozen = tuple(sorted(builders.items()))
  if isinstance(tokens, dict):
    tokens = tokens.get(scorer)
  for it in np.unique(its):
    rows = np.nonzero(its == it)[0]
    # Pad a partial group to a power of two (repeating its first row) so that groups of
    # varying size share a few compiled shapes.
    size = q if len(rows) == q else min(q, _bucket(len(rows)))
    padded = np.concatenate([rows, np.full(size - len(rows), rows[0])])
    sub = _as_jnp(QAFeatures(*(a[padded] for a in features)))
    tok = None if tokens is None else jax.tree.map(lambda a: jnp.asarray(a[padded]), tokens)
    orders, nonfinite = _search_batch(sub, tok, jnp.float32(budget), jnp.asarray(lam[padded]),
                                      jnp.asarray(c[padded]), name=scorer, iterations=int(it),
                                      max_depth=max_depth, builders=frozen)
    bad = rows[np.asarray(nonfinite)[:len(rows)]]
    if len(bad):  # the search's flag (`SearchResult.nonfinite`): its orders would be wrong
      raise ValueError(f"The scorer {scorer!r} returned NaN or infinite values in search_orders "
                       f"for {len(bad)} of {q} questions (first: {bad[:5].tolist()}); check the "
                       "scorer (and its model's inputs).")
    out[rows] = np.asarray(orders)[:len(rows)]
  return out


def _bucket(n: int) -> int:
  return 1 << max(0, (n - 1).bit_length())


# ----------------------------------------------------------------------------- labelling


@dataclasses.dataclass(frozen=True)
class LabelGrid:
  """The settings swept per scorer."""
  iterations: tuple = PAPER_ITERATIONS
  cost_penalty: tuple = PAPER_COST_PENALTY
  exploration: tuple = PAPER_EXPLORATION

  def settings(self) -> list:
    return list(itertools.product(self.iterations, self.cost_penalty, self.exploration))


def quality(metrics: dict, *, recall_weight: float = 1.0) -> float:
  """The label's objective: ROUGE-L against the gold passages plus gold-passage recall."""
  return metrics["rouge_l"] + recall_weight * metrics["recall"]


def gold_quality(pairs: Sequence[tuple], costs: np.ndarray) -> list:
  """`quality` of each `(question index, example, picked passages)` against the gold passages
  (labelling by gold passages, the default). `costs` `[Q, N]`."""
  return [quality(evaluation.selection_metrics(np.asarray(order), texts=ex.texts(), gold=ex.gold,
                                               costs=costs[i][:len(ex.passages)], answers=ex.answers))
          for i, ex, order in pairs]


def answer_prompt(question: str, texts: Sequence[str], order: Sequence[int]) -> str:
  """The prompt `Pipeline.answer` sends for the picked passages `order` of `texts` with its
  defaults: the default template, the passages numbered in document order."""
  picked = sorted(int(j) for j in order if j >= 0)
  passages = [jaxsel.Passage(texts[j], 0, len(texts[j]), doc=j) for j in picked]
  zeros = np.zeros(len(picked), np.float32)
  selection = jaxsel.SelectionResult(
      method="corag", queries=[question], passages=passages, indices=np.asarray(picked, np.int64),
      scores=None, gains=zeros, curve=zeros, cost=0, budget=None, candidates=passages)
  return selection.prompt(None, order="document")


class AnswerQuality:
  """Labelling by generated answers (the CORAG paper's protocol): a selection's quality is how
  well a generator answers from it, token F1 (HotpotQA's normalisation) plus ROUGE-L F of the
  answer against the gold answers, each the best over them (`jaxsel.contrib.answer_scores`).

  Called by `sweep_batch` once per batch with every distinct selection, so the prompts go to
  `generator.generate` in batches of `batch_size`; answers are cached on disk
  (`training.answers.AnswerCache`, keyed by generator, `max_new_tokens` and prompt), so a
  resumed or repeated sweep generates nothing twice. A question without a gold answer scores 0.
  """

  def __init__(self, generator, *, cache=None, max_new_tokens: int = 32, batch_size: int = 16,
               log: Optional[Callable[[str], None]] = None):
    self.generator, self.max_new_tokens, self.batch_size, self.log = generator, max_new_tokens, batch_size, log
    self.cache = cache if cache is not None else answers.AnswerCache(None)
    self.generated = 0

  def __call__(self, pairs: Sequence[tuple], costs=None) -> list:
    prompts = [answer_prompt(ex.question, ex.texts(), order) for _, ex, order in pairs]
    texts, _, n = answers.generate_answers(
        self.generator, prompts, cache=self.cache, max_new_tokens=self.max_new_tokens,
        batch_size=self.batch_size, info=[{"id": ex.id, "method": "label"} for _, ex, _ in pairs],
        log=self.log)
    self.generated += n
    out = []
    for (_, ex, _), text in zip(pairs, texts):
      golds = [a for a in ex.answers if a.strip()]
      s = jaxsel.contrib.answer_scores(text, golds) if golds else {"f1": 0.0, "rougeL": 0.0}
      out.append(s["f1"] + s["rougeL"])
    return out


def sweep_batch(examples: Sequence[QAExample], features: QAFeatures, *, scorers: Sequence[str],
                budget: float, grid: LabelGrid = LabelGrid(), max_depth: int = 6,
                builders: Optional[Dict[str, Callable]] = None, tokens=None,
                progress: bool = False, quality_fn: Optional[Callable] = None) -> np.ndarray:
  """Quality of every (question, scorer, setting): `[Q, S, G]` with G = `len(grid.settings())`.

  For each (scorer, setting) the whole batch runs as one vmapped search; then every distinct
  selection of a question is scored once, all in one call of `quality_fn(pairs, costs)`
  (`pairs`: `(question index, example, picked passages)`; default `gold_quality`, labelling
  by gold passages; `AnswerQuality` labels by generated answers)."""
  q = len(examples)
  if features.costs.shape[0] != q:
    raise ValueError(f"`features` hold {features.costs.shape[0]} questions, `examples` {q}.")
  if not scorers:
    raise ValueError("`scorers` is empty.")
  settings = grid.settings()
  where: dict = {}  # (question, selection) -> the table cells it fills
  bar = None
  if progress:
    bar = tqdm(total=len(scorers) * len(settings), desc="label", unit="run")
  for si, s in enumerate(scorers):
    for g, (it, lam, c) in enumerate(settings):
      orders = search_orders(features, s, budget=budget, iterations=it, cost_penalty=lam,
                             exploration=c, max_depth=max_depth, builders=builders, tokens=tokens)
      for i in range(q):
        where.setdefault((i, tuple(int(x) for x in orders[i] if x >= 0)), []).append((si, g))
      if bar is not None:
        bar.update(1)
  if bar is not None:
    bar.close()
  keys = list(where)
  values = (quality_fn or gold_quality)([(i, examples[i], order) for i, order in keys],
                                        np.asarray(features.costs))
  table = np.zeros((q, len(scorers), len(settings)))
  for key, v in zip(keys, values):
    for si, g in where[key]:
      table[key[0], si, g] = v
  return table


def finalize_labels(rows: Sequence[dict], *, margin: float = 0.10, tie_tolerance: float = 0.0) -> list:
  """Chooses each question's label from its sweep table (`row["quality"]`, `[S][G]`).

  The best scorer is the one of highest quality; ties (common: several scorers often select
  the same passages) go to the scorer with the higher mean quality over all `rows`, then to
  the earlier one, and likewise for settings, so a tie is labelled with the choice that is
  best on average rather than by list order. With `tie_tolerance > 0`, scorers within that
  relative distance of the best count as tied too (small quality differences between
  scorers are mostly search noise). `keep` (the CORAG paper's filter): the best scorer beats
  the best other scorer by more than `margin` (relative). Returns new dicts.
  """
  if not rows:
    return []
  scorers = list(rows[0]["scorers"])
  settings = [tuple(x) for x in rows[0]["settings"]]
  for r in rows:
    if list(r["scorers"]) != scorers or [tuple(x) for x in r["settings"]] != settings:
      raise ValueError(f"label rows were swept with different scorers or settings (question "
                       f"{r['id']!r}); relabel them into a fresh file.")
  table = np.asarray([r["quality"] for r in rows], np.float64)  # [Q, S, G]
  per_scorer = table.max(axis=2)  # [Q, S]
  mean_scorer = per_scorer.mean(axis=0)  # [S]
  mean_setting = table.mean(axis=0)  # [S, G]
  out = []
  for i, r in enumerate(rows):
    rank = sorted(range(len(scorers)), key=lambda k: (-per_scorer[i, k], -mean_scorer[k], k))
    near = [k for k in rank if per_scorer[i, k] >= per_scorer[i, rank[0]] - tie_tolerance * abs(per_scorer[i, rank[0]])]
    top = min(near, key=lambda k: (-mean_scorer[k], k))
    g = min(range(len(settings)), key=lambda j: (-table[i, top, j], -mean_setting[top, j], j))
    best = per_scorer[i, rank[0]]
    second = per_scorer[i, rank[1]] if len(rank) > 1 else -np.inf
    it, lam, c = settings[g]
    out.append({**r, "scorer": scorers[top], "iterations": int(it), "cost_penalty": float(lam),
                "exploration": float(c), "score": float(per_scorer[i, top]),
                "second_scorer": scorers[rank[1]] if len(rank) > 1 else None,
                "second_score": float(second), "keep": bool(len(rank) > 1 and best > (1 + margin) * second),
                "scores": {s: float(per_scorer[i, k]) for k, s in enumerate(scorers)}})
  return out


def read_labels(path: str) -> list:
  """Labels already written to a JSONL file (empty if it does not exist)."""
  if not os.path.exists(path):
    return []
  out = []
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if line.strip():
        try:
          out.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise ValueError(f"{path}:{i}: corrupt label line ({e}); delete the file to relabel.") from None
  return out


def write_labels(path: str, rows: Sequence[dict]) -> None:
  """Writes all label rows to `path` atomically (temp file + rename)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
