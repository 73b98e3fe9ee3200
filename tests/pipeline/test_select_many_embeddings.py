"""`select_many` with per-request `embeddings` / `query_embeddings` (what a framework or the
server's clients already have): nothing is embedded for those requests, they are solved in the
same batched call as the others, and each equals `select` with the same embeddings."""

import numpy as np
import pytest
from test_pipeline import DOC, Q0, SMALL, _same_result, split, tiny

from jaxsel._src.pipeline.selection import Pipeline


@pytest.fixture(scope="module")
def enc():
  return tiny()


def _stream(enc, method):
  """Mixed requests: texts with embeddings, `Passage`s with embeddings, documents without."""
  rng = np.random.default_rng(0)
  texts = [p for p in SMALL.split("\n\n") if len(p.strip()) > 40][:6]
  passages = split(enc, [DOC[3000:4200]], max_tokens=60)
  query = None if method == "coverage" else Q0
  reqs = [(query, texts), (query, passages), (query, [DOC[:700]]), (query, texts[:3])]
  embs = [rng.normal(size=(len(texts), 32)), rng.normal(size=(len(passages), 32)), None,
          rng.normal(size=(3, 32)).astype(np.float32)]
  q_embs = [None if query is None else rng.normal(size=(1, 32)) for _ in reqs]
  q_embs[2] = None  # the documents' request: its query is embedded, as `select` does
  return reqs, embs, q_embs


@pytest.mark.parametrize("method", ["facility_location", "coverage", "naive", "corag"])
def test_select_many_with_embeddings_equals_select(enc, method):
  pipe = Pipeline(enc, method=method, max_tokens=80, iterations=6, corag_scorer="relevance")
  reqs, embs, q_embs = _stream(enc, method)
  enc.calls.clear()
  many = pipe.select_many(reqs, budget=150, embeddings=embs, query_embeddings=q_embs)
  # Only the request without embeddings reached the encoder (its passages, and its query).
  assert sum(n for n, _ in enc.calls) == len(many[2].candidates) + (method != "coverage")
  for got, (q, docs), e, qe in zip(many, reqs, embs, q_embs):
    _same_result(got, pipe.select(q, docs, budget=150, embeddings=e, query_embeddings=qe))
  assert [len(r.candidates) for r in many[:2]] == [len(e) for e in embs[:2]]  # one row per item


def test_select_many_embeddings_with_constraints(enc):
  pipe = Pipeline(enc, method="facility_location")
  reqs, embs, q_embs = _stream(enc, "facility_location")
  pinned = [[1], None, None, [2]]
  many = pipe.select_many(reqs, budget=400, embeddings=embs, query_embeddings=q_embs,
                          pinned=pinned)
  assert many[0].indices[0] == 1 and many[3].indices[0] == 2
  for got, (q, docs), e, qe, p in zip(many, reqs, embs, q_embs, pinned):
    _same_result(got, pipe.select(q, docs, budget=400, embeddings=e, query_embeddings=qe,
                                  pinned=p))


def test_select_many_embeddings_bad_input_names_the_argument(enc):
  pipe = Pipeline(enc, method="facility_location")
  texts = ["a first passage here.", "and a second one."]
  good = np.ones((2, 32), np.float32)
  with pytest.raises(ValueError, match=r"`embeddings` must hold one entry per request"):
    pipe.select_many([(Q0, texts)], embeddings=[good, good])
  with pytest.raises(ValueError, match=r"`embeddings\[1\]`.*one row per passage"):
    pipe.select_many([(Q0, texts), (Q0, texts)], embeddings=[good, good[:1]])
  with pytest.raises(ValueError, match=r"`query_embeddings\[0\]`.*\[Q, D\]"):
    pipe.select_many([(Q0, texts)], embeddings=[good], query_embeddings=[np.ones((1, 5))])
  with pytest.raises(ValueError, match=r"`embeddings\[0\]`.*not finite|NaN|finite"):
    pipe.select_many([(Q0, texts)], embeddings=[np.full((2, 32), np.nan)])
  with pytest.raises(ValueError, match=r"`query_embeddings` must hold one entry per request"):
    pipe.select_many([(Q0, texts)], query_embeddings="abc")
