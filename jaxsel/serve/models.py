"""The request and response bodies of `jaxsel serve`: Jina's `/v1/rerank` and Cohere's
`/v2/rerank` shapes, with jaxsel's extensions (a token budget, a method, pinned documents, caps
per group, embeddings the caller already has) documented where the OpenAPI page shows them.

Shape legend: N documents, D embedding dimension.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

# The largest whole number a request field takes (int32: what the solves index with); larger
# numbers (`1e12`) are refused naming the field instead of overflowing in the library.
MAX_INT = 2 ** 31 - 1


class Document(BaseModel):
  """A document as an object (Jina's `{"text": ...}`)."""
  model_config = ConfigDict(extra="ignore")
  text: str = Field(description="The document's text.")
  title: Optional[str] = Field(
      None, description="jaxsel: the document's title. A part of the document that does not "
                        "hold it is counted (and embedded) after it, as `title: part`: the "
                        "result's `prefix`, to send before the part's text.")


class Extensions(BaseModel):
  """jaxsel's extensions, accepted by both rerank shapes. Without them a request ranks the
  documents by relevance, like any reranker."""
  # Clients send fields of their own (Jina's `truncation`, SDK metadata): ignored, not refused.
  model_config = ConfigDict(extra="ignore")

  budget_tokens: Optional[int] = Field(
      None, ge=1, le=MAX_INT,
      description="jaxsel: most tokens of the selected documents together, in the server's "
                  "reader tokenizer (`jaxsel serve --tokenizer`). With it, `results` holds the "
                  "documents selected within the budget in pick order (not every document), "
                  "each with `cost_tokens` and `gain`, and a top-level `selection` object says "
                  "what was spent and how good the picks provably are. A whole number >= 1.")
  method: Optional[str] = Field(
      None,
      description="jaxsel: the selection method (`corag`, `facility_location`, "
                  "`saturated_coverage`, `coverage`, `mmr`, `naive`); default: the server's "
                  "`--method`, else CORAG with the learned second-hop scorer. Given without "
                  "`budget_tokens`, it selects without a budget (`top_n` picks, or as many as "
                  "the method takes).")
  pinned: Optional[list[StrictInt]] = Field(
      None,
      description="jaxsel: indices of documents that must be kept: they come first, in this "
                  "order, and count against `top_n` and the budget. Under `granularity` "
                  "`sentence` a pinned document is kept whole.")
  groups: Optional[list[Union[StrictStr, StrictInt]]] = Field(
      None,
      description="jaxsel: one label per document (a string or an integer, e.g. its source); "
                  "with `max_per_group`, at most that many documents of each label are kept.")
  max_per_group: Optional[int] = Field(
      None, ge=1, le=MAX_INT,
      description="jaxsel: most documents kept per label of `groups` (without `groups`, each "
                  "document is its own label, as in `Pipeline.select`). A whole number >= 1.")
  embeddings: Optional[list[list[float]]] = Field(
      None,
      description="jaxsel: `[N, D]` embeddings of the documents, one row each, that the caller "
                  "already has; with `query_embedding`, nothing is embedded by the server. "
                  "Relevance is their cosine with `query_embedding`.")
  query_embedding: Optional[list[float]] = Field(
      None, description="jaxsel: `[D]` embedding of the query (goes with `embeddings`).")
  granularity: Optional[Literal["auto", "passage", "sentence"]] = Field(
      None,
      description="jaxsel: `auto` (default: `sentence` where `budget_tokens` is tight for the "
                  "documents, else `passage`; `passage` without a budget or with "
                  "`embeddings`), `passage` (each document kept whole) or `sentence`: a "
                  "document is kept whole or as runs of its sentences, all within the budget "
                  "(a selection; the server's encoder embeds the sentences, so not with "
                  "`embeddings`). A part's result gives its `start` and `end` in the document.")


class JinaRerankRequest(Extensions):
  """`POST /v1/rerank` in Jina's shape."""
  model: Optional[str] = Field(None, description="Accepted and echoed; the server's encoder ranks.")
  query: str = Field(description="The query the documents are ranked (or selected) for.")
  documents: list[Union[str, Document]] = Field(
      description="The candidates: strings or `{\"text\": ...}` objects; results refer to them "
                  "by `index`.")
  top_n: Optional[int] = Field(None, ge=1, le=MAX_INT,
                               description="Most results (documents) to return.")
  return_documents: bool = Field(True, description="Include each result's `document`.")


class CohereRerankRequest(Extensions):
  """`POST /v2/rerank` in Cohere's shape."""
  model: Optional[str] = Field(None, description="Accepted; the server's encoder ranks.")
  query: str = Field(description="The query the documents are ranked (or selected) for.")
  documents: list[Union[str, Document]] = Field(
      description="The candidates (strings; `{\"text\": ...}` objects are accepted too).")
  top_n: Optional[int] = Field(None, ge=1, le=MAX_INT,
                               description="Most results (documents) to return.")
  max_tokens_per_doc: Optional[int] = Field(
      None, ge=1, le=MAX_INT,
      description="Documents longer than this (in the reader tokenizer's tokens) are cut to "
                  "their first `max_tokens_per_doc` tokens before ranking and costing.")


class Selection(BaseModel):
  """What a budgeted selection spent and how good it provably is."""
  cost_tokens: int = Field(description="Tokens of the selected documents together.")
  budget_tokens: Optional[int] = Field(description="The request's budget (null: none).")
  method: str = Field(description="The method that selected.")
  certified: Optional[float] = Field(
      None, description="Greedy's certificate: the picks reach at least this fraction of the "
                        "best value any selection within the budget can reach (null where the "
                        "method gives none, e.g. CORAG and the baselines).")


class Result(BaseModel):
  index: int = Field(description="The document's position in `documents`.")
  relevance_score: float = Field(
      description="Cosine similarity of the query and the document (the encoder's query and "
                  "passage prompts); in a selection, as the method saw it (clipped at 0), and "
                  "under `granularity` `sentence` the best of the kept part's sentences (text "
                  "selection, `coverage`: the document's cosine, as ranked). Empty and "
                  "whitespace-only documents are never selected.")
  document: Optional[Document] = Field(None, description="Jina: the document, when asked for.")
  cost_tokens: Optional[int] = Field(None, description="jaxsel, in a selection: the document's tokens.")
  gain: Optional[float] = Field(
      None, description="jaxsel, in a selection: the pick's marginal gain under the method.")
  start: Optional[int] = Field(
      None, description="jaxsel, `granularity` `sentence`: the part kept is "
                        "`document[start:end]` (left out when the document is kept whole).")
  end: Optional[int] = Field(None, description="jaxsel: see `start`.")
  prefix: Optional[str] = Field(
      None, description="jaxsel: what a part is counted (and to be sent) with before its text: "
                        "`title: ` when the document object has a `title` the part does not "
                        "hold (left out otherwise).")


class Usage(BaseModel):
  total_tokens: int = Field(description="Tokens of the query and the documents.")


class JinaRerankResponse(BaseModel):
  model: str
  usage: Usage
  results: list[Result]
  selection: Optional[Selection] = Field(None, description="jaxsel: with `budget_tokens` or `method`.")


class CohereRerankResponse(BaseModel):
  id: str
  results: list[Result]
  meta: dict
  selection: Optional[Selection] = Field(None, description="jaxsel: with `budget_tokens` or `method`.")


class ErrorBody(BaseModel):
  message: str
  field: Optional[str] = Field(None, description="The request field at fault, when there is one.")


class ErrorResponse(BaseModel):
  error: ErrorBody
