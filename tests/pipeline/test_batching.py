"""`select_many`'s host side: requests padded straight into the batch arrays equal each request
padded alone (a plain NumPy reference), and a request's text signals are computed once and
read back from the Pipeline's cache by a repeated `select` or `select_many`."""

import numpy as np
import pytest

import jaxsel
from jaxsel._src import bridge, methods
from jaxsel._src.pipeline import solve
from jaxsel.testing import tiny_bert_config, tiny_encoder

DOCS = ["## Shirley Temple\nShirley Temple was an American actress. She served as Chief of "
        "Protocol of the United States.",
        "## Kiss and Tell (1945 film)\nKiss and Tell is a 1945 comedy film starring Shirley "
        "Temple as Corliss Archer.",
        "## Meet Corliss Archer\nMeet Corliss Archer is a radio sitcom. It later ran on TV."]


def _reference(q_emb, p_emb, s_emb, costs, signals, n, q):
  """One request padded by hand: zeros past the real rows, padded candidates invalid and each
  in its own group (`n + index`)."""
  m, d = p_emb.shape
  out = {"query": np.zeros((q, d), np.float32), "query_valid": np.zeros(q, bool),
         "passages": np.zeros((n, d), np.float32), "symmetric": np.zeros((n, d), np.float32),
         "costs": np.zeros(n, np.float32), "valid": np.arange(n) < m,
         "links": np.zeros((n, n), np.float32), "mentioned": np.zeros(n, np.float32),
         "entities": np.zeros((n, n), np.float32), "groups": np.arange(n, dtype=np.int32),
         "overlap": np.zeros(n, np.float32), "covered": np.zeros((n, n), np.float32),
         "shared": np.zeros((n, n), np.float32)}
  if q_emb is not None:
    out["query"][:len(q_emb)] = q_emb
    out["query_valid"][:len(q_emb)] = True
  out["passages"][:m], out["symmetric"][:m], out["costs"][:m] = p_emb, s_emb, costs
  if signals is not None:
    out["links"][:m, :m], out["entities"][:m, :m] = signals.links, signals.entities
    out["mentioned"][:m] = signals.mentioned
    out["groups"] = np.concatenate([signals.groups, np.arange(m, n) + n]).astype(np.int32)
    if signals.overlap is not None:
      out["overlap"][:m] = signals.overlap
      out["covered"][:m, :m], out["shared"][:m, :m] = signals.covered, signals.shared
  return out


def test_pad_batch_equals_each_request_padded_alone():
  rng = np.random.default_rng(0)
  reqs = []
  for m, nq, with_signals in ((5, 1, True), (12, 3, False), (1, 0, True), (16, 2, True),
                              (7, 1, "lexical")):
    sig = None
    if with_signals:
      lexical = {}
      if with_signals == "lexical":  # the lexical overlaps (bridge.lexical_signals)
        lexical = dict(overlap=rng.random(m).astype(np.float32),
                       covered=rng.random((m, m)).astype(np.float32),
                       shared=rng.random((m, m)).astype(np.float32))
      sig = bridge.BridgeSignals(
          links=rng.random((m, m)).astype(np.float32), mentioned=rng.random(m).astype(np.float32),
          entities=rng.random((m, m)).astype(np.float32),
          groups=rng.integers(0, m, m).astype(np.int32), **lexical)
    reqs.append((rng.normal(size=(nq, 8)).astype(np.float32) if nq else None,
                 rng.normal(size=(m, 8)).astype(np.float32),
                 rng.normal(size=(m, 8)).astype(np.float32),
                 rng.integers(1, 50, m).astype(np.float32), sig))
  batch = solve.pad_batch(reqs, n=16, q=4)
  for i, r in enumerate(reqs):
    want = _reference(*r, n=16, q=4)
    got = solve.row(batch, i)
    for name, value in want.items():
      have = getattr(got.signals if name in methods.TextSignals._fields else got, name)
      np.testing.assert_array_equal(have, value, err_msg=name)
      assert have.dtype == value.dtype, name


def test_a_batch_without_text_signals_carries_none():
  """Only the scorers that read the text signals get them: a facility-location, NaiveRAG or
  relevance-scored request carries no `[N, N]` signal arrays at all."""
  rng = np.random.default_rng(1)
  reqs = [(rng.normal(size=(1, 8)).astype(np.float32), rng.normal(size=(m, 8)).astype(np.float32),
           rng.normal(size=(m, 8)).astype(np.float32), np.ones(m, np.float32), None)
          for m in (3, 9)]
  batch = solve.pad_batch(reqs, n=12, q=1)
  assert batch.signals is None and solve.row(batch, 1).signals is None
  assert solve.request(solve.row(batch, 0)).signals is None
  # A signal-reading scorer on such a request sees zeros and one group per candidate.
  sig = methods.signals_of(solve.request(solve.row(batch, 0)))
  assert not np.asarray(sig.links).any() and np.array_equal(sig.groups, np.arange(12))


