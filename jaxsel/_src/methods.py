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
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsel._src.numerics import cosine_similarity
from jaxsel._src.objectives.dense import coverage, facility_location, saturated_coverage
from jaxsel._src.objectives.matrix_free import (facility_location_from_embeddings,
                                                saturated_coverage_from_embeddings)
from jaxsel._src.scorers.basic import link_scorer, objective_scorer, relevance_scorer, title_links

Array = jax.Array


class Request(NamedTuple):
  """One request's arrays: all any method or scorer is built from (`[B]` leading axis for a
  batch under `vmap`)."""
  relevance: Array  # [Q, N] non-negative r_qj, zero on invalid queries and candidates
  similarity: Optional[Array]  # [N, N] non-negative s_ij; None when the objective is matrix-free
  embeddings: Array  # [N, D] unit symmetric embeddings (the matrix-free objectives use them)
  costs: Array  # [N] float32 tokens; 0 on invalid candidates
  links: Array  # [N, N] link[i, j] = 1 where passage j's title occurs in passage i
  mentioned: Array  # [N] 1 where the queries name passage j's title
  valid: Array  # [N] bool


def request(query_emb, passage_emb, sym_emb=None, *, costs, links=None, mentioned=None,
            valid=None, query_valid=None, nonneg: str = "clip", dense: bool = True) -> Request:
  """A `Request` from embeddings: `query_emb` `[Q, D]`, `passage_emb` `[N, D]` (asymmetric
  passage prompt), `sym_emb` `[N, D]` (symmetric; default `passage_emb`); `links` `[N, N]`
  and `mentioned` `[N]` default to none. With `dense=False` no `[N, N]` similarity is built
  (the matrix-free objectives recompute it in blocks). Works under `jit` and `vmap`."""
  sym_emb = passage_emb if sym_emb is None else sym_emb
  n = passage_emb.shape[-2]
  valid = jnp.ones((n,), bool) if valid is None else jnp.asarray(valid, bool)
  rel = cosine_similarity(query_emb, passage_emb, nonneg=nonneg)
  rel = jnp.where(valid[None, :], rel, 0)
  if query_valid is not None:
    rel = jnp.where(jnp.asarray(query_valid, bool)[:, None], rel, 0)
  sim = cosine_similarity(sym_emb, nonneg=nonneg) if dense else None
  return Request(
      relevance=rel, similarity=sim, embeddings=jnp.asarray(sym_emb, jnp.float32),
      costs=jnp.where(valid, jnp.asarray(costs, jnp.float32), 0),
      links=jnp.zeros((n, n), jnp.float32) if links is None else jnp.asarray(links, jnp.float32),
      mentioned=jnp.zeros((n,), jnp.float32) if mentioned is None else jnp.asarray(mentioned, jnp.float32),
      valid=valid)


def best_relevance(req: Request) -> Array:
  """`[N]` relevance of each candidate to the request: `max_q r_qj`, zero on invalid ones."""
  return jnp.where(req.valid, jnp.max(req.relevance, axis=-2), 0)


def title_features(texts: Sequence[str], titles: Sequence[Optional[str]],
                   queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
  """`(links [N, N], mentioned [N])` from the passages' texts and titles (e.g. Markdown
  headings; None: no title) and the queries: plain Python, outside jit."""
  titles = [t or "" for t in titles]
  links = title_links(texts, titles)
  mentioned = title_links([" ".join(queries)] + list(texts), [""] + titles)[0, 1:]
  return links, mentioned


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
  rel = best_relevance(req)
  unary = rel + mention_weight * jnp.where(req.valid, req.mentioned, 0.0)
  source = rel if relevance_source else jnp.where(req.valid, 1.0, 0.0)
  return relevance_scorer(unary) + link_weight * link_scorer(req.links * req.valid[None, :],
                                                             source=source)


# Name -> builder(request, discount) -> scorer. All are cheap (no model calls), so they can be
# swept over a grid. The link/mention weights were chosen on the 300 training questions of the
# HotpotQA split (exhaustive search over sets of up to 4 passages at 256 tokens).
SCORERS: Mapping[str, Callable] = {
    "relevance": _relevance_scorer,
    "facility_location": functools.partial(_objective_scorer, "facility_location"),
    "saturated_coverage": functools.partial(_objective_scorer, "saturated_coverage"),
    "links": functools.partial(_linked_relevance, link_weight=0.5),
    "mentions_links": functools.partial(_linked_relevance, link_weight=0.5, mention_weight=1.0,
                                        relevance_source=False),
    "mentions_links_strong": functools.partial(_linked_relevance, link_weight=0.5,
                                               mention_weight=2.0, relevance_source=False),
}
# Scorers that read title links (the Pipeline computes them only for these).
USES_TITLES = ("links", "mentions_links", "mentions_links_strong")


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


def check_method(method: str) -> str:
  if method not in METHODS:
    raise ValueError(f"Unknown `method` {method!r}; use one of {', '.join(map(repr, METHODS))}.")
  return method
