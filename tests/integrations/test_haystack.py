"""The Haystack adapter against the real haystack-ai: `run(query, documents)` on its own and in a
`haystack.Pipeline`, within a budget, in order, reusing the documents' embeddings."""

import copy
import inspect
import warnings

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.core.errors import SerializationError
from haystack.document_stores.in_memory import InMemoryDocumentStore

import jaxsel
from jaxsel.integrations.haystack import JaxselRanker

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def as_docs(texts, embeddings=None):
  return [Document(content=t, meta={"i": i},
                   embedding=None if embeddings is None else [float(x) for x in embeddings[i]])
          for i, t in enumerate(texts)]


def ids(docs):
  return [d.meta["i"] for d in docs]


@pytest.mark.parametrize("method", ["facility_location", "saturated_coverage", "mmr", "corag", "naive"])
def test_budget_order_and_equal_to_pipeline_select(tiny, texts, words, method, reference):
  ranker = JaxselRanker(encoder=tiny, budget=120, method=method, tokenizer=words)
  out = ranker.run(query=QUERY, documents=as_docs(texts))["documents"]
  ref = reference(tiny, QUERY, texts, [words(t) for t in texts], method=method, budget=120)
  assert out and ids(out) == sorted(ref.indices.tolist())
  assert sum(words(d.content) for d in out) <= 120
  by_pick = sorted(out, key=lambda d: d.meta["jaxsel_rank"])
  assert ids(by_pick) == ref.indices.tolist()
  np.testing.assert_allclose([d.score for d in by_pick], ref.scores, rtol=1e-6)


def test_selection_order_and_run_overrides(tiny, texts, reference):
  ranker = JaxselRanker(encoder=tiny, budget=40, order="selection")
  out = ranker.run(query=QUERY, documents=as_docs(texts), budget=None, k=3)["documents"]
  costs = jaxsel.token_costs(texts, tiny.tokenizer)
  assert ids(out) == reference(tiny, QUERY, texts, costs, budget=40, k=3).indices.tolist()
  out = ranker.run(query=QUERY, documents=as_docs(texts), budget=150)["documents"]
  assert ids(out) == reference(tiny, QUERY, texts, costs, budget=150).indices.tolist()


def test_embeddings_are_reused_in_a_haystack_pipeline(tiny, texts, spy, reference):
  emb = np.asarray(tiny.encode(texts))
  q = [float(x) for x in np.asarray(tiny.encode([QUERY]))[0]]
  store = InMemoryDocumentStore()
  store.write_documents(as_docs(texts, emb))
  calls = spy(tiny)
  pipe = Pipeline()
  pipe.add_component("retriever", InMemoryEmbeddingRetriever(store, top_k=len(texts),
                                                             return_embedding=True))
  pipe.add_component("ranker", JaxselRanker(encoder=tiny, budget=150))
  pipe.connect("retriever.documents", "ranker.documents")
  out = pipe.run({"retriever": {"query_embedding": q},
                  "ranker": {"query": QUERY, "query_embedding": q}})["ranker"]["documents"]
  assert calls.texts == []  # nothing embedded again
  retrieved = store.embedding_retrieval(query_embedding=q, top_k=len(texts), return_embedding=True)
  costs = jaxsel.token_costs([d.content for d in retrieved], tiny.tokenizer)
  ref = reference(tiny, QUERY, [d.content for d in retrieved], costs, budget=150,
                  embeddings=np.asarray([d.embedding for d in retrieved]), query_embedding=q)
  assert ids(out) == [retrieved[i].meta["i"] for i in sorted(ref.indices.tolist())]
  assert sum(jaxsel.token_costs([d.content for d in out], tiny.tokenizer)) <= 150


