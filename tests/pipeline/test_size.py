"""The default at the sizes users send: the CORAG search's width, no intermediate beyond N²,
no compile per `k`, and `k` / `pinned` / `max_per_group` counting passages at sentence
granularity."""

import numpy as np
import pytest

import jaxsel
from jaxsel._src import methods
from jaxsel._src.pipeline import solve as solve_lib
from jaxsel._src.pipeline import width as width_lib
from tests.compiles import CompileCounter

DIM = 16


def _request(n, seed=0):
  rng = np.random.default_rng(seed)
  e = rng.normal(size=(n, DIM)).astype(np.float32)
  e /= np.linalg.norm(e, axis=1, keepdims=True)
  q = rng.normal(size=(1, DIM)).astype(np.float32)
  q /= np.linalg.norm(q)
  words = ["Paris", "Seine", "Lyon", "Rhone", "Marseille", "Nice", "Lille", "Rome"]
  ps = [jaxsel.Passage(f"{words[i % 8]} passage {i} names {words[(3 * i) % 8]}.", 0, 30, doc=i,
                       tokens=int(rng.integers(10, 60))) for i in range(n)]
  return q, e, ps


@pytest.fixture(scope="module")
def enc():
  return jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2")


def test_first_pass_interleaves_relevance_and_the_second_hop():
  # Brute force: the two rankings by NumPy, interleaved, each candidate once.
  q, e, _ = _request(40)
  got = width_lib.first_pass(q, e, e, hops=3)
  r = np.clip(q @ e.T, 0, None).max(0)
  src = np.argsort(-r, kind="stable")[:3]
  r2 = (r[None, :] + np.clip(e[src] @ e.T, 0, None)) / np.sqrt(2 + 2 * r[src])[:, None]
  r2[np.arange(3), src] = -np.inf
  seq = [x for pair in zip(np.argsort(-r, kind="stable"), np.argsort(-r2.max(0), kind="stable"))
         for x in pair]
  want = list(dict.fromkeys(int(x) for x in seq))
  assert got.tolist() == want
  assert sorted(got.tolist()) == list(range(40))
  assert width_lib.first_pass(q, e, e, hops=0).tolist() == np.argsort(-r, kind="stable").tolist()


def test_searched_holds_the_pinned_then_the_best_and_skips_repeats():
  q, e, _ = _request(300)
  skip = np.zeros(300, bool)
  skip[np.argsort(-(q @ e.T)[0])[:5]] = True  # the five most relevant are repeats
  idx = width_lib.searched(q, e, e, width=64, pinned=[7, 3], skip=skip)
  assert idx[:2].tolist() == [7, 3] and len(idx) == 64 and len(set(idx.tolist())) == 64
  assert not skip[idx[2:]].any()
  assert width_lib.searched(q, e, e, width=300) is None  # no wider than the request


def test_a_wide_request_is_the_search_over_its_subset_mapped_back(enc):
  # With the top-up off, the default's picks among 300 candidates are the search's over the
  # 128 the first pass keeps: the same as selecting among those 128 alone.
  q, e, ps = _request(300)
  pipe = jaxsel.Pipeline(enc, top_up=False)
  res = pipe.select("Which river flows through Paris?", ps, budget=120, embeddings=e,
                    query_embeddings=q)
  idx = width_lib.searched(q, e, e, width=128)
  sub = [jaxsel.Passage(ps[i].text, 0, 30, doc=j, tokens=ps[i].tokens) for j, i in enumerate(idx)]
  alone = pipe.select("Which river flows through Paris?", sub, budget=120, embeddings=e[idx],
                      query_embeddings=q)
  assert len(res.indices) >= 1
  assert res.indices.tolist() == idx[alone.indices].tolist()
  assert res.cost <= 120
  # The top-up fills from all 300: every pick fits, and the searched ones lead.
  full = jaxsel.Pipeline(enc).select("Which river flows through Paris?", ps, budget=120,
                                     embeddings=e, query_embeddings=q)
  assert full.indices[:len(res.indices)].tolist() == res.indices.tolist()
  assert full.cost <= 120 and len(full.indices) >= len(res.indices)


