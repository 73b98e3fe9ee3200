"""LlamaIndex: `JaxselNodePostprocessor`, a `BaseNodePostprocessor` that keeps the retrieved
nodes jaxsel selects within a token budget.

    from jaxsel.integrations.llama_index import JaxselNodePostprocessor
    post = JaxselNodePostprocessor(encoder="sentence-transformers/all-MiniLM-L6-v2", budget=512)
    engine = index.as_query_engine(similarity_top_k=30, node_postprocessors=[post])
    nodes = post.postprocess_nodes(retriever.retrieve(q), query_str=q)   # or on its own

Install with ``pip install "jaxsel[llama-index]"``.
"""

from __future__ import annotations

from typing import Any, List, Optional

import jaxsel
from jaxsel.integrations._common import (as_query_embedding, build_pipeline, candidate_costs,
                                        check_settings, DEFAULT_METHOD, require, resolve_method,
                                        select_candidates, stack_embeddings, TokenizerLike,
                                        group_labels, titles)
from jaxsel.defaults import DEFAULT_GRANULARITY

require("llama_index.core", "LlamaIndex", "llama-index")

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

__all__ = ["JaxselNodePostprocessor"]


class JaxselNodePostprocessor(BaseNodePostprocessor):
  """Selects, among the retrieved nodes, those that fill a token budget best for the query.

  Nodes with scores in; the selected nodes out, as new `NodeWithScore`s (the same nodes) whose
  `score` is jaxsel's relevance (cosine, clipped at 0), in their input order (`order="input"`,
  the reading order when the nodes come in reading order) or in pick order
  (`order="selection"`). The input list and its nodes are not changed.

  Embeddings: when every node has an `embedding` (and `reuse_embeddings`), those are used and
  no passage is embedded again; the query embedding is `QueryBundle.embedding` when given
  (a retriever sets it), else jaxsel's encoder embeds the query, which must then be of the
  model that embedded the nodes (a different dimension raises a `ValueError`; one model
  family is the caller's to ensure). Otherwise the encoder embeds the nodes' embedding text
  (`MetadataMode.EMBED`, as LlamaIndex does).

  Token costs are counted on the text the LLM is sent (`MetadataMode.LLM`) with `tokenizer`:
  a callable `text -> int` or `text -> tokens` (e.g. `llama_index.core.Settings.tokenizer`),
  or anything `jaxsel.token_counter` takes; default the pipeline's tokenizer, i.e. the encoder's (its word pieces, not your LLM's
  tokens: pass the LLM's tokenizer). The budget is in that unit: the sum of the kept nodes'
  counts (LlamaIndex joins them into the prompt its own way; its separators are not counted).

  Args:
    pipeline: a `jaxsel.Pipeline` to select with (its settings: splitting aside, all apply).
    encoder: instead of `pipeline`: a jaxsel encoder or a model name / folder for
      `jaxsel.load_encoder` (default all-MiniLM-L6-v2).
    budget: most tokens of the selected nodes (None: only `k` limits).
    method: ``"corag"`` (default: the tree search with the learned second-hop scorer,
      the best measured on multi-hop QA), ``"facility_location"``, ``"saturated_coverage"``,
      ``"mmr"`` or ``"naive"``.
    k: most nodes kept.
    min_gain: stop when a pick adds less (default: the pipeline's, 1e-6).
    tokenizer: counts tokens (see above).
    order: ``"input"`` or ``"selection"``.
    reuse_embeddings: use the nodes' own embeddings when they all have one.
    group_by, max_per_group: keep at most `max_per_group` nodes per value of
      `node.metadata[group_by]` (e.g. ``"file_name"``; a node without the key is its own group).
    granularity: ``"auto"`` (default): ``"sentence"`` when the budget cannot hold every
      node whole, else ``"passage"`` (so also without a budget, and with stored embeddings,
      which are then used); ``"passage"``: nodes kept whole; ``"sentence"``: a node is
      kept whole or as runs of its sentences, all within the budget (a part is a copy whose
      text is `text[start:end]` (after its heading: `title_key`), with ``"jaxsel_start"`` /
      ``"jaxsel_end"`` in its metadata); the sentences are embedded by jaxsel's encoder, not with
      stored embeddings.
      A part's cost counts its text and the metadata LlamaIndex sends with it.
    title_key: the metadata key of a node's title, None by default: LlamaIndex sends a node's
      metadata with it (`MetadataMode.LLM`), so a part already reaches the LLM under its title.
      Set it when the title is excluded from what the LLM reads (`excluded_llm_metadata_keys`):
      a part that does not hold its node's title is then embedded, counted and sent as
      ``"title: part"`` (its text), as `jaxsel.Pipeline` sends a part of a titled passage.
  """

  budget: Optional[float] = Field(default=None, description="Most tokens of the selected nodes.")
  method: str = Field(default=DEFAULT_METHOD, description="jaxsel selection method.")
  k: Optional[int] = Field(default=None, description="Most nodes kept.")
  min_gain: Optional[float] = Field(default=None, description="Smallest marginal gain taken.")
  order: str = Field(default="input", description="'input' or 'selection' order of the output.")
  reuse_embeddings: bool = Field(default=True,
                                 description="Use the nodes' embeddings when all have one.")
  group_by: Optional[str] = Field(default=None, description="Metadata key that groups nodes.")
  max_per_group: Optional[int] = Field(default=None, description="Most nodes kept per group.")
  granularity: str = Field(default=DEFAULT_GRANULARITY,
                           description="'auto' (default), 'passage' or 'sentence'.")
  title_key: Optional[str] = Field(default=None, description="Metadata key of a node's title.")
  _pipeline: Any = PrivateAttr()
  _tokenizer: Any = PrivateAttr()

  def __init__(self, pipeline: Optional[jaxsel.Pipeline] = None, *, encoder=None,
               budget: Optional[float] = None, method: Optional[str] = None,
               k: Optional[int] = None, min_gain: Optional[float] = None,
               tokenizer: TokenizerLike = None, order: str = "input",
               reuse_embeddings: bool = True, group_by: Optional[str] = None,
               max_per_group: Optional[int] = None, granularity: str = DEFAULT_GRANULARITY,
               title_key: Optional[str] = None, **kwargs: Any):
    method = resolve_method(method, pipeline)
    check_settings(method=method, budget=budget, k=k, order=order, group_by=group_by,
                   max_per_group=max_per_group, granularity=granularity, title_key=title_key)
    super().__init__(budget=budget, method=method, k=k, min_gain=min_gain, order=order,
                     reuse_embeddings=reuse_embeddings, group_by=group_by,
                     max_per_group=max_per_group, granularity=granularity, title_key=title_key,
                     **kwargs)
    self._pipeline = build_pipeline(pipeline, encoder)
    self._tokenizer = tokenizer

  @classmethod
  def class_name(cls) -> str:
    return "JaxselNodePostprocessor"

  @property
  def pipeline(self) -> jaxsel.Pipeline:
    return self._pipeline

  def _postprocess_nodes(self, nodes: List[NodeWithScore],
                         query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
    if query_bundle is None:
      raise ValueError("JaxselNodePostprocessor selects for a query: pass `query_str=` or a "
                       "`QueryBundle` to `postprocess_nodes`.")
    nodes = list(nodes)
    if not nodes:
      return []
    texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    llm_texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]
    costs = candidate_costs(self._pipeline, self._tokenizer, llm_texts)
    contents = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
    emb = query_emb = overhead = None
    if self.reuse_embeddings and self.granularity != "sentence":
      emb = stack_embeddings([n.node.embedding for n in nodes], "node")
    granularity = jaxsel.Pipeline.resolve_granularity(  # "auto": passages with embeddings
        self.granularity, budget=self.budget, costs=costs, embeddings=emb is not None)
    if granularity != "passage":  # parts of the nodes' own text, and what metadata adds
      texts = contents
      overhead = costs - candidate_costs(self._pipeline, self._tokenizer, contents)
    elif emb is not None:
      query_emb = as_query_embedding(query_bundle.embedding, "QueryBundle.embedding")
    with self.callback_manager.event(
        CBEventType.RERANKING,
        payload={EventPayload.NODES: nodes, EventPayload.MODEL_NAME: f"jaxsel:{self.method}",
                 EventPayload.QUERY_STR: query_bundle.query_str,
                 EventPayload.TOP_K: self.k}) as event:
      picks, _ = select_candidates(
          self._pipeline, query_bundle.query_str, texts, costs, embeddings=emb,
          query_embedding=query_emb, method=self.method, budget=self.budget, k=self.k,
          min_gain=self.min_gain, order=self.order, what="node",
          contents=contents, groups=group_labels([n.node.metadata for n in nodes], self.group_by),
          max_per_group=self.max_per_group, granularity=granularity,
          tokenizer=self._tokenizer, overhead=overhead,
          titles=titles([n.node.metadata for n in nodes], self.title_key),
          query_hint="give the query embedding (`QueryBundle(query_str, embedding=...)`)")
      out = [NodeWithScore(node=nodes[p.index].node if p.text is None else
                           _part(nodes[p.index].node, p), score=p.score) for p in picks]
      event.on_end(payload={EventPayload.NODES: out})
    return out


def _part(node, pick):
  """A copy of `node` holding the part `pick` of its text (`text[start:end]`, after its
  heading, `Pick.sent`), with a new id (LlamaIndex keys nodes by id) and `"jaxsel_start"` /
  `"jaxsel_end"` in its metadata."""
  return node.model_copy(update={
      "text": pick.sent, "embedding": None, "id_": f"{node.node_id}#{pick.start}-{pick.end}",
      "metadata": {**node.metadata, **pick.metadata()}})
