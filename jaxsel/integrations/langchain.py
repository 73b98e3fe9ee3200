"""LangChain: `JaxselCompressor`, a `BaseDocumentCompressor` that keeps the retrieved documents
jaxsel selects within a token budget; use it in a `ContextualCompressionRetriever`.

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from jaxsel.integrations.langchain import JaxselCompressor
    compressor = JaxselCompressor(encoder="sentence-transformers/all-MiniLM-L6-v2", budget=512)
    retriever = ContextualCompressionRetriever(
        base_compressor=compressor, base_retriever=store.as_retriever(search_kwargs={"k": 30}))

Install with ``pip install "jaxsel[langchain]"`` (`ContextualCompressionRetriever` itself is in
`langchain-classic`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jaxsel
from jaxsel.integrations._common import (as_query_embedding, build_pipeline, candidate_costs,
                                        check_settings, DEFAULT_METHOD, require, resolve_method,
                                        select_candidates, stack_embeddings, TokenizerLike,
                                        group_labels, titles)
from jaxsel.defaults import DEFAULT_GRANULARITY

require("langchain_core", "LangChain", "langchain")

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, PrivateAttr

__all__ = ["JaxselCompressor"]


class JaxselCompressor(BaseDocumentCompressor):
  """Selects, among the retrieved documents, those that fill a token budget best for the query.

  Documents in; the selected ones out, as copies whose metadata gain ``"relevance_score"``
  (jaxsel's relevance, cosine clipped at 0), ``"jaxsel_rank"`` (0 for the first pick) and
  ``"jaxsel_gain"`` (the marginal gain), in their input order (`order="input"`) or in pick
  order (`order="selection"`). The input documents are not changed.

  Embeddings: LangChain documents carry none of their own, so a document's embedding is read
  from `metadata[embedding_key]` (or the ``"embedded_doc"`` state of LangChain's
  `EmbeddingsRedundantFilter` documents). With `embeddings` (the LangChain `Embeddings` model
  of your vector store) the documents without one are embedded by it and the query by its
  `embed_query`; without it jaxsel's encoder embeds the query, which must then be of the model
  that embedded the documents (a different dimension raises a `ValueError`; one model family is
  the caller's to ensure). When neither gives every document a vector, jaxsel's encoder embeds
  documents and query.

  Args:
    pipeline: a `jaxsel.Pipeline` to select with.
    encoder: instead of `pipeline`: a jaxsel encoder or a model name / folder for
      `jaxsel.load_encoder` (default all-MiniLM-L6-v2).
    budget: most tokens of the selected documents (None: only `k` limits).
    method: ``"corag"`` (default: the tree search with the learned second-hop scorer,
      the best measured on multi-hop QA), ``"facility_location"``, ``"saturated_coverage"``,
      ``"mmr"`` or ``"naive"``.
    k: most documents kept.
    min_gain: stop when a pick adds less (default: the pipeline's, 1e-6).
    tokenizer: counts `page_content` tokens: a callable `text -> int` or `text -> tokens`, or
      anything `jaxsel.token_counter` takes (a Hugging Face or tiktoken tokenizer, a tokenizer
      name or folder); default the pipeline's tokenizer, i.e. the encoder's (its word pieces, not your LLM's
      tokens). The budget is in that unit: the sum of the kept documents' counts (the chain
      joins them its own way; its separators are not counted).
    order: ``"input"`` or ``"selection"``.
    embeddings: a LangChain `Embeddings` model for the query and documents without vectors.
    embedding_key: the metadata key holding a document's embedding.
    reuse_embeddings: use the documents' stored embeddings.
    group_by, max_per_group: keep at most `max_per_group` documents per value of
      `metadata[group_by]` (e.g. ``"source"``; a document without the key is its own group).
    granularity: ``"auto"`` (default): ``"sentence"`` when the budget cannot hold every
      document whole, else ``"passage"`` (so also without a budget, and with stored embeddings,
      which are then used); ``"passage"``: documents kept whole; ``"sentence"``: a document is
      kept whole or as runs of its sentences, all within the budget (a part is a copy whose
      page_content is `page_content[start:end]` (after its heading: `title_key`), with
      ``"jaxsel_start"`` / ``"jaxsel_end"`` in its metadata); the sentences are embedded by jaxsel's
      encoder, not with stored embeddings.
    title_key: the metadata key of a document's title (default ``"title"``, as LangChain's
      Wikipedia and web loaders set it; None: no titles). A part that does not hold its
      document's title is sent as ``"title: part"`` (its page_content; the budget counts the
      heading), so a sentence read alone still says what it is about, as `jaxsel.Pipeline`
      sends a part of a titled passage; the title also names the document for the second-hop
      signals. A document without the key, or with a blank or non-str value, has no title.
  """

  model_config = ConfigDict(arbitrary_types_allowed=True)

  budget: Optional[float] = None
  method: str = DEFAULT_METHOD
  k: Optional[int] = None
  min_gain: Optional[float] = None
  order: str = "input"
  embeddings: Optional[Embeddings] = None
  embedding_key: str = "embedding"
  reuse_embeddings: bool = True
  group_by: Optional[str] = None
  max_per_group: Optional[int] = None
  granularity: str = DEFAULT_GRANULARITY
  title_key: Optional[str] = "title"
  _pipeline: Any = PrivateAttr()
  _tokenizer: Any = PrivateAttr()

  def __init__(self, pipeline: Optional[jaxsel.Pipeline] = None, *, encoder=None,
               budget: Optional[float] = None, method: Optional[str] = None,
               k: Optional[int] = None, min_gain: Optional[float] = None,
               tokenizer: TokenizerLike = None, order: str = "input",
               embeddings: Optional[Embeddings] = None, embedding_key: str = "embedding",
               reuse_embeddings: bool = True, group_by: Optional[str] = None,
               max_per_group: Optional[int] = None, granularity: str = DEFAULT_GRANULARITY,
               title_key: Optional[str] = "title", **kwargs: Any):
    method = resolve_method(method, pipeline)
    check_settings(method=method, budget=budget, k=k, order=order, group_by=group_by,
                   max_per_group=max_per_group, granularity=granularity, title_key=title_key)
    super().__init__(budget=budget, method=method, k=k, min_gain=min_gain, order=order,
                     embeddings=embeddings, embedding_key=embedding_key,
                     reuse_embeddings=reuse_embeddings, group_by=group_by,
                     max_per_group=max_per_group, granularity=granularity, title_key=title_key,
                     **kwargs)
    self._pipeline = build_pipeline(pipeline, encoder)
    self._tokenizer = tokenizer

  @property
  def pipeline(self) -> jaxsel.Pipeline:
    return self._pipeline

  def _stored(self, doc: Document):
    state = getattr(doc, "state", None)
    if isinstance(state, dict) and state.get("embedded_doc") is not None:
      return state["embedded_doc"]
    return doc.metadata.get(self.embedding_key)

  def _embeddings(self, documents, texts):
    """(`[N, D]` document embeddings or None, query embedding or None)."""
    vectors = [self._stored(d) if self.reuse_embeddings else None for d in documents]
    if self.embeddings is not None:
      todo = [i for i, v in enumerate(vectors) if v is None]
      if todo:
        for i, v in zip(todo, self.embeddings.embed_documents([texts[i] for i in todo])):
          vectors[i] = v
    return stack_embeddings(vectors, "document")

  def compress_documents(self, documents: Sequence[Document], query: str,
                         callbacks: Optional[Callbacks] = None) -> Sequence[Document]:
    """The documents jaxsel selects for `query` within the budget (copies, see the class)."""
    documents = list(documents)
    if not documents:
      return []
    texts = [d.page_content for d in documents]
    costs = candidate_costs(self._pipeline, self._tokenizer, texts)
    emb = None if self.granularity == "sentence" else self._embeddings(documents, texts)
    query_emb = None
    if emb is not None and self.embeddings is not None:
      query_emb = as_query_embedding(self.embeddings.embed_query(query), "query embedding")
    picks, _ = select_candidates(
        self._pipeline, query, texts, costs, embeddings=emb, query_embedding=query_emb,
        method=self.method, budget=self.budget, k=self.k, min_gain=self.min_gain,
        order=self.order, what="document",
        query_hint="pass your vector store's `embeddings=` model to embed the query",
        groups=group_labels([d.metadata for d in documents], self.group_by),
        max_per_group=self.max_per_group, granularity=self.granularity, tokenizer=self._tokenizer,
        titles=titles([d.metadata for d in documents], self.title_key))
    out = []
    for p in picks:
      doc = documents[p.index]
      meta = {**doc.metadata, "relevance_score": p.score, "jaxsel_rank": p.rank,
              "jaxsel_gain": p.gain, **p.metadata()}
      update = {"metadata": meta} if p.text is None else {"metadata": meta, "page_content": p.sent}
      out.append(doc.model_copy(update=update))
    return out
