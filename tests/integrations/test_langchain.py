"""The LangChain adapter against the real langchain-core (and `ContextualCompressionRetriever`
from langchain-classic): within a budget, in order, reusing stored embeddings."""

import asyncio
import copy

import numpy as np
import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore

import jaxsel
from jaxsel.integrations.langchain import JaxselCompressor

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"


class ListRetriever(BaseRetriever):
  """Returns its documents as they are, in their order (a retriever in reading order)."""
  docs: list

  def _get_relevant_documents(self, query, *, run_manager):
    return list(self.docs)


def as_docs(texts, embeddings=None):
  return [Document(page_content=t, id=f"d{i}",
                   metadata={"i": i} if embeddings is None else
                   {"i": i, "embedding": [float(x) for x in embeddings[i]]})
          for i, t in enumerate(texts)]


def ids(docs):
  return [d.metadata["i"] for d in docs]


def test_is_a_document_compressor(tiny):
  assert isinstance(JaxselCompressor(encoder=tiny), BaseDocumentCompressor)


@pytest.mark.parametrize("method", ["facility_location", "saturated_coverage", "mmr", "corag", "naive"])
def test_budget_order_and_equal_to_pipeline_select(tiny, texts, words, method, reference):
  comp = JaxselCompressor(encoder=tiny, budget=120, method=method, tokenizer=words)
  out = comp.compress_documents(as_docs(texts), QUERY)
  ref = reference(tiny, QUERY, texts, [words(t) for t in texts], method=method, budget=120)
  assert out and ids(out) == sorted(ref.indices.tolist())  # input order
  assert sum(words(d.page_content) for d in out) <= 120
  by_pick = sorted(out, key=lambda d: d.metadata["jaxsel_rank"])
  assert ids(by_pick) == ref.indices.tolist()
  np.testing.assert_allclose([d.metadata["relevance_score"] for d in by_pick], ref.scores, rtol=1e-6)
  np.testing.assert_allclose([d.metadata["jaxsel_gain"] for d in by_pick], ref.gains, rtol=1e-6)


def test_selection_order_and_k(tiny, texts, reference):
  out = JaxselCompressor(encoder=tiny, k=3, order="selection").compress_documents(as_docs(texts), QUERY)
  costs = jaxsel.token_costs(texts, tiny.tokenizer)
  assert ids(out) == reference(tiny, QUERY, texts, costs, k=3).indices.tolist()
  assert [d.metadata["jaxsel_rank"] for d in out] == [0, 1, 2]


def test_in_a_contextual_compression_retriever_with_stored_embeddings(tiny, texts, spy, reference):
  emb = np.asarray(tiny.encode(texts))
  calls = spy(tiny)
  retriever = ContextualCompressionRetriever(
      base_compressor=JaxselCompressor(encoder=tiny, budget=150),
      base_retriever=ListRetriever(docs=as_docs(texts, emb)))
  out = retriever.invoke(QUERY)
  assert calls.texts == [QUERY]  # the documents' embeddings were reused; jaxsel embeds the query
  costs = jaxsel.token_costs(texts, tiny.tokenizer)
  ref = reference(tiny, QUERY, texts, costs, budget=150, embeddings=emb)
  assert ids(out) == sorted(ref.indices.tolist())
  assert sum(costs[i] for i in ids(out)) <= 150
  assert ids(asyncio.run(retriever.ainvoke(QUERY))) == ids(out)


def test_in_a_contextual_compression_retriever_over_an_in_memory_vector_store(tiny, texts, spy,
                                                                               reference):
  """The vector store's own embedding model embeds the query (and the documents, which come
  back without vectors); jaxsel's encoder embeds nothing."""
  fake = DeterministicFakeEmbedding(size=16)
  store = InMemoryVectorStore(fake)
  store.add_documents(as_docs(texts))
  calls = spy(tiny)
  retriever = ContextualCompressionRetriever(
      base_compressor=JaxselCompressor(encoder=tiny, budget=150, embeddings=fake),
      base_retriever=store.as_retriever(search_kwargs={"k": 8}))
  out = retriever.invoke(QUERY)
  assert calls.texts == []
  retrieved = store.as_retriever(search_kwargs={"k": 8}).invoke(QUERY)
  got = [d.page_content for d in retrieved]
  costs = jaxsel.token_costs(got, tiny.tokenizer)
  ref = reference(tiny, QUERY, got, costs, budget=150, embeddings=np.asarray(fake.embed_documents(got)),
                  query_embedding=fake.embed_query(QUERY))
  assert [d.page_content for d in out] == [got[i] for i in sorted(ref.indices.tolist())]


