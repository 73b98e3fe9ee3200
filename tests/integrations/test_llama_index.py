"""The LlamaIndex adapter against the real llama-index-core: `postprocess_nodes` with a query
string or a `QueryBundle`, within a budget, in order, reusing the nodes' embeddings."""

import copy

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

import jaxsel
from jaxsel.integrations.llama_index import JaxselNodePostprocessor

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def as_nodes(texts, embeddings=None, metadata=None):
  return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}",
                                      embedding=None if embeddings is None else list(map(float, embeddings[i])),
                                      metadata=dict(metadata or {})),
                        score=1.0 - i / 100)
          for i, t in enumerate(texts)]


def test_is_a_node_postprocessor(tiny):
  assert isinstance(JaxselNodePostprocessor(encoder=tiny), BaseNodePostprocessor)


def test_budget_and_input_order_with_a_framework_tokenizer(tiny, texts, words, reference):
  nodes = as_nodes(texts)
  post = JaxselNodePostprocessor(encoder=tiny, budget=120, tokenizer=words)
  out = post.postprocess_nodes(nodes, query_str=QUERY)
  ids = [int(n.node.node_id[1:]) for n in out]
  assert ids and ids == sorted(ids)  # the input (reading) order
  assert sum(words(n.node.get_content(metadata_mode=MetadataMode.LLM)) for n in out) <= 120
  ref = reference(tiny, QUERY, texts, [words(t) for t in texts], budget=120)
  assert ids == sorted(ref.indices.tolist())
  np.testing.assert_allclose([n.score for n in out],
                             [s for _, s in sorted(zip(ref.indices, ref.scores))], rtol=1e-6)


@pytest.mark.parametrize("method", ["facility_location", "saturated_coverage", "mmr", "corag", "naive"])
def test_every_method_in_selection_order_equals_pipeline_select(tiny, texts, method, reference):
  costs = jaxsel.token_costs(texts, tiny.tokenizer)  # the default: the encoder's tokenizer
  post = JaxselNodePostprocessor(encoder=tiny, budget=150, method=method, order="selection")
  out = post.postprocess_nodes(as_nodes(texts), QueryBundle(QUERY))
  ref = reference(tiny, QUERY, texts, costs, method=method, budget=150)
  assert [int(n.node.node_id[1:]) for n in out] == ref.indices.tolist()
  assert sum(costs[int(n.node.node_id[1:])] for n in out) <= 150


def test_k_limits_the_picks(tiny, texts):
  out = JaxselNodePostprocessor(encoder=tiny, k=3).postprocess_nodes(as_nodes(texts), query_str=QUERY)
  assert len(out) == 3


def test_node_embeddings_and_the_query_embedding_are_reused(tiny, texts, spy, reference):
  emb = np.asarray(tiny.encode(texts))
  q = np.asarray(tiny.encode([QUERY]))[0]
  calls = spy(tiny)
  post = JaxselNodePostprocessor(encoder=tiny, budget=150)
  out = post.postprocess_nodes(as_nodes(texts, emb), QueryBundle(QUERY, embedding=list(map(float, q))))
  assert calls.texts == []  # nothing embedded again
  costs = jaxsel.token_costs(texts, tiny.tokenizer)
  ref = reference(tiny, QUERY, texts, costs, budget=150, embeddings=emb, query_embedding=q)
  assert [int(n.node.node_id[1:]) for n in out] == sorted(ref.indices.tolist())


def test_without_a_query_embedding_only_the_query_is_embedded(tiny, texts, spy):
  emb = np.asarray(tiny.encode(texts))
  calls = spy(tiny)
  JaxselNodePostprocessor(encoder=tiny, budget=150).postprocess_nodes(
      as_nodes(texts, emb), query_str=QUERY)
  assert calls.texts == [QUERY]


def test_nodes_without_embeddings_are_embedded_once(tiny, texts, spy):
  nodes = as_nodes(texts)
  nodes[0].node.embedding = [0.0] * 32  # only some carry one: jaxsel embeds them all
  calls = spy(tiny)
  JaxselNodePostprocessor(encoder=tiny, budget=150).postprocess_nodes(nodes, query_str=QUERY)
  assert sorted(calls.texts) == sorted(texts + [QUERY])


def test_reuse_embeddings_false_embeds_the_nodes(tiny, texts, spy):
  emb = np.ones((len(texts), 32), np.float32)
  calls = spy(tiny)
  JaxselNodePostprocessor(encoder=tiny, budget=150, reuse_embeddings=False).postprocess_nodes(
      as_nodes(texts, emb), query_str=QUERY)
  assert set(calls.texts) == set(texts) | {QUERY}


def test_embeddings_of_another_model_raise_instead_of_mixing(tiny, texts):
  post = JaxselNodePostprocessor(encoder=tiny, budget=150)
  nodes = as_nodes(texts, np.ones((len(texts), 8)))
  with pytest.raises(ValueError, match="8-dimensional embeddings.*32-dimensional"):
    post.postprocess_nodes(nodes, query_str=QUERY)
  with pytest.raises(ValueError, match="query embedding has 5 dimensions"):
    post.postprocess_nodes(nodes, QueryBundle(QUERY, embedding=[1.0] * 5))
  # With the query embedding of the same (other) model, the node embeddings are fine.
  assert post.postprocess_nodes(nodes, QueryBundle(QUERY, embedding=[1.0] * 8))


