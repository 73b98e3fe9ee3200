"""The one registry of selection methods, objectives and CORAG scorers, by name.

Shape legend: Q queries, N candidates, D embedding dimension.

Everything that picks by name goes through here: the `Pipeline`, the `jaxsel` command, the
configuration agent's scorer menu and the training code (labels, evaluation). A request is
described by a `Request` of arrays, built from embeddings by `request` with the one rule for
scores that every layer shares (`numerics.cosine_similarity` with a `nonneg` method):

* relevance `r_qj` = cosine of query q and passage j (asymmetric prompts), non-negative;
* similarity `s_ij` = cosine of passages i and j (symmetric encoding), non-negative;
* the relevance of a passage to the request, where one number is needed (NaiveRAG, the
  relevance and link scorers), is its best relevance over the queries, `max_q r_qj`.

Objectives (`OBJECTIVES`) are built from a request; scorers (`SCORERS`) from a request and a
position discount (the title-link scorers are not discounted: their bonus already depends
on the order).
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src import checks
from jaxsel._src.bridge import BridgeSignals, bridge_signals
from jaxsel._src.io import weights_digest
from jaxsel._src.numerics import cosine_similarity
from jaxsel._src.objectives.dense import coverage, facility_location, saturated_coverage
from jaxsel._src.objectives.matrix_free import (facility_location_from_embeddings,
                                                saturated_coverage_from_embeddings)
from jaxsel._src.scorers.basic import link_scorer, objective_scorer, pairwise_scorer, relevance_scorer
from jaxsel._src.scorers.hops import hop_scorer, learned_hop_scorer, load_hop_params

Array = jax.Array
# The multi-hop text signals of a request (`text_signals`): one optional pytree.
TextSignals = BridgeSignals


class Request(NamedTuple):
  """One request's arrays: all any method or scorer is built from (`[B]` leading axis for a
  batch under `vmap`)."""
  relevance: Array  # [Q, N] non-negative r_qj, zero on invalid queries and candidates
  similarity: Optional[Array]  # [N, N] non-negative s_ij; None when the objective is matrix-free
  embeddings: Array  # [N, D] unit symmetric embeddings (the matrix-free objectives use them)
  costs: Array  # [N] float32 tokens; 0 on invalid candidates
  valid: Array  # [N] bool
  # The multi-hop text signals (`text_signals`), only for the scorers that read them
  # (`USES_TEXT_SIGNALS`); None: a request without them (any objective, NaiveRAG, MMR).
  signals: Optional[TextSignals] = None


def _deprecated_signal(name: str):
  def get(req: Request):
    warnings.warn(f"`Request.{name}` is deprecated: the text signals are one optional pytree, "
                  f"`req.signals` (None when the request carries none); read "
                  f"`jaxsel.contrib.registry.signals_of(req).{name}`.", DeprecationWarning,
                  stacklevel=2)
    return getattr(signals_of(req), name)
  return property(get)


# The signals were fields of `Request` before they became one optional pytree.
for _name in ("links", "mentioned", "entities", "groups", "overlap", "covered", "shared"):
  setattr(Request, _name, _deprecated_signal(_name))
del _name


def request(query_emb, passage_emb, sym_emb=None, *, costs, signals=None, links=None,
            mentioned=None, entities=None, groups=None, valid=None, query_valid=None,
            overlap=None, covered=None, shared=None, nonneg: str = "clip",
            dense: bool = True) -> Request:
  """A `Request` from embeddings: `query_emb` `[Q, D]`, `passage_emb` `[N, D]` (asymmetric
  passage prompt), `sym_emb` `[N, D]` (symmetric; default `passage_emb`). The text signals are
  optional: `signals` (a `TextSignals`, from `text_signals`), or its fields one by one (`links`,
  `mentioned`, `entities`, `groups`, the lexical `overlap`, `covered`, `shared`; the others
  zero), or none (the request carries none; a scorer that reads them sees zeros and one group
  per passage, `signals_of`). With `dense=False` no `[N, N]` similarity is built (the
  matrix-free objectives recompute it in blocks). Works under `jit` and `vmap`."""
  sym_emb = passage_emb if sym_emb is None else sym_emb
  n = passage_emb.shape[-2]
  valid = jnp.ones((n,), bool) if valid is None else jnp.asarray(valid, bool)
  rel = cosine_similarity(query_emb, passage_emb, nonneg=nonneg)
  rel = jnp.where(valid[None, :], rel, 0)
  if query_valid is not None:
    rel = jnp.where(jnp.asarray(query_valid, bool)[:, None], rel, 0)
  sim = cosine_similarity(sym_emb, nonneg=nonneg) if dense else None
  fields = dict(links=links, mentioned=mentioned, entities=entities, groups=groups,
                overlap=overlap, covered=covered, shared=shared)
  if signals is None and any(v is not None for v in fields.values()):
    signals = TextSignals(**fields)
  if signals is not None:
    signals = _complete(signals, n)
  return Request(relevance=rel, similarity=sim, embeddings=jnp.asarray(sym_emb, jnp.float32),
                 costs=jnp.where(valid, jnp.asarray(costs, jnp.float32), 0), valid=valid,
                 signals=signals)


def _complete(signals: TextSignals, n: int) -> TextSignals:
  """`signals` with every field an array (zeros, one group per passage, where absent)."""
  def get(name, shape, dtype, default=None):
    v = getattr(signals, name)
    if v is None:
      return jnp.zeros(shape, dtype) if default is None else default
    return jnp.asarray(v, dtype)
  return TextSignals(
      links=get("links", (n, n), jnp.float32), mentioned=get("mentioned", (n,), jnp.float32),
      entities=get("entities", (n, n), jnp.float32),
      groups=get("groups", (n,), jnp.int32, jnp.arange(n, dtype=jnp.int32)),
      overlap=get("overlap", (n,), jnp.float32), covered=get("covered", (n, n), jnp.float32),
      shared=get("shared", (n, n), jnp.float32))


def signals_of(req: Request) -> TextSignals:
  """The request's text signals, every field an array: zeros and one group per passage for a
  request that carries none (what a signal-reading scorer sees then)."""
  n = req.costs.shape[-1]
  return _complete(TextSignals(None, None, None, None) if req.signals is None else req.signals, n)


def best_relevance(req: Request) -> Array:
  """`[N]` relevance of each candidate to the request: `max_q r_qj`, zero on invalid ones."""
  return jnp.where(req.valid, jnp.max(req.relevance, axis=-2), 0)


def text_signals(texts: Sequence[str], docs: Sequence[int], titles: Sequence[Optional[str]],
                 queries: Sequence[str]) -> TextSignals:
  """The second-hop signals of a request (`jaxsel._src.bridge`): links between passages by the
  lead entity of each passage's group, the lead entities the queries name, shared capitalised
  phrases, the groups (a document, or one Markdown section of it), and the lexical overlaps
  (`bridge.lexical_signals`). Plain Python."""
  return bridge_signals(" ".join(queries), list(texts), list(docs), list(titles))


# ----------------------------------------------------------------------------- objectives


def _objective(name: str, req: Request, nonneg: str, backend: str):
  rel = None if name == "coverage" else req.relevance
  if req.similarity is None:  # matrix-free: the same objective without the [N, N] matrix
    if name == "saturated_coverage":
      return saturated_coverage_from_embeddings(req.embeddings, rel, valid=req.valid,
                                                nonneg=nonneg, backend=backend)
    return facility_location_from_embeddings(req.embeddings, rel, valid=req.valid,
                                             nonneg=nonneg, backend=backend)
  if name == "coverage":
    return coverage(req.similarity, valid=req.valid, backend=backend)
  build = facility_location if name == "facility_location" else saturated_coverage
  return build(req.similarity, rel, valid=req.valid, backend=backend)


OBJECTIVES = ("facility_location", "saturated_coverage", "coverage")


def objective(name: str, req: Request, *, nonneg: str = "clip", backend: str = "auto"):
  """The objective `name` (one of `OBJECTIVES`) of a request (`nonneg` only matters for the
  matrix-free form, which recomputes similarities)."""
  if name not in OBJECTIVES:
    raise ValueError(f"Unknown objective {name!r}; use one of {', '.join(map(repr, OBJECTIVES))}.")
  return _objective(name, req, nonneg, backend)


# ----------------------------------------------------------------------------- scorers


def _relevance_scorer(req: Request, discount):
  """Additive relevance: the search then solves NaiveRAG's knapsack exactly."""
  return relevance_scorer(best_relevance(req), discount=discount)


