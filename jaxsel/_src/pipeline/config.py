"""`PipelineConfig`: every setting of a `Pipeline`, frozen and checked in one place.

A config is hashable and immutable; `replace(**changes)` makes a checked copy. `Pipeline`
takes one (`config=`) or the same names as keyword arguments.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from jaxsel._src import checks, native
from jaxsel._src.greedy import METHODS as GREEDY_METHODS
from jaxsel._src.methods import SCORERS, check_method
from jaxsel._src.numerics import NONNEG_METHODS
from jaxsel._src.text import UNITS


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """How a `Pipeline` splits, scores and selects.

  Attributes:
    method: None (the default) picks per request: ``"corag"`` when there is a question,
      ``"coverage"`` when there is none (`jaxsel.default_method`). Or one of
      ``"facility_location"`` (relevance-weighted representativeness, multi-query),
      ``"saturated_coverage"`` (each passage needs only as much coverage as it is relevant),
      ``"coverage"`` (text selection, no query), ``"mmr"``, ``"naive"`` (relevance order, fill
      the budget), ``"corag"`` (tree search over ordered combinations).
    unit, max_tokens: how documents are split (`jaxsel.split_text`): ``"passage"``,
      ``"sentence"`` or ``"word"`` (token-level selection in whole words; implies late chunking).
    late_chunking: embed each document once (in windows of the model's length) and pool every
      candidate from its tokens (`SentenceEncoder.encode_chunks`), so a candidate's vector
      sees its context; candidates given as `Passage`s or from an index are embedded alone.
    greedy_method: ``"lazy"`` (default), ``"dense"`` or ``"stochastic"`` (see `jaxsel.greedy`).
    nonneg: how cosines become non-negative (`jaxsel.contrib.nonnegative`), default ``"clip"``.
    candidates: passages retrieved from an index per query before selecting.
    diversity: MMR's weight on redundancy, in [0, 1] (0 is relevance order).
    corag_scorer: what the CORAG search maximises: a name of the scorer registry
      (`jaxsel.available_scorers()`), or a callable `(request: jaxsel.contrib.Request) -> scorer`.
      The default ``"learned_hops"`` is a small learned second-hop model (shipped weights,
      `jaxsel/data/hop_scorer.safetensors`) over per-request features (relevance and its
      rank, similarity to earlier picks, the text signals, costs): it maximises the expected
      number of needed passages, and needs no titles. ``"bridge"`` (the default before it)
      adds to relevance the entities the question names, a second passage named by an
      earlier one or sharing its rarer names, and a cost for reading one document (or
      section) twice; its signals come from the text (lead entity: a heading, a leading
      "Title: ", else a first capitalised phrase) and lean on titles. The others: the
      objectives, ``"relevance"``, and the link scorers ``"links"`` / ``"mentions_links"``.
    discount: position discount of the objective and relevance scorers (earlier chunks count
      more), in (0, 1].
    iterations, exploration, cost_penalty, max_depth: CORAG search settings (a configuration
      agent, when given to the Pipeline, predicts the scorer and the first three per query);
      `max_depth` also caps mmr/naive picks. The defaults (15, 2.0, 0.2) won on the training
      splits: a short search regularises (more iterations fit the scorer, not the question).
    widening, widen_above: with `widening` C > 0, on a request of more than `widen_above`
      candidates (sentences at `granularity="sentence"`: ~100 for 20 paragraphs) the CORAG
      search offers at each node only its ⌈C·√visits⌉ best-valued children
      (`jaxsel.corag_search`'s progressive widening), so its 15 iterations go deeper than
      two picks. Off by default (0): measured at sentence granularity (`training/RESULTS.md`,
      CORAG widening), C = 2 moves every row by -3 to +3 points since the top-up follows
      the searched passages' links (paragraph joint recall on untitled HotpotQA at 384
      tokens: -3 [-7, 0]).
    search_width: on a request of more candidates than this (documents, or sentences at
      ``granularity="sentence"``), the CORAG search, its scorer and the text signals see only
      this many: the pinned, then the best by a first pass (relevance interleaved with the
      relevance to the query moved towards the three most relevant candidates,
      `width.first_pass`); the top-up still sees all. Memory and time then stay bounded at
      the sizes a reranking request sends (1,000 documents; docs/scale.md). 128 holds every
      request of the evaluation sets whole (at most 100 sentences), so their picks do not
      change.
    top_up: after the CORAG search, fill the leftover budget with the most relevant unused
      candidates (NaiveRAG on the rest); at ``granularity="sentence"`` first the lead
      sentences of the searched passages and of the passages they name, then the rest of the
      searched passages (`granularity.fill`).
    guide: at ``granularity="sentence"``, CORAG also searches the request's whole passages
      (no budget) for this many, and its top-up sends their lead sentences first and
      completes them before the searched passages, or sends them whole first
      (`guide_whole`) (`guide.py`; 0: off). Measured in
      `training/RESULTS.md` (Granularity, the passage guide): +3.5 to +7 points of
      supporting-fact joint at 256-384 tokens on held-out HotpotQA-hard, for 2.26x the time
      of an uncached 10-paragraph request of documents (every passage embedded too; an
      index's passages are not, and a request wider than `search_width` embeds only the
      passages of the sentences it searches; `bench/RESULTS.md`).
    guide_whole: the guide's passages are sent whole, before the searched sentences, when
      their sentences cost at most this share of the budget (the budget holds them with room
      for the search's picks; 0: never, their leads and rest then go where `guide` says).
      0.7 was set before it was measured, not tuned (`training/RESULTS.md`, Granularity, the
      guide's passages sent whole): on held-out HotpotQA-hard at 384 tokens +1 to +2 points of
      supporting-fact joint on the first 100 questions and 0 to +0.5 on questions 100-300,
      +4 on split documents at 256 (100-300); -3 to -4 on 2WikiMultihopQA split documents at
      384.
    guide_extra: when the guide's passages go whole, up to this many more passages (the first
      ones beyond them that a guide search for `guide` + `guide_extra` passages picks) are
      sent whole after them while the budget holds them whole, before the searched sentences
      (0: off; `training/RESULTS.md`, Granularity, a further passage sent whole): +2 to +3
      points of supporting-fact joint on held-out HotpotQA-hard at 384 tokens, where it
      reaches whole paragraphs' numbers; -1.5 to -3 on 2WikiMultihopQA at 256. Costs a
      second guide search, batched with the first.
    batch_size: texts per compiled encoder call; progress: show the encoder's progress bar.
    min_gain: a pick whose marginal gain is below it is not taken (the default 1e-6 drops
      picks that add nothing; None keeps filling the budget). Not applied to ``"corag"``.
    cache_size: how many recent `embed` results to keep; 0 turns caching off.
    dense_limit: above this many candidates the submodular methods use the matrix-free
      objectives (memory `O(N·D)` instead of the `[N, N]` similarity; the same picks).
    backend: ``"auto"``, ``"native"`` or ``"xla"``: where greedy's gains run (`jaxsel.greedy`).
    solve_rows: every solve runs in a `jax.vmap`-ed program of this many rows (`select_many`
      cuts its requests into groups of as many; a lone request or the last group is padded by
      repeating one), in `select` and `select_many` alike, so a request gets the same floats
      however many share its call (XLA:CPU's programs of other batch sizes sum in another
      order and can turn a near tie). 1 (the default) is the fastest `select` (measured,
      cached embeddings: 45 vs 54 ms with 4 rows for 36 candidates, 52 vs 72 ms for 100);
      4 makes a stream of small requests cheaper per request (the server: 2.9 vs 4.1 ms).
  """
  method: Optional[str] = None
  unit: str = "passage"
  max_tokens: Optional[int] = None
  late_chunking: bool = False
  greedy_method: str = "lazy"
  nonneg: str = "clip"
  candidates: int = 64
  diversity: float = 0.3
  corag_scorer: Any = "learned_hops"
  discount: float = 0.9
  iterations: int = 15
  exploration: float = 2.0
  cost_penalty: float = 0.2
  widening: float = 0.0
  widen_above: int = 40
  search_width: int = 128
  top_up: bool = True
  guide: int = 2
  guide_whole: float = 0.7
  guide_extra: int = 1
  max_depth: Optional[int] = None
  batch_size: int = 64
  progress: bool = False
  min_gain: Optional[float] = 1e-6
  cache_size: int = 8
  dense_limit: int = 4096
  backend: str = "auto"
  solve_rows: int = 1

  def __post_init__(self):
    if self.method is not None:
      check_method(self.method)
    checks.choice(self.unit, "unit", UNITS)
    if self.max_tokens is not None:
      checks.integer(self.max_tokens, "max_tokens")
    checks.choice(self.greedy_method, "greedy_method", GREEDY_METHODS)
    checks.choice(self.nonneg, "nonneg", NONNEG_METHODS)
    for name in ("candidates", "batch_size", "iterations", "solve_rows", "search_width"):
      checks.integer(getattr(self, name), name)
    if self.max_depth is not None:
      checks.integer(self.max_depth, "max_depth")
    for name in ("cache_size", "dense_limit", "widen_above", "guide", "guide_extra"):
      checks.integer(getattr(self, name), name, low=0)
    checks.number(self.diversity, "diversity", 0.0, 1.0)
    checks.number(self.guide_whole, "guide_whole", 0.0, 1.0)
    checks.number(self.discount, "discount", 0.0, 1.0, low_open=True)
    checks.number(self.exploration, "exploration", 0.0)
    checks.number(self.widening, "widening", 0.0)
    checks.number(self.cost_penalty, "cost_penalty")
    if self.min_gain is not None:
      checks.number(self.min_gain, "min_gain")
    if not callable(self.corag_scorer) and self.corag_scorer not in SCORERS:
      raise ValueError(f"Unknown CORAG scorer {self.corag_scorer!r}; use one of "
                       f"{', '.join(map(repr, SCORERS))} or a callable (request) -> scorer.")
    for name in ("progress", "late_chunking", "top_up"):
      if not isinstance(getattr(self, name), bool):
        raise TypeError(f"`{name}` must be a bool, got {getattr(self, name)!r}.")
    native.check_backend(self.backend)

  def replace(self, **changes) -> "PipelineConfig":
    """A checked copy with `changes` (setting names as in the constructor)."""
    unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
    if unknown:
      raise TypeError(f"Pipeline has no setting {unknown[0]!r}.")
    return dataclasses.replace(self, **changes)