def test_embeddings_of_another_model_raise_instead_of_mixing(tiny, texts):
  docs = as_docs(texts, np.ones((len(texts), 8)))
  with pytest.raises(ValueError, match="8-dimensional embeddings.*32-dimensional"):
    JaxselCompressor(encoder=tiny, budget=150).compress_documents(docs, QUERY)
  with pytest.raises(ValueError, match="query embedding has 16 dimensions"):
    JaxselCompressor(encoder=tiny, budget=150,
                     embeddings=DeterministicFakeEmbedding(size=16)).compress_documents(docs, QUERY)
  ragged = as_docs(texts[:2], [[1.0, 2.0], [1.0, 2.0, 3.0]])
  with pytest.raises(ValueError, match="different sizes"):
    JaxselCompressor(encoder=tiny).compress_documents(ragged, QUERY)


def test_reuse_embeddings_false_and_another_key(tiny, texts, spy):
  emb = np.asarray(tiny.encode(texts))
  docs = [Document(page_content=t, metadata={"vec": list(map(float, e))}) for t, e in zip(texts, emb)]
  calls = spy(tiny)
  JaxselCompressor(encoder=tiny, budget=150, embedding_key="vec").compress_documents(docs, QUERY)
  assert calls.texts == [QUERY]
  JaxselCompressor(encoder=tiny, budget=150, embedding_key="vec",
                   reuse_embeddings=False).compress_documents(docs, QUERY)
  assert set(calls.texts[1:]) == set(texts) | {QUERY}


def test_inputs_are_not_changed(tiny, texts):
  docs = as_docs(texts)
  before = copy.deepcopy(docs)
  out = JaxselCompressor(encoder=tiny, budget=150).compress_documents(docs, QUERY)
  assert docs == before
  assert all(o is not d and o.metadata is not d.metadata for o in out for d in docs)
  assert all(o.id == f"d{o.metadata['i']}" for o in out)


def test_bad_input_fails_clearly(tiny, texts):
  with pytest.raises(ValueError, match="method"):
    JaxselCompressor(encoder=tiny, method="coverage")
  with pytest.raises(ValueError, match="`k`"):
    JaxselCompressor(encoder=tiny, k=0)
  comp = JaxselCompressor(encoder=tiny, budget=150)
  assert comp.compress_documents([], QUERY) == []
  with pytest.raises(ValueError, match="query"):
    comp.compress_documents(as_docs(texts), "  ")
  # A budget below every document: nothing, and a warning (tests/integrations/test_budget_and_blanks.py).
  assert JaxselCompressor(encoder=tiny, budget=1).compress_documents(as_docs(texts), QUERY) == []


def test_real_minilm_in_a_retriever(minilm, texts, spy, reference):
  emb = np.asarray(minilm.encode(texts))
  calls = spy(minilm)
  retriever = ContextualCompressionRetriever(
      base_compressor=JaxselCompressor(jaxsel.Pipeline(minilm), budget=192),
      base_retriever=ListRetriever(docs=as_docs(texts, emb)))
  out = retriever.invoke(QUERY)
  assert calls.texts == [QUERY]
  costs = jaxsel.token_costs(texts, minilm.tokenizer)
  ref = reference(minilm, QUERY, texts, costs, budget=192, embeddings=emb)
  assert ids(out) == sorted(ref.indices.tolist())
  assert sum(costs[i] for i in ids(out)) <= 192
  assert any("Corliss Archer" in d.page_content for d in out)