@pytest.mark.parametrize("scorer", ["learned_hops", "bridge"])
def test_the_corag_solve_at_1000_candidates_holds_no_cube(scorer):
  # The compiled program's scratch at N = 1,000 (bucket 1,024) stays within 16 [N, N] float
  # matrices (67 MB): without the search's width the learned scorer's pair MLP over all pairs
  # took 4.5 GB, the bridge scorer's curve an [N, N, N] intermediate 25.8 GB.
  n = 1000
  q, e, _ = _request(n)
  n_pad = solve_lib.bucket(n)
  idx = width_lib.searched(q, e, e, width=128)
  m = len(idx)
  z = np.zeros((m, m), np.float32)
  sig = methods.TextSignals(z, np.zeros(m, np.float32), z, np.arange(m, dtype=np.int32),
                            np.zeros(m, np.float32), z, z)
  inputs = solve_lib.pad_batch([(q, e, e, np.full(n, 30.0, np.float32), sig, None, None, idx)],
                               n=n_pad, q=1, w=128)
  settings = solve_lib.stack([solve_lib.Settings.of(budget=200, min_gain=None, discount=0.9,
                                                    exploration=2.0, cost_penalty=0.2,
                                                    diversity=0.3)])
  config = solve_lib.SolveConfig(method="corag", k=n_pad, depth=n_pad, scorer=scorer,
                                 top_up=True, width=128)
  compiled = solve_lib.solve_batch.lower(inputs, settings, config=config).compile()
  assert compiled.memory_analysis().temp_size_in_bytes < 16 * n_pad * n_pad * 4
  out = solve_lib.run(inputs, settings, config)
  order = out.order[0][out.order[0] >= 0]
  assert 1 <= len(order) and np.sum(inputs.costs[0][order]) <= 200


def test_new_k_values_compile_nothing_and_match_a_fresh_pipeline(enc):
  # k is a run-time value of CORAG, NaiveRAG and MMR: after one call, twelve other k compile
  # no program, and each answer is what a pipeline that never saw another k gives.
  q, e, ps = _request(40, seed=1)
  for method in ("corag", "naive", "mmr"):
    pipe = jaxsel.Pipeline(enc, method=method)
    pipe.select("Which river flows through Paris?", ps, budget=200, embeddings=e,
                query_embeddings=q, k=3)
    got = {}
    with CompileCounter() as cc:
      for k in range(1, 13):
        got[k] = pipe.select("Which river flows through Paris?", ps, budget=200, embeddings=e,
                             query_embeddings=q, k=k).indices.tolist()
    assert cc.count == 0, method
    for k in (1, 5, 12):
      fresh = jaxsel.Pipeline(enc, method=method).select(
          "Which river flows through Paris?", ps, budget=200, embeddings=e, query_embeddings=q, k=k)
      assert got[k] == fresh.indices.tolist() and len(got[k]) <= k


DOCS = ["Paris is the capital of France. The Seine flows through Paris. It has many bridges.",
        "Lyon lies on the Rhone. The Rhone meets the Saone there.",
        "Marseille is a port. It faces the Mediterranean. Its old port is famous.",
        "The Loire is the longest river in France. It flows into the Atlantic."]


def test_sentence_granularity_k_counts_passages(enc):
  pipe = jaxsel.Pipeline(enc)
  for k in (1, 2):
    res = pipe.select("Which rivers flow in France?", DOCS, budget=400, k=k,
                      granularity="sentence")
    assert 1 <= len({p.doc for p in res.passages}) <= k
  # More than one sentence of one passage still counts once.
  res = pipe.select("Which rivers flow in France?", DOCS, budget=400, k=1, granularity="sentence")
  assert res.cost > 0 and len({p.doc for p in res.passages}) == 1


def test_sentence_granularity_a_pinned_two_sentence_document_fits_k_1(enc):
  res = jaxsel.Pipeline(enc).select("Which river flows through Lyon?", DOCS, budget=400, k=1,
                                    pinned=[1], granularity="sentence")
  assert {p.doc for p in res.passages} == {1}
  assert "Lyon lies on the Rhone." in res.context()


def test_sentence_granularity_max_per_group_counts_passages(enc):
  groups = ["a", "a", "b", "b"]
  for method in ("corag", "naive", "coverage"):
    q = None if method == "coverage" else "Which rivers flow in France?"
    res = jaxsel.Pipeline(enc, method=method).select(q, DOCS, budget=400, groups=groups,
                                                     max_per_group=1, granularity="sentence")
    docs = {p.doc for p in res.passages}
    assert len(docs & {0, 1}) <= 1 and len(docs & {2, 3}) <= 1, method
    assert docs, method


def test_embeddings_of_extreme_magnitude_give_their_true_cosine(enc):
  # Entries of 1e20 (and a query of 1e-30) overflowed (underflowed) float32's norm: every
  # relevance was 0. They are scaled by a power of two first; ordinary rows are unchanged.
  e = np.array([[1e20, 1e20, 0], [1e20, 0, 0], [0, 0, 1e20]], np.float32)
  q = np.array([[1e-30, 0, 0]], np.float32)
  ps = [jaxsel.Passage(t, 0, len(t), doc=i, tokens=10) for i, t in enumerate(["a b", "c d", "e f"])]
  res = jaxsel.Pipeline(enc, method="naive").select("q", ps, budget=100, embeddings=e,
                                                    query_embeddings=q)
  np.testing.assert_allclose(res.candidate_scores[0], [0.70710677, 1.0, 0.0], atol=1e-6)
  x = np.random.default_rng(0).normal(size=(20, DIM)).astype(np.float32)
  plain = x / np.linalg.norm(x, axis=-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(jaxsel.cosine_similarity(x, nonneg=None)), plain @ plain.T,
                             atol=1e-6)