def test_text_signals_are_computed_once_per_request(monkeypatch):
  """The signals (tens of ms of Python per request) were computed again at every call."""
  calls = []
  real = methods.text_signals

  def counted(*args):
    calls.append(args)
    return real(*args)

  monkeypatch.setattr(methods, "text_signals", counted)
  enc = tiny_encoder(tiny_bert_config(max_position_embeddings=256))
  pipe = jaxsel.Pipeline(enc, method="corag", corag_scorer="bridge", iterations=4, max_tokens=40)
  first = pipe.select("Who played Corliss Archer?", DOCS, budget=60)
  assert len(calls) == 1
  again = pipe.select("Who played Corliss Archer?", DOCS, budget=60)
  many = pipe.select_many([("Who played Corliss Archer?", DOCS),
                           ("Where did Shirley Temple serve?", DOCS)], budget=60)
  assert len(calls) == 2  # only the second question's signals are new
  np.testing.assert_array_equal(first.indices, again.indices)
  np.testing.assert_array_equal(first.indices, many[0].indices)
  # Another question over the same passages has its own signals (the query names entities).
  other = pipe.select("Where did Shirley Temple serve?", DOCS, budget=60)
  assert len(calls) == 2
  np.testing.assert_array_equal(other.indices, many[1].indices)
  # A Pipeline whose cache keeps nothing computes them at every call.
  pipe0 = jaxsel.Pipeline(enc, method="corag", corag_scorer="bridge", iterations=4,
                          max_tokens=40, cache_size=0)
  pipe0.select("Who played Corliss Archer?", DOCS, budget=60)
  pipe0.select("Who played Corliss Archer?", DOCS, budget=60)
  # twice a call: for the sentences and for the passage guide (here the same one-sentence
  # passages, which the cache would have shared: `guide.py`)
  assert len(calls) == 2 + 2 * 2


def test_the_request_carries_the_lexical_signals():
  """A scorer built from the request's `overlap` (the share of the question's IDF weight in each
  passage, `bridge.lexical_signals`) picks, within a one-passage budget, the passage a plain
  reference ranks first: `select` and `select_many` hand the lexical signals to the scorer."""
  enc = tiny_encoder(tiny_bert_config(max_position_embeddings=256))
  question = "Which radio sitcom ran on TV later?"
  pipe = jaxsel.Pipeline(enc, method="corag", corag_scorer=lambda req: jaxsel.relevance_scorer(req.signals.overlap),
                         iterations=6, top_up=False, max_tokens=40)
  passages = pipe.split(DOCS)
  costs = max(p.tokens for p in passages)
  overlap, _, _ = bridge.lexical_signals(question, [p.text for p in passages],
                                         [p.doc for p in passages])
  want = passages[int(np.argmax(overlap))]
  assert overlap.max() > np.sort(overlap)[-2]  # one best passage
  assert pipe.select(question, passages, budget=costs).passages == [want]
  assert pipe.select_many([(question, passages)], budget=costs)[0].passages == [want]


def test_the_old_signal_fields_still_read_with_a_deprecation_warning():
  """The seven signal arrays were fields of `Request`; custom scorers that read `req.links`
  keep working for now, and are told where the signals went."""
  rng = np.random.default_rng(2)
  links = rng.random((4, 4)).astype(np.float32)
  req = methods.request(rng.normal(size=(1, 8)), rng.normal(size=(4, 8)), costs=np.ones(4),
                        links=links)
  with pytest.warns(DeprecationWarning, match="signals_of"):
    np.testing.assert_array_equal(req.links, links)
  with pytest.warns(DeprecationWarning):
    assert not np.asarray(req.overlap).any()  # absent: zeros, as before


@pytest.mark.parametrize("method,rows", [("corag", 1), ("corag", 4), ("facility_location", 1)])
def test_select_many_is_bitwise_select_in_batches_of_any_size(method, rows):
  """Every solve runs in one program of `solve_rows` rows, so a request's floats do not depend
  on how many requests shared its batch: XLA:CPU's programs of 1, 4 and 8+ rows sum in
  different orders (the gains differed in the 7th digit and turned near ties). Ten requests of
  one shape bucket, batched and one by one: the same picks, gains, curve and scores, bit for
  bit."""
  enc = tiny_encoder(tiny_bert_config(max_position_embeddings=256))
  rng = np.random.default_rng(3)
  words = "river delta basin flood plain estuary current valley glacier lake marsh".split()
  requests = []
  for r in range(10):
    docs = [" ".join(rng.choice(words, size=int(rng.integers(6, 14)))) + "." for _ in range(12)]
    requests.append((" ".join(rng.choice(words, size=4)) + "?", docs))
  pipe = jaxsel.Pipeline(enc, method=method, max_tokens=32, solve_rows=rows)
  many = pipe.select_many(requests, budget=48)
  for got, (q, docs) in zip(many, requests):
    one = pipe.select(q, docs, budget=48)
    np.testing.assert_array_equal(got.indices, one.indices)
    for name in ("gains", "curve", "scores"):
      np.testing.assert_array_equal(getattr(got, name), getattr(one, name), err_msg=name)