def _objective_scorer(name: str, req: Request, discount):
  return objective_scorer(objective(name, req), discount=discount)


def _linked_relevance(req: Request, discount, *, link_weight: float, mention_weight: float = 0.0,
                      relevance_source: bool = True):
  """Relevance plus prefix-conditioned title links: a passage whose title occurs in an earlier
  passage earns `link_weight` (times that passage's relevance with `relevance_source`): the
  second hop of a bridge question, which need not resemble the question. A passage whose
  title the question names earns `mention_weight`. Not discounted."""
  del discount
  rel, sig = best_relevance(req), signals_of(req)
  unary = rel + mention_weight * jnp.where(req.valid, sig.mentioned, 0.0)
  source = rel if relevance_source else jnp.where(req.valid, 1.0, 0.0)
  return relevance_scorer(unary) + link_weight * link_scorer(sig.links * req.valid[None, :],
                                                             source=source)


# The bridge scorer's weights: chosen on the training splits of HotpotQA, MuSiQue and 2Wiki
# (training/crossval.py; the tables are in the git history of bench/). The same-group penalty stays at 1.0 although the
# cross-dataset rule, which looks at joint recall of any piece, prefers 5 by about one point:
# 5 stops the search from taking a second piece of a split paragraph, which costs 4 to 17 points
# of strict joint recall (whole gold paragraphs) at 256 and 384 tokens.
BRIDGE_WEIGHTS = {"mention": 1.5, "link": 0.75, "entities": 0.5, "entity_scale": 2.0,
                  "same_group": 1.0}