def test_inputs_are_not_changed(tiny, texts):
  nodes = as_nodes(texts, metadata={"file": "wiki.md"})
  before = copy.deepcopy(nodes)
  out = JaxselNodePostprocessor(encoder=tiny, budget=150).postprocess_nodes(nodes, query_str=QUERY)
  assert nodes == before
  assert all(o is not n for o in out for n in nodes)
  assert {o.node.node_id for o in out} <= {n.node.node_id for n in nodes}


def test_tokens_are_counted_on_what_the_llm_is_sent(tiny, texts, words):
  nodes = as_nodes(texts, metadata={"title": "a b c d e f g h i j"})  # ten words of metadata
  out = JaxselNodePostprocessor(encoder=tiny, budget=200, tokenizer=words,
                                min_gain=0.0).postprocess_nodes(nodes, query_str=QUERY)
  llm = [words(n.node.get_content(metadata_mode=MetadataMode.LLM)) for n in out]
  assert all(c >= words(n.node.text) + 10 for c, n in zip(llm, out))
  assert sum(llm) <= 200


def test_a_tokenizer_returning_tokens_like_llama_index_settings(tiny, texts, words):
  out = JaxselNodePostprocessor(encoder=tiny, budget=120, tokenizer=str.split).postprocess_nodes(
      as_nodes(texts), query_str=QUERY)
  ref = JaxselNodePostprocessor(encoder=tiny, budget=120, tokenizer=words).postprocess_nodes(
      as_nodes(texts), query_str=QUERY)
  assert [n.node.node_id for n in out] == [n.node.node_id for n in ref]


def test_bad_input_fails_clearly(tiny, texts):
  with pytest.raises(ValueError, match="method"):
    JaxselNodePostprocessor(encoder=tiny, method="coverage")
  with pytest.raises(ValueError, match="order"):
    JaxselNodePostprocessor(encoder=tiny, order="reading")
  with pytest.raises(ValueError, match="budget"):
    JaxselNodePostprocessor(encoder=tiny, budget=-1)
  post = JaxselNodePostprocessor(encoder=tiny)
  with pytest.raises(ValueError, match="query"):
    post.postprocess_nodes(as_nodes(texts))
  assert post.postprocess_nodes([], query_str=QUERY) == []
  with pytest.raises(TypeError, match="not both"):
    JaxselNodePostprocessor(jaxsel.Pipeline(tiny), encoder=tiny)


def test_a_given_pipeline_and_its_method(tiny, texts, reference):
  pipe = jaxsel.Pipeline(tiny, method="naive")
  post = JaxselNodePostprocessor(pipe, k=4, order="selection")
  assert post.method == "naive" and post.pipeline is pipe
  out = post.postprocess_nodes(as_nodes(texts), query_str=QUERY)
  costs = jaxsel.token_costs(texts, tiny.tokenizer)
  assert [int(n.node.node_id[1:]) for n in out] == \
      reference(tiny, QUERY, texts, costs, method="naive", k=4).indices.tolist()


def test_after_a_real_retriever(tiny, texts, spy):
  """A VectorStoreIndex retriever sets `QueryBundle.embedding` but returns nodes without theirs:
  jaxsel then embeds nodes and query with its own encoder (never mixing the two models)."""
  index = VectorStoreIndex([TextNode(text=t) for t in texts], embed_model=MockEmbedding(embed_dim=8))
  bundle = QueryBundle(QUERY)
  nodes = index.as_retriever(similarity_top_k=len(texts)).retrieve(bundle)
  assert bundle.embedding is not None and nodes[0].node.embedding is None
  calls = spy(tiny)
  out = JaxselNodePostprocessor(encoder=tiny, budget=100).postprocess_nodes(nodes, bundle)
  assert out and QUERY in calls.texts
  assert sum(jaxsel.token_costs([n.node.text for n in out], tiny.tokenizer)) <= 100


def test_real_minilm(minilm, texts, spy, reference):
  emb = np.asarray(minilm.encode(texts))
  q = np.asarray(minilm.encode([QUERY]))[0]
  calls = spy(minilm)
  post = JaxselNodePostprocessor(encoder=minilm, budget=192)
  out = post.postprocess_nodes(as_nodes(texts, emb), QueryBundle(QUERY, embedding=list(map(float, q))))
  assert calls.texts == []
  costs = jaxsel.token_costs(texts, minilm.tokenizer)
  ref = reference(minilm, QUERY, texts, costs, budget=192, embeddings=emb, query_embedding=q)
  assert [int(n.node.node_id[1:]) for n in out] == sorted(ref.indices.tolist())
  assert sum(costs[int(n.node.node_id[1:])] for n in out) <= 192
  assert any("Corliss Archer" in n.node.text for n in out)
  # Embedding the texts itself, the adapter picks the same (MiniLM has no prompts).
  fresh = JaxselNodePostprocessor(encoder=MINILM, budget=192).postprocess_nodes(
      as_nodes(texts), query_str=QUERY)
  assert [n.node.node_id for n in fresh] == [n.node.node_id for n in out]
