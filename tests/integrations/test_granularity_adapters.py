"""`granularity="sentence"` in the three adapters: a candidate kept whole or as runs of its
sentences (a copy holding `text[start:end]`, with `jaxsel_start` / `jaxsel_end`; after its
title, `title_key`, where the part does not hold it), within the budget in the adapter's
counter (the encoder's, or a second tokenizer given to it), and a bad value refused when the
adapter is built."""

import pytest
from haystack import Document as HaystackDocument
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import NodeWithScore, TextNode

import jaxsel
from jaxsel.cli import DEMO_DOCUMENT
from jaxsel.integrations.haystack import JaxselRanker
from jaxsel.integrations.langchain import JaxselCompressor
from jaxsel.integrations.llama_index import JaxselNodePostprocessor

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"
BLOCKS = DEMO_DOCUMENT.read_text("utf-8").split("\n\n")
PARAGRAPHS = [p for p in BLOCKS if p.strip() and not p.startswith("#")][:8]
TITLES = [BLOCKS[BLOCKS.index(p) - 1].removeprefix("## ") for p in PARAGRAPHS]  # their headings


def _meta(i, titles):
  return {"i": i} if titles is None else {"i": i, "title": titles[i]}


def _llama(encoder, texts, titles=None, **settings):
  # A title in the metadata is left out of what LlamaIndex embeds and sends (the adapter's
  # `title_key` then heads the parts with it).
  nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata=_meta(i, titles),
                                       excluded_embed_metadata_keys=["title"],
                                       excluded_llm_metadata_keys=["title"]), score=1.0)
           for i, t in enumerate(texts)]
  out = JaxselNodePostprocessor(encoder=encoder, **settings).postprocess_nodes(nodes, query_str=QUERY)
  return [(n.node.metadata, n.node.get_content()) for n in out]


def _langchain(encoder, texts, titles=None, **settings):
  docs = [LangChainDocument(page_content=t, metadata=_meta(i, titles)) for i, t in enumerate(texts)]
  return [(d.metadata, d.page_content)
          for d in JaxselCompressor(encoder=encoder, **settings).compress_documents(docs, QUERY)]


def _haystack(encoder, texts, titles=None, **settings):
  docs = [HaystackDocument(content=t, meta=_meta(i, titles), id=str(i)) for i, t in enumerate(texts)]
  out = JaxselRanker(encoder=encoder, **settings).run(query=QUERY, documents=docs)["documents"]
  return [(d.meta, d.content) for d in out]


ADAPTERS = {"llama_index": (JaxselNodePostprocessor, _llama),
            "langchain": (JaxselCompressor, _langchain), "haystack": (JaxselRanker, _haystack)}


@pytest.fixture(scope="module")
def second():
  """A second tokenizer, as a framework hands one over: `text -> int` (words)."""
  return lambda text: len(text.split())


@pytest.mark.parametrize("framework", ADAPTERS)
@pytest.mark.parametrize("counted", ["encoder", "second"])
def test_parts_are_spans_and_the_budget_holds(minilm, second, framework, counted):
  _, run = ADAPTERS[framework]
  extra = {} if counted == "encoder" else {"tokenizer": second}
  count = (jaxsel.token_counter(minilm).count_one if counted == "encoder" else second)
  budget = 90 if counted == "encoder" else 45  # word pieces, or words
  kept = run(minilm, PARAGRAPHS, budget=budget, granularity="sentence", **extra)
  assert kept and sum(count(text) for _, text in kept) <= budget
  parts = [(m["i"], m["jaxsel_start"], m["jaxsel_end"], text) for m, text in kept
           if "jaxsel_start" in m]
  assert parts  # the budget holds no two whole paragraphs here
  for i, start, end, text in parts:
    assert PARAGRAPHS[i][start:end] == text
  for m, text in kept:
    if "jaxsel_start" not in m:
      assert text == PARAGRAPHS[m["i"]]  # kept whole


@pytest.mark.parametrize("framework", ADAPTERS)
def test_passage_granularity_keeps_whole_candidates(minilm, framework):
  _, run = ADAPTERS[framework]
  kept = run(minilm, PARAGRAPHS, budget=200, granularity="passage")
  assert kept and all(text == PARAGRAPHS[m["i"]] and "jaxsel_start" not in m for m, text in kept)


@pytest.mark.parametrize("framework", ADAPTERS)
def test_bad_granularity_is_refused_when_built(tiny, framework):
  cls, _ = ADAPTERS[framework]
  with pytest.raises(ValueError, match="`granularity`"):
    cls(encoder=tiny, granularity="paragraph")
  with pytest.raises(TypeError, match="`title_key`"):
    cls(encoder=tiny, title_key=["title"])


@pytest.mark.parametrize("framework", ADAPTERS)
def test_auto_granularity_is_sentences_under_a_tight_budget_else_whole(minilm, framework):
  """`granularity="auto"`: what `"sentence"` keeps when the budget cannot hold every candidate
  whole, what `"passage"` keeps when it can."""
  _, run = ADAPTERS[framework]
  assert run(minilm, PARAGRAPHS, budget=90, granularity="auto") == run(
      minilm, PARAGRAPHS, budget=90, granularity="sentence")
  roomy = run(minilm, PARAGRAPHS, budget=100_000, granularity="auto")
  assert roomy == run(minilm, PARAGRAPHS, budget=100_000, granularity="passage")
  assert all("jaxsel_start" not in m for m, _ in roomy)


@pytest.mark.parametrize("framework", ADAPTERS)
def test_titled_parts_are_headed_as_the_pipeline_sends_them(minilm, framework):
  """With titles in the metadata (`title_key="title"`, LangChain's and Haystack's default), a
  part that does not hold its candidate's title is returned as ``"title: part"``, the budget
  counts the heading, and the pieces are those `Pipeline.select` sends for the same titled
  passages; `title_key=None` returns bare spans."""
  _, run = ADAPTERS[framework]
  counter, budget = jaxsel.token_counter(minilm), 90
  kept = run(minilm, PARAGRAPHS, TITLES, budget=budget, granularity="sentence", title_key="title")
  assert sum(counter.count_one(text) for _, text in kept) <= budget
  got, headed = set(), 0
  for m, text in kept:
    i, start, end = m["i"], m.get("jaxsel_start", 0), m.get("jaxsel_end", len(PARAGRAPHS[m["i"]]))
    span = PARAGRAPHS[i][start:end]
    heading = "" if TITLES[i] in span or "jaxsel_start" not in m else f"{TITLES[i]}: "
    assert text == heading + span
    headed += bool(heading)
    got.add((i, start, end, text))
  assert headed  # some part here does not hold its title
  passages = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(counter.count_one(t)), title=TITLES[i])
              for i, t in enumerate(PARAGRAPHS)]
  res = jaxsel.Pipeline(minilm).select(QUERY, passages, budget=budget, granularity="sentence")
  assert got == {(p.doc, p.start, p.end, p.sent_text) for p in res.passages}
  bare = run(minilm, PARAGRAPHS, TITLES, budget=budget, granularity="sentence", title_key=None)
  assert all(text == PARAGRAPHS[m["i"]][m.get("jaxsel_start", 0):m.get("jaxsel_end")]
             for m, text in bare)