def _bridge(req: Request, discount, *, mention: float, link: float, entities: float,
            entity_scale: float, same_group: float):
  """The bridge CORAG scorer (the default before `"learned_hops"`): of an ordered set o,
  `Σ_t [r(o_t) + mention·mentioned(o_t)] + link·Σ_t max_{s<t} links[o_s, o_t]
   + entities·Σ_t max_{s<t} min(ent[o_s, o_t] / entity_scale, 1) − same_group·#{s<t: same group}`:
  relevance, the lead entities the question names, a second hop named by an earlier passage or
  sharing its rarer names, and a cost for reading one document twice. Not discounted."""
  del discount
  v, sig = jnp.where(req.valid, 1.0, 0.0), signals_of(req)
  unary = jnp.where(req.valid, best_relevance(req) + mention * sig.mentioned, 0.0)
  same = (sig.groups[:, None] == sig.groups[None, :]) & req.valid[:, None] & req.valid[None, :]
  shared = jnp.minimum(sig.entities / entity_scale, 1.0)
  return (pairwise_scorer(-same_group * same.astype(jnp.float32), unary=unary)
          + link * link_scorer(sig.links * v[None, :], source=v)
          + entities * link_scorer(shared * v[None, :], source=v))


def _hops(req: Request, discount):
  """Relevance plus the relevance to the query moved towards an earlier pick
  (`scorers.hops.hop_scorer`; no training, no extra encoder calls). Not discounted."""
  del discount
  return hop_scorer(best_relevance(req), req.similarity, valid=req.valid)


def _learned_hops(req: Request, discount, *, params=None):
  """The learned second-hop scorer (`scorers.hops.learned_hop_scorer`) with the shipped weights
  (`jaxsel/data/hop_scorer.safetensors`, SHA-256 checked) or `params`. Not discounted."""
  del discount
  params = load_hop_params() if params is None else params
  sig = signals_of(req)
  return learned_hop_scorer(params, relevance=best_relevance(req), similarity=req.similarity,
                            links=sig.links, entities=sig.entities, mentioned=sig.mentioned,
                            costs=req.costs, valid=req.valid, overlap=sig.overlap,
                            covered=sig.covered, shared=sig.shared)


