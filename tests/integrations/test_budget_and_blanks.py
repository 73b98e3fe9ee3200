"""One behaviour in the three adapters, against the real frameworks: bad budgets are refused
when the adapter is built; a budget below the cheapest candidate gives no candidates and a
warning (not an exception in the framework's query path); blank candidates are never picked.
"""

import logging

import pytest
from haystack import Document as HaystackDocument
from langchain_core.documents import Document as LangChainDocument
from llama_index.core.schema import NodeWithScore, TextNode

from jaxsel.integrations.haystack import JaxselRanker
from jaxsel.integrations.langchain import JaxselCompressor
from jaxsel.integrations.llama_index import JaxselNodePostprocessor

QUERY = "What government position was held by the woman who portrayed Corliss Archer?"


def _llama(encoder, texts, **settings):
  nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0) for i, t in enumerate(texts)]
  out = JaxselNodePostprocessor(encoder=encoder, **settings).postprocess_nodes(nodes, query_str=QUERY)
  return [n.node.get_content() for n in out]


def _langchain(encoder, texts, **settings):
  docs = [LangChainDocument(page_content=t) for t in texts]
  return [d.page_content for d in JaxselCompressor(encoder=encoder, **settings).compress_documents(docs, QUERY)]


def _haystack(encoder, texts, **settings):
  docs = [HaystackDocument(content=t) for t in texts]
  return [d.content for d in JaxselRanker(encoder=encoder, **settings).run(query=QUERY, documents=docs)["documents"]]


ADAPTERS = {"llama_index": (JaxselNodePostprocessor, _llama), "langchain": (JaxselCompressor, _langchain),
            "haystack": (JaxselRanker, _haystack)}


@pytest.mark.parametrize("framework", ADAPTERS)
@pytest.mark.parametrize("budget", [0, -5, 12.5, float("nan"), True, "100"])
def test_a_bad_budget_is_refused_when_built(tiny, framework, budget):
  """Issue 20.7: `budget=0` was accepted and then every call raised."""
  cls, _ = ADAPTERS[framework]
  with pytest.raises(ValueError, match=r"`budget` must be a whole number of tokens >= 1"):
    cls(encoder=tiny, budget=budget)


@pytest.mark.parametrize("framework", ADAPTERS)
def test_a_budget_below_every_candidate_gives_nothing_and_a_warning(tiny, texts, words, framework,
                                                                   caplog):
  """Issue 20.7: the Pipeline's "below the smallest passage" error escaped into the framework's
  query path; a postprocessor in a chain returns nothing and says why instead."""
  _, run = ADAPTERS[framework]
  cheapest = min(words(t) for t in texts)
  with caplog.at_level(logging.WARNING, logger="jaxsel.integrations"):
    assert run(tiny, texts, budget=cheapest - 1, tokenizer=words) == []
  assert [r.levelname for r in caplog.records] == ["WARNING"]
  assert f"below the cheapest of the {len(texts)} candidates ({cheapest} tokens)" in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="jaxsel.integrations"):
    got = run(tiny, texts, budget=cheapest, tokenizer=words)  # the cheapest fits: no warning
  assert got and sum(words(t) for t in got) <= cheapest and not caplog.records


@pytest.mark.parametrize("framework", ADAPTERS)
def test_blank_candidates_are_never_picked(tiny, texts, words, framework):
  """Issue 20.7: an empty or whitespace-only document cost 0 tokens and was returned as a pick.
  With blanks mixed in, the picks are those without them (same texts, same order); only
  blanks give nothing."""
  _, run = ADAPTERS[framework]
  blanks = ["", "   ", "\n\t \n"]
  mixed = [blanks[0]] + texts[:4] + [blanks[1]] + texts[4:] + [blanks[2]]
  for settings in (dict(budget=150, tokenizer=words), dict(k=len(mixed), tokenizer=words, min_gain=None)):
    got = run(tiny, mixed, **settings)
    assert got == run(tiny, texts, **settings)
    assert got and all(t.strip() for t in got)
  assert run(tiny, blanks, budget=150, tokenizer=words) == []


@pytest.fixture(scope="module")
def passages_24():
  """24 passages of the bundled document (its Pipeline split), 519+ word pieces in all."""
  import jaxsel
  from jaxsel.cli import DEMO_DOCUMENT
  doc = DEMO_DOCUMENT.read_text("utf-8")
  return [p.text for p in jaxsel.split_documents([doc], unit="passage", max_tokens=40)[:24]]


@pytest.mark.parametrize("framework", ADAPTERS)
def test_with_only_an_encoder_and_a_budget_the_budget_holds(minilm, passages_24, framework):
  """Issue 32.1: with no tokenizer given, every adapter counted each document as 3 tokens (the
  length of the encoder tokenizer's output tuple) and returned all 24 passages for budget=80.
  Counted by an independent tokenizer (transformers' own, from the model folder), the picks
  now fit, and the default method is CORAG."""
  import transformers
  from jaxsel._src.encoders import loading
  independent = transformers.AutoTokenizer.from_pretrained(str(loading.default_encoder_path()))
  count = lambda ts: sum(len(independent(t, add_special_tokens=False)["input_ids"]) for t in ts)  # noqa: E731
  assert count(passages_24) > 3 * 80
  cls, run = ADAPTERS[framework]
  assert cls(encoder=minilm, budget=80).method == "corag"
  picked = run(minilm, passages_24, budget=80)
  assert 0 < len(picked) < len(passages_24)
  assert count(picked) <= 80