def test_after_bm25_the_encoder_embeds(tiny, texts, spy):
  store = InMemoryDocumentStore()
  store.write_documents(as_docs(texts))
  calls = spy(tiny)
  pipe = Pipeline()
  pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=8))
  pipe.add_component("ranker", JaxselRanker(encoder=tiny, budget=100))
  pipe.connect("retriever.documents", "ranker.documents")
  result = pipe.run({"retriever": {"query": QUERY}, "ranker": {"query": QUERY}},
                    include_outputs_from={"retriever"})
  retrieved, out = result["retriever"]["documents"], result["ranker"]["documents"]
  assert out and sorted(calls.texts) == sorted([d.content for d in retrieved] + [QUERY])
  assert sum(jaxsel.token_costs([d.content for d in out], tiny.tokenizer)) <= 100


def test_without_a_query_embedding_only_the_query_is_embedded(tiny, texts, spy):
  emb = np.asarray(tiny.encode(texts))
  calls = spy(tiny)
  JaxselRanker(encoder=tiny, budget=150).run(query=QUERY, documents=as_docs(texts, emb))
  assert calls.texts == [QUERY]


def test_embeddings_of_another_model_raise_instead_of_mixing(tiny, texts):
  docs = as_docs(texts, np.ones((len(texts), 8)))
  ranker = JaxselRanker(encoder=tiny, budget=150)
  with pytest.raises(ValueError, match="8-dimensional embeddings.*32-dimensional"):
    ranker.run(query=QUERY, documents=docs)
  with pytest.raises(ValueError, match="query embedding has 4 dimensions"):
    ranker.run(query=QUERY, documents=docs, query_embedding=[1.0] * 4)
  assert ranker.run(query=QUERY, documents=docs, query_embedding=[1.0] * 8)["documents"]


def test_inputs_are_not_changed(tiny, texts):
  docs = as_docs(texts)
  before = copy.deepcopy(docs)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # Haystack warns when a Document is mutated in place
    out = JaxselRanker(encoder=tiny, budget=150).run(query=QUERY, documents=docs)["documents"]
  assert docs == before
  assert all(o is not d for o in out for d in docs)
  assert {o.id for o in out} <= {d.id for d in docs}


def test_serialisation_round_trip(tiny):
  ranker = JaxselRanker(encoder=MINILM, budget=256, method="saturated_coverage", k=5)
  pipe = Pipeline()
  pipe.add_component("ranker", ranker)
  # Haystack 3 loads only the modules it is told to trust (2.x has no allowlist).
  trust = {"allowed_modules": ["jaxsel.integrations.haystack"]} \
      if "allowed_modules" in inspect.signature(Pipeline.loads).parameters else {}
  again = Pipeline.loads(pipe.dumps(), **trust).get_component("ranker")
  assert (again.encoder, again.budget, again.method, again.k) == (MINILM, 256, "saturated_coverage", 5)
  with pytest.raises(SerializationError, match="model name"):
    JaxselRanker(encoder=tiny).to_dict()


def test_bad_input_fails_clearly(tiny, texts):
  with pytest.raises(ValueError, match="method"):
    JaxselRanker(encoder=tiny, method="coverage")
  ranker = JaxselRanker(encoder=tiny)
  assert ranker.run(query=QUERY, documents=[]) == {"documents": []}
  with pytest.raises(ValueError, match="no `content`"):
    ranker.run(query=QUERY, documents=[Document(content="a"), Document(meta={"x": 1})])
  with pytest.raises(ValueError, match="`k`"):
    ranker.run(query=QUERY, documents=as_docs(texts), k=0)


def test_real_minilm_loaded_by_name_at_warm_up(minilm, texts, reference):
  ranker = JaxselRanker(encoder=MINILM, budget=192)
  pipe = Pipeline()
  pipe.add_component("ranker", ranker)
  out = pipe.run({"ranker": {"query": QUERY, "documents": as_docs(texts)}})["ranker"]["documents"]
  costs = jaxsel.token_costs(texts, minilm.tokenizer)
  assert ids(out) == sorted(reference(minilm, QUERY, texts, costs, budget=192).indices.tolist())
  assert sum(costs[i] for i in ids(out)) <= 192
  assert any("Corliss Archer" in d.content for d in out)