def learned_hops_builder(params):
  """A `corag_scorer` builder `(request) -> scorer` of the learned second-hop scorer with other
  weights (e.g. a model trained without one dataset, `training/train_hops.py`). Builders of
  equal weights are equal: Pipelines built from them share their compiled programs."""
  return _ParamsBuilder(params)


class _ParamsBuilder:
  """A static argument of the compiled solve, equal to another (and hashed alike) when their
  weights are: a Pipeline built again from the same weights reuses the programs compiled for
  them instead of compiling (and keeping) its own. Weights that are tracers (a builder made
  inside a trace) compare by identity."""

  def __init__(self, params):
    self.params = params
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if any(isinstance(x, jax.core.Tracer) for _, x in leaves):
      self._key = id(self)
      return
    self._key = weights_digest({jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves})

  def __eq__(self, other):
    return isinstance(other, _ParamsBuilder) and other._key == self._key

  def __hash__(self):
    return hash(self._key)

  def __call__(self, req: Request):
    return _learned_hops(req, 1.0, params=self.params)


# Name -> builder(request, discount) -> scorer. All are cheap (no model calls), so they can be
# swept over a grid. The link/mention weights were chosen on the 300 training questions of the
# HotpotQA split (exhaustive search over sets of up to 4 passages at 256 tokens).
SCORERS: Mapping[str, Callable] = {
    "bridge": functools.partial(_bridge, **BRIDGE_WEIGHTS),
    "learned_hops": _learned_hops,
    "hops": _hops,
    "relevance": _relevance_scorer,
    "facility_location": functools.partial(_objective_scorer, "facility_location"),
    "saturated_coverage": functools.partial(_objective_scorer, "saturated_coverage"),
    "links": functools.partial(_linked_relevance, link_weight=0.5),
    "mentions_links": functools.partial(_linked_relevance, link_weight=0.5, mention_weight=1.0,
                                        relevance_source=False),
    "mentions_links_strong": functools.partial(_linked_relevance, link_weight=0.5,
                                               mention_weight=2.0, relevance_source=False),
}
# Scorers that read the text signals (the Pipeline computes them only for these).
USES_TEXT_SIGNALS = ("bridge", "learned_hops", "links", "mentions_links", "mentions_links_strong")


def scorer(name, req: Request, *, discount=1.0):
  """The CORAG scorer `name` (one of `SCORERS`) of a request, or `name(req)` for a callable
  (a custom builder)."""
  if callable(name):
    return name(req)
  if name not in SCORERS:
    raise ValueError(f"Unknown CORAG scorer {name!r}; use one of "
                     f"{', '.join(map(repr, SCORERS))} or a callable (request) -> scorer.")
  return SCORERS[name](req, discount)


# ----------------------------------------------------------------------------- methods


SUBMODULAR = OBJECTIVES  # greedy on the objective of the same name
BASELINES = ("mmr", "naive")
SEARCH = ("corag",)
METHODS = SUBMODULAR + BASELINES + SEARCH
NEEDS_QUERY = ("facility_location", "saturated_coverage", "mmr", "naive", "corag")


# The default method per task, measured on held-out multi-hop QA (training/RESULTS.md): with a
# question, the CORAG search with the learned second-hop scorer (NaiveRAG, facility location and
# MMR all trail it there); without one, coverage (text selection: the only method that needs no
# query).
DEFAULT_QUERY_METHOD = "corag"
DEFAULT_TEXT_METHOD = "coverage"


def default_method(has_query: bool) -> str:
  """The default method of a request with (`has_query`) or without a question."""
  return DEFAULT_QUERY_METHOD if has_query else DEFAULT_TEXT_METHOD


def check_method(method: str) -> str:
  return checks.choice(method, "method", METHODS)


def available_methods() -> tuple:
  """The selection methods, by name (`Pipeline(method=...)`)."""
  return METHODS


def available_scorers() -> tuple:
  """The CORAG scorers of the registry, by name (`Pipeline(corag_scorer=...)`)."""
  return tuple(SCORERS)
