"""`granularity` in a rerank request: `sentence` keeps a document whole or as runs of its
sentences (`start`/`end` in the document), within the budget; a bad value or one with
`embeddings` answers 422 naming the field."""

import httpx
import pytest

import jaxsel
from jaxsel import serve

DOCS = [f"The {w} live here. The {w} eat grass. The {w} sleep at night. Nobody sees the {w}."
        for w in "cats dogs birds fish cows horses".split()]


@pytest.fixture(scope="module")
def url():
  app = serve.create_app(jaxsel.Pipeline(jaxsel.testing.tiny_encoder()), max_batch=4,
                         warm_up=False)
  with serve.background(app) as base:
    yield base


def post(url, body):
  return httpx.post(url + "/v1/rerank", json=body, timeout=120)


def test_sentence_granularity_keeps_parts_within_the_budget(url):
  body = {"query": "Where do the cats sleep?", "documents": DOCS, "budget_tokens": 60,
          "method": "naive", "granularity": "sentence"}
  r = post(url, body)
  assert r.status_code == 200, r.text
  d = r.json()
  assert d["results"] and d["selection"]["cost_tokens"] <= 60
  assert sum(x["cost_tokens"] for x in d["results"]) == d["selection"]["cost_tokens"]
  parts = [x for x in d["results"] if "start" in x]
  assert parts
  for x in parts:
    assert DOCS[x["index"]][x["start"]:x["end"]] == x["document"]["text"]
  whole = post(url, {**body, "granularity": "passage", "budget_tokens": 200}).json()
  assert all("start" not in x for x in whole["results"])


@pytest.mark.parametrize("extra", [{"granularity": "paragraph"},
                                   {"granularity": "sentence", "embeddings": [[1.0, 0.0]] * 6,
                                    "query_embedding": [1.0, 0.0]}])
def test_bad_granularity_answers_422(url, extra):
  r = post(url, {"query": "cats", "documents": DOCS, "budget_tokens": 60, **extra})
  assert r.status_code == 422 and "granularity" in r.text


def test_a_titled_documents_parts_come_with_their_heading(url):
  """A document object's `title`: a part that does not hold it is counted after it (`prefix`,
  `title: `, in `cost_tokens`), as `Pipeline.pick` counts a titled record's part."""
  titles = [f"Farm {i}" for i in range(len(DOCS))]
  body = {"query": "Where do the cats sleep?", "budget_tokens": 60, "method": "naive",
          "granularity": "sentence",
          "documents": [{"text": t, "title": ti} for t, ti in zip(DOCS, titles)]}
  d = post(url, body).json()
  parts = [x for x in d["results"] if "start" in x]
  assert parts and all(x["prefix"] == f"{titles[x['index']]}: " for x in parts)
  res = jaxsel.Pipeline(jaxsel.testing.tiny_encoder(), method="naive").pick(
      body["query"], body["documents"], budget=60, granularity="sentence")
  assert [(x["index"], x.get("start"), x.get("prefix", ""), x["cost_tokens"])
          for x in d["results"]] == [
      (p.document, p.start if p.end - p.start < len(DOCS[p.document]) else None, p.prefix,
       p.tokens) for p in res.picks]
  bare = post(url, {**body, "documents": DOCS}).json()
  assert all("prefix" not in x for x in bare["results"])
