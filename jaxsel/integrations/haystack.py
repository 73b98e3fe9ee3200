"""Haystack: `JaxselRanker`, a ``@component`` that keeps the retrieved documents jaxsel selects
within a token budget.

    from jaxsel.integrations.haystack import JaxselRanker
    ranker = JaxselRanker(encoder="sentence-transformers/all-MiniLM-L6-v2", budget=512)
    pipe.add_component("ranker", ranker)
    pipe.connect("retriever.documents", "ranker.documents")
    pipe.run({"retriever": {...}, "ranker": {"query": q}})

Install with ``pip install "jaxsel[haystack]"``.
"""

# No `from __future__ import annotations`: Haystack reads `run`'s annotations as types to
# type its sockets, and before 2.31 it did not resolve string annotations.
import dataclasses
import os
from typing import Any, Optional

import jaxsel
from jaxsel.integrations._common import (as_query_embedding, build_pipeline, candidate_costs,
                                        check_settings, require, resolve_method, select_candidates,
                                        stack_embeddings, TokenizerLike, group_labels, titles)
from jaxsel.defaults import DEFAULT_GRANULARITY

require("haystack", "Haystack", "haystack")

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.errors import SerializationError

__all__ = ["JaxselRanker"]


@component
class JaxselRanker:
  """Selects, among the retrieved documents, those that fill a token budget best for the query.

  `run(query, documents)` returns ``{"documents": [...]}``: the selected documents as copies
  whose `score` is jaxsel's relevance (cosine, clipped at 0) and whose `meta` gains
  ``"jaxsel_rank"`` (0 for the first pick) and ``"jaxsel_gain"`` (the marginal gain), in their
  input order (`order="input"`) or in pick order (`order="selection"`). The input documents
  are not changed.

  Embeddings: when every document has an `embedding` (an embedding retriever with
  `return_embedding=True` gives them; and `reuse_embeddings`), those are used and no document
  is embedded again; the query embedding is the `query_embedding` input when connected (a text
  embedder's output), else jaxsel's encoder embeds the query, which must then be of the model
  that embedded the documents (a different dimension raises a `ValueError`; one model family
  is the caller's to ensure). Otherwise the encoder embeds the documents' `content`.

  Args:
    pipeline: a `jaxsel.Pipeline` to select with.
    encoder: instead of `pipeline`: a jaxsel encoder or a model name / folder for
      `jaxsel.load_encoder` (default all-MiniLM-L6-v2), loaded by `warm_up`.
    budget: most tokens of the selected documents (None: only `k` limits).
    method: ``"corag"`` (default: the tree search with the learned second-hop scorer,
      the best measured on multi-hop QA), ``"facility_location"``, ``"saturated_coverage"``,
      ``"mmr"`` or ``"naive"``.
    k: most documents kept.
    min_gain: stop when a pick adds less (default: the pipeline's, 1e-6).
    tokenizer: counts `content` tokens: a callable `text -> int` or `text -> tokens`, or
      anything `jaxsel.token_counter` takes (a Hugging Face or tiktoken tokenizer, a tokenizer
      name or folder); default the pipeline's tokenizer, i.e. the encoder's (its word pieces, not your LLM's
      tokens). The budget is in that unit: the sum of the kept documents' counts (the prompt
      builder joins them its own way; its separators are not counted).
    order: ``"input"`` or ``"selection"``.
    reuse_embeddings: use the documents' own embeddings when they all have one.
    group_by, max_per_group: keep at most `max_per_group` documents per value of
      `meta[group_by]` (e.g. ``"file_path"``; a document without the key is its own group).
    granularity: ``"auto"`` (default): ``"sentence"`` when the budget cannot hold every
      document whole, else ``"passage"`` (so also without a budget, and with stored embeddings,
      which are then used); ``"passage"``: documents kept whole; ``"sentence"``: a document is
      kept whole or as runs of its sentences, all within the budget (a part is a copy whose
      content is `content[start:end]` (after its heading: `title_key`), with ``"jaxsel_start"`` /
      ``"jaxsel_end"`` in its meta); the sentences are embedded by jaxsel's encoder, not with stored
      embeddings.
    title_key: the meta key of a document's title (default ``"title"``; None: no titles). A
      part that does not hold its document's title is sent as ``"title: part"`` (its content;
      the budget counts the heading), so a sentence read alone still says what it is about,
      as `jaxsel.Pipeline` sends a part of a titled passage; the title also names the
      document for the second-hop signals. A document without the key, or with a blank or
      non-str value, has no title.
  """

  def __init__(self, pipeline: Optional[jaxsel.Pipeline] = None, *, encoder=None,
               budget: Optional[float] = None, method: Optional[str] = None,
               k: Optional[int] = None, min_gain: Optional[float] = None,
               tokenizer: TokenizerLike = None, order: str = "input",
               reuse_embeddings: bool = True, group_by: Optional[str] = None,
               max_per_group: Optional[int] = None, granularity: str = DEFAULT_GRANULARITY,
               title_key: Optional[str] = "title"):
    method = resolve_method(method, pipeline)
    check_settings(method=method, budget=budget, k=k, order=order, group_by=group_by,
                   max_per_group=max_per_group, granularity=granularity, title_key=title_key)
    self.group_by, self.max_per_group = group_by, max_per_group
    self.granularity, self.title_key = granularity, title_key
    if pipeline is not None and encoder is not None:
      raise TypeError("Give `pipeline` or `encoder`, not both (a pipeline has its encoder).")
    self.encoder = encoder
    self.budget, self.method, self.k, self.min_gain = budget, method, k, min_gain
    self.tokenizer, self.order, self.reuse_embeddings = tokenizer, order, reuse_embeddings
    self._pipeline = None
    if pipeline is not None or not (encoder is None or isinstance(encoder, (str, os.PathLike))):
      self._pipeline = build_pipeline(pipeline, encoder)  # nothing to load
    self._given_pipeline = pipeline is not None

  def warm_up(self) -> None:
    """Loads the encoder (once)."""
    if self._pipeline is None:
      self._pipeline = build_pipeline(None, self.encoder)

  @property
  def pipeline(self) -> jaxsel.Pipeline:
    self.warm_up()
    return self._pipeline

  def to_dict(self) -> dict[str, Any]:
    if self._given_pipeline or self.tokenizer is not None \
        or not (self.encoder is None or isinstance(self.encoder, (str, os.PathLike))):
      raise SerializationError(
          "JaxselRanker serialises only when built from a model name (`encoder=` a str) without "
          "a custom `tokenizer`: a Pipeline, an encoder object or a tokenizer are not data.")
    return default_to_dict(
        self, encoder=None if self.encoder is None else os.fspath(self.encoder),
        budget=self.budget, method=self.method, k=self.k, min_gain=self.min_gain,
        order=self.order, reuse_embeddings=self.reuse_embeddings, group_by=self.group_by,
        max_per_group=self.max_per_group, granularity=self.granularity, title_key=self.title_key)

  @classmethod
  def from_dict(cls, data: dict[str, Any]) -> "JaxselRanker":
    return default_from_dict(cls, data)

  @component.output_types(documents=list[Document])
  def run(self, query: str, documents: list[Document],
          query_embedding: Optional[list[float]] = None,
          budget: Optional[float] = None, k: Optional[int] = None) -> dict[str, list[Document]]:
    """Selects among `documents` for `query`.

    Args:
      query: the query text.
      documents: the candidates (text documents).
      query_embedding: the query's embedding by the model that embedded `documents`.
      budget, k: override the component's settings for this run.

    Returns:
      ``{"documents": [...]}``: the selected documents (copies), see the class.
    """
    documents = list(documents)
    if not documents:
      return {"documents": []}
    missing = [i for i, d in enumerate(documents) if d.content is None]
    if missing:
      raise ValueError(f"JaxselRanker selects text documents; document {missing[0]} has no "
                       "`content`.")
    pipeline = self.pipeline
    texts = [d.content for d in documents]
    costs = candidate_costs(pipeline, self.tokenizer, texts)
    emb = query_emb = None
    budget = self.budget if budget is None else budget
    if self.reuse_embeddings and self.granularity != "sentence":
      emb = stack_embeddings([d.embedding for d in documents], "document")
    if emb is not None:  # "auto" then keeps documents whole (`select_candidates`)
      query_emb = as_query_embedding(query_embedding, "query_embedding")
    picks, _ = select_candidates(
        pipeline, query, texts, costs, embeddings=emb, query_embedding=query_emb,
        method=self.method, budget=budget,
        k=self.k if k is None else k, min_gain=self.min_gain, order=self.order,
        what="document", query_hint="connect the query's embedding to `query_embedding`",
        groups=group_labels([d.meta for d in documents], self.group_by),
        max_per_group=self.max_per_group, granularity=self.granularity, tokenizer=self.tokenizer,
        titles=titles([d.meta for d in documents], self.title_key))
    out = []
    for p in picks:
      doc = documents[p.index]
      meta = {**doc.meta, "jaxsel_rank": p.rank, "jaxsel_gain": p.gain, **p.metadata()}
      part = {} if p.text is None else {"content": p.sent, "embedding": None}
      out.append(dataclasses.replace(doc, score=p.score, meta=meta, **part))
    return {"documents": out}
