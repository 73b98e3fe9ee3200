"""`group_by` + `max_per_group` in the three adapters: at most that many kept per metadata
value (a candidate without the key is its own group), and the pair checked when built."""

import collections

import pytest
from haystack import Document as HaystackDocument
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import NodeWithScore, TextNode

from jaxsel.integrations.haystack import JaxselRanker
from jaxsel.integrations.langchain import JaxselCompressor
from jaxsel.integrations.llama_index import JaxselNodePostprocessor

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"


def _llama(encoder, texts, metas, **settings):
  nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata=m), score=1.0)
           for i, (t, m) in enumerate(zip(texts, metas))]
  out = JaxselNodePostprocessor(encoder=encoder, **settings).postprocess_nodes(nodes, query_str=QUERY)
  return [n.node.metadata for n in out]


def _langchain(encoder, texts, metas, **settings):
  docs = [LangChainDocument(page_content=t, metadata=m) for t, m in zip(texts, metas)]
  return [d.metadata for d in JaxselCompressor(encoder=encoder, **settings).compress_documents(docs, QUERY)]


def _haystack(encoder, texts, metas, **settings):
  docs = [HaystackDocument(content=t, meta=m) for t, m in zip(texts, metas)]
  return [d.meta for d in JaxselRanker(encoder=encoder, **settings).run(query=QUERY, documents=docs)["documents"]]


ADAPTERS = {"llama_index": (JaxselNodePostprocessor, _llama), "langchain": (JaxselCompressor, _langchain),
            "haystack": (JaxselRanker, _haystack)}


@pytest.mark.parametrize("framework", ADAPTERS)
def test_at_most_max_per_group_per_metadata_value(tiny, texts, words, framework):
  _, run = ADAPTERS[framework]
  metas = [{"source": f"file{i % 2}"} if i % 3 else {} for i in range(len(texts))]
  kept = run(tiny, texts, metas, budget=10_000, tokenizer=words, method="facility_location",
             min_gain=0.0, group_by="source", max_per_group=1)
  counts = collections.Counter(m.get("source") for m in kept)
  assert counts["file0"] <= 1 and counts["file1"] <= 1
  assert counts[None] == sum(1 for m in metas if not m)  # each its own group: all fit


@pytest.mark.parametrize("framework", ADAPTERS)
def test_group_settings_go_together(tiny, framework):
  cls, _ = ADAPTERS[framework]
  with pytest.raises(ValueError, match="`group_by`"):
    cls(encoder=tiny, max_per_group=2)
  with pytest.raises(ValueError, match="`max_per_group`"):
    cls(encoder=tiny, group_by="source", max_per_group=0)
