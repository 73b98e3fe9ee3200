"""The second-hop scorers (jaxsel/_src/scorers/hops.py): values against a NumPy reference,
the learned scorer under jit/vmap in `corag_search` and in Pipelines built again from the same
weights (no new program), the shipped weights (checksum), and the training script (loss falls,
a checkpoint resumes bit-identically)."""

import itertools
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from jaxsel._src import methods
from jaxsel._src.scorers import hops
from jaxsel.testing import tiny_bert_config, tiny_encoder

from compiles import CompileCounter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from training import hop_features, qa, train_hops  # noqa: E402


def _request(seed, n=7, d=16):
  rng = np.random.default_rng(seed)
  e = rng.normal(size=(n, d)).astype(np.float32)
  e /= np.linalg.norm(e, axis=1, keepdims=True)
  q = rng.normal(size=(1, d)).astype(np.float32)
  q /= np.linalg.norm(q)
  links = (rng.random((n, n)) < 0.2).astype(np.float32)
  np.fill_diagonal(links, 0)
  ent = rng.random((n, n)).astype(np.float32) * (rng.random((n, n)) < 0.3)
  return methods.request(q, e, costs=rng.integers(20, 120, n).astype(np.float32), links=links,
                         mentioned=(rng.random(n) < 0.2).astype(np.float32), entities=ent,
                         valid=np.arange(n) < n - 1)


def _value_reference(u, g, order, valid):
  """`Σ_t u(o_t) + Σ_{t≥1} max(0, max_{s<t} g(o_s, o_t) − u(o_t))` in plain Python."""
  total = 0.0
  for t, j in enumerate(order):
    uj = u[j] if valid[j] else 0.0
    total += uj
    if t:
      best = max(g[i, j] if valid[i] and valid[j] else 0.0 for i in order[:t])
      total += max(0.0, best - uj)
  return total


def test_reformulated_relevance_is_the_cosine_of_the_moved_query():
  rng = np.random.default_rng(0)
  e = rng.normal(size=(5, 8))
  e /= np.linalg.norm(e, axis=1, keepdims=True)
  q = rng.normal(size=8)
  q /= np.linalg.norm(q)
  rel, sim = e @ q, e @ e.T
  got = np.asarray(hops.reformulated_relevance(jnp.asarray(rel, jnp.float32),
                                               jnp.asarray(sim, jnp.float32), jnp.ones(5, bool)))
  for i, j in itertools.permutations(range(5), 2):
    h = (q + e[i]) / np.linalg.norm(q + e[i])
    assert got[i, j] == pytest.approx(h @ e[j], abs=1e-5)
  np.testing.assert_array_equal(np.diag(got), 0)


def test_rank_features_are_clipped_to_the_training_range():
  # Ranks beyond the 10 candidates of the training questions (MuSiQue's 20) were given as is and
  # made the model rank its 11th-best chunk first; they are clipped at RANK_CLIP.
  req = _request(4, n=20)
  rel = np.asarray(methods.best_relevance(req))
  valid = np.asarray(req.valid)
  uf = np.asarray(hops.unary_features(jnp.asarray(rel), req.similarity, methods.signals_of(req).mentioned, req.costs,
                                      req.valid))
  col = hops.UNARY_FEATURES.index("relevance_rank")
  rv = np.where(valid, rel, -np.inf)
  want = np.minimum([(rv > rv[j]).sum() for j in range(20)], hops.RANK_CLIP) / hops.RANK_SCALE
  np.testing.assert_allclose(uf[valid, col], want[valid], atol=1e-6)
  assert uf[:, col].max() == pytest.approx(hops.RANK_CLIP / hops.RANK_SCALE)
  pf = np.asarray(hops.pair_features(jnp.asarray(rel), req.similarity, methods.signals_of(req).links, methods.signals_of(req).entities,
                                     req.valid))
  assert pf[..., hops.PAIR_FEATURES.index("second_hop_rank")].max() == pytest.approx(
      hops.RANK_CLIP / hops.RANK_SCALE)


def test_lexical_features_equal_a_numpy_reference():
  """The lexical columns (`bridge.lexical_signals`: no titles or capitals needed) of both
  feature sets, on 20 candidates, the last invalid."""
  n = 20
  req = _request(5, n=n)
  rng = np.random.default_rng(5)
  ov = rng.random(n).astype(np.float32)
  cov = np.maximum(ov[:, None], ov[None, :]) + rng.random((n, n)).astype(np.float32) * 0.1
  sh = rng.random((n, n)).astype(np.float32) * (rng.random((n, n)) < 0.5)
  rel = np.asarray(methods.best_relevance(req))
  valid = np.asarray(req.valid)
  uf = np.asarray(hops.unary_features(jnp.asarray(rel), req.similarity, methods.signals_of(req).mentioned, req.costs,
                                      req.valid, overlap=jnp.asarray(ov)))
  o = np.where(valid, ov, 0.0)
  ranks = np.asarray([(np.where(valid, o, -np.inf) > o[j]).sum() for j in range(n)])
  col = {f: hops.UNARY_FEATURES.index(f) for f in ("overlap", "overlap_gap", "overlap_rank")}
  np.testing.assert_allclose(uf[valid, col["overlap"]], o[valid], atol=1e-6)
  np.testing.assert_allclose(uf[valid, col["overlap_gap"]], (o - o[valid].max())[valid], atol=1e-6)
  np.testing.assert_allclose(uf[valid, col["overlap_rank"]],
                             np.minimum(ranks, hops.RANK_CLIP)[valid] / hops.RANK_SCALE, atol=1e-6)
  assert not uf[~valid].any()
  pf = np.asarray(hops.pair_features(jnp.asarray(rel), req.similarity, methods.signals_of(req).links, methods.signals_of(req).entities,
                                     req.valid, overlap=jnp.asarray(ov), covered=jnp.asarray(cov),
                                     shared=jnp.asarray(sh)))
  col = {f: hops.PAIR_FEATURES.index(f) for f in hops.PAIR_FEATURES}
  for i in range(n):
    for j in range(n):
      if not (valid[i] and valid[j]):
        assert not pf[i, j].any()
        continue
      row = [sh[i, k] for k in range(n) if valid[k] and k != i]
      rank = sum(x > sh[i, j] for x in row) if i != j else len(row)  # the diagonal: -inf
      want = {"overlap_i": o[i], "overlap_j": o[j], "covered": cov[i, j],
              "covered_lift": cov[i, j] - o[i], "shared": sh[i, j],
              "shared_rank": min(rank, hops.RANK_CLIP) / hops.RANK_SCALE}
      for f, w in want.items():
        assert pf[i, j, col[f]] == pytest.approx(w, abs=1e-6), (i, j, f)


def test_weights_of_fewer_features_read_the_first_ones():
  """Features are only appended: a model trained before the lexical ones (7 unary, 11 pair
  features) reads the first columns, so its scores do not change."""
  req = _request(2)
  old = hops.init_params(jax.random.key(1), hidden=8, unary_features=7, pair_features=11)
  uf = hops.unary_features(methods.best_relevance(req), req.similarity, methods.signals_of(req).mentioned, req.costs,
                           req.valid, overlap=jnp.linspace(0, 1, 7))
  pf = hops.pair_features(methods.best_relevance(req), req.similarity, methods.signals_of(req).links, methods.signals_of(req).entities,
                          req.valid, shared=jnp.ones((7, 7)))
  np.testing.assert_array_equal(np.asarray(hops.mlp(old, "unary", uf)),
                                np.asarray(hops.mlp(old, "unary", uf[:, :7])))
  np.testing.assert_array_equal(np.asarray(hops.mlp(old, "pair", pf)),
                                np.asarray(hops.mlp(old, "pair", pf[..., :11])))


@pytest.mark.parametrize("seed", [0, 1])
def test_learned_scorer_value_and_gains_match_reference(seed):
  req = _request(seed)
  params = hops.init_params(jax.random.key(seed), hidden=8)
  kw = dict(relevance=methods.best_relevance(req), similarity=req.similarity, links=methods.signals_of(req).links,
            entities=methods.signals_of(req).entities, mentioned=methods.signals_of(req).mentioned, costs=req.costs, valid=req.valid)
  sc = hops.learned_hop_scorer(params, **kw)
  u, g = (np.asarray(x) for x in hops.hop_probabilities(params, **kw))
  valid = np.asarray(req.valid)
  for order in ([3], [0, 4], [5, 1, 2], [2, 6, 0, 1]):  # 6 is invalid
    o = jnp.asarray(order + [-1] * (7 - len(order)), jnp.int32)
    assert float(sc(o)) == pytest.approx(_value_reference(u, g, order, valid), abs=1e-5)
    gains = np.asarray(sc.append_gains(o))
    for j in range(7):
      if j not in order:
        want = _value_reference(u, g, order + [j], valid) - _value_reference(u, g, order, valid)
        assert gains[j] == pytest.approx(want, abs=1e-5)


def test_hop_scorer_counts_a_later_chunk_by_its_reformulated_relevance():
  rel = np.asarray([0.5, 0.1, 0.2], np.float32)
  sim = np.asarray([[1, 0.8, 0.1], [0.8, 1, 0.0], [0.1, 0.0, 1]], np.float32)
  sc = hops.hop_scorer(jnp.asarray(rel), jnp.asarray(sim))
  r2 = lambda i, j: (rel[j] + sim[i, j]) / np.sqrt(2 + 2 * rel[i])  # noqa: E731
  assert float(sc(jnp.asarray([0, 1, -1]))) == pytest.approx(0.5 + max(0.1, r2(0, 1)), abs=1e-6)
  assert float(sc(jnp.asarray([1, 0, -1]))) == pytest.approx(0.1 + max(0.5, r2(1, 0)), abs=1e-6)
  assert float(sc(jnp.asarray([0, 2, -1]))) == pytest.approx(0.5 + max(0.2, r2(0, 2)), abs=1e-6)


def test_learned_scorer_in_corag_search_under_jit_and_vmap_equals_one_by_one():
  params = hops.init_params(jax.random.key(3), hidden=8)
  reqs = [_request(s) for s in range(3)]
  build = methods.learned_hops_builder(params)

  def run(req):
    return jaxsel.corag_search(build(req), req.costs, budget=200.0, iterations=6,
                               valid=req.valid).order

  batched = jax.jit(jax.vmap(run))(jax.tree.map(lambda *x: jnp.stack(x), *reqs))
  for r, req in enumerate(reqs):
    np.testing.assert_array_equal(np.asarray(batched[r]), np.asarray(run(req)))


def test_shipped_weights_load_with_their_checksum(tmp_path):
  params = hops.load_hop_params()
  assert hops.file_sha256(hops.WEIGHTS) == hops.WEIGHTS_SHA256
  assert os.path.getsize(hops.WEIGHTS) < 10 * 2 ** 20
  assert params["unary.mean"].shape == (len(hops.UNARY_FEATURES),)
  assert params["pair.mean"].shape == (len(hops.PAIR_FEATURES),)
  bad = tmp_path / "w.safetensors"
  bad.write_bytes(open(hops.WEIGHTS, "rb").read()[:-1] + b" ")
  with pytest.raises(ValueError, match="SHA-256"):
    hops.load_hop_params(str(bad), sha256=hops.WEIGHTS_SHA256)


def test_weights_first_loaded_inside_jit_do_not_leak_a_tracer():
  # The cached weights were JAX arrays: a first load inside a jit trace (the Pipeline's solve
  # with the default scorer) cached that trace's tracers, and the next call failed with
  # UnexpectedTracerError.
  hops.load_hop_params.cache_clear()
  inside = jax.jit(lambda x: x + sum(v.sum() for v in hops.load_hop_params().values()))(0.0)
  params = hops.load_hop_params()
  assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 and not v.flags.writeable
             for v in params.values())
  np.testing.assert_allclose(float(inside), sum(float(v.sum()) for v in params.values()),
                             rtol=1e-5)


def test_saved_weights_are_byte_identical_for_the_same_params_and_recipe(tmp_path):
  # safetensors wrote several metadata keys in a random order: a retrain with the same recipe
  # gave bit-identical weights but another file (and SHA-256).
  params = hops.init_params(jax.random.key(0), hidden=4)
  meta = {f"key{i}": i for i in range(8)}
  shas = {hops.save_hop_params(str(tmp_path / f"w{i}.safetensors"), params, meta) for i in range(4)}
  assert len(shas) == 1
  loaded = hops.load_hop_params(str(tmp_path / "w0.safetensors"), sha256=shas.pop())
  for k in params:
    np.testing.assert_array_equal(np.asarray(loaded[k]), np.asarray(params[k]))


def test_training_loss_falls_and_a_checkpoint_resumes_bit_identically(tmp_path):
  rng = np.random.default_rng(0)
  q, n = 12, train_hops.N_PAD
  data = {"unary": rng.normal(size=(q, n, len(hops.UNARY_FEATURES))).astype(np.float32),
          "pair": rng.normal(size=(q, n, n, len(hops.PAIR_FEATURES))).astype(np.float32),
          "gold": np.zeros((q, n), np.float32), "valid": np.ones((q, n), bool)}
  data["gold"][:, :2] = 1
  data["unary"][:, :2, 0] += 2.0  # the gold candidates are the relevant ones
  whole, losses = train_hops.train(data, steps=8, batch_size=4, hidden=8, log=lambda m: None)
  assert np.mean(losses[-3:]) < np.mean(losses[:3])
  ckpt = str(tmp_path / "ckpt")
  train_hops.train(data, steps=4, batch_size=4, hidden=8, ckpt=ckpt, save_every=4, log=lambda m: None)
  resumed, rest = train_hops.train(data, steps=8, batch_size=4, hidden=8, ckpt=ckpt, save_every=4,
                                   log=lambda m: None)
  assert len(rest) == 4
  for k in whole:
    np.testing.assert_array_equal(np.asarray(whole[k]), np.asarray(resumed[k]))


@pytest.mark.slow
def test_shipped_weights_reproduce_the_recorded_picks_offline():
  # tests/data/hop_scorer_reference.json: the first 8 HotpotQA test questions without titles at
  # 256 tokens, recorded by `python -m training forms --record` with the shipped weights; here
  # recomputed with the real all-MiniLM-L6-v2 through Pipeline.select_many.
  with open(os.path.join(ROOT, "tests", "data", "hop_scorer_reference.json")) as f:
    ref = json.load(f)
  assert ref["weights_sha256"] == hops.WEIGHTS_SHA256
  enc = jaxsel.load_encoder(ref["encoder"])
  inputs = [(q["question"], hop_features.paragraph_passages(
      qa.QAExample(q["id"], q["question"], tuple(q["titles"]), tuple(q["paragraphs"]),
                   tuple(q["gold"]), ()), ref["form"], enc.tokenizer)) for q in ref["questions"]]
  for method in ("naive", "learned_hops"):
    pipe = jaxsel.Pipeline(enc, method="naive") if method == "naive" else jaxsel.Pipeline(
        enc, method="corag", corag_scorer="learned_hops")
    results = pipe.select_many(inputs, budget=ref["budget"], granularity="passage")
    got = [[ps.index(p) for p in r.passages] for (_, ps), r in zip(inputs, results)]
    # What the context holds is recorded exactly; the order of two picks whose values tie to
    # float rounding may differ on another CPU (XLA sums in another order there: the record's
    # [2, 7, 4] is [2, 4, 7] on an AVX2-only machine), so the orders are compared as sets.
    assert [sorted(g) for g in got] == [sorted(q[f"picks_{method}"]) for q in ref["questions"]]
    strict = np.mean([all(j in g for j, gold in enumerate(q["gold"]) if gold)
                      for g, q in zip(got, ref["questions"])])
    assert strict == pytest.approx(ref[f"strict_{method}"])


def test_with_distractors_appends_the_next_questions_paragraphs_as_non_gold():
  rng = np.random.default_rng(0)

  def feats(qid, question, titles, paras, gold):
    ex = qa.QAExample(qid, question, tuple(titles), tuple(paras), tuple(gold), ())
    ps = [jaxsel.Passage(f"{t}: {p}", 0, len(t) + 2 + len(p), doc=i, tokens=10, title=t)
          for i, (t, p) in enumerate(zip(titles, paras))]
    sig = methods.text_signals([p.text for p in ps], [p.doc for p in ps], [p.title for p in ps], [question])
    return hop_features.Features(ex, ps, rng.normal(size=4), rng.normal(size=(len(ps), 4)), sig,
                                 np.asarray(gold, bool))

  a = feats("a", "Who owns it?", ["Alpha Corp", "Beta"], ["Alpha Corp is a firm.", "Beta is a town."],
            [True, False])
  b = feats("b", "What is Delta?", ["Gamma", "Delta"], ["Gamma was bought by Alpha Corp.", "Delta is."],
            [False, True])
  out = train_hops.with_distractors([a, b])
  assert len(out) == 2
  x = out[0]
  assert [p.text for p in x.passages] == [p.text for p in a.passages + b.passages]
  assert [p.doc for p in x.passages] == [0, 1, 2, 3]
  np.testing.assert_array_equal(x.gold, [True, False, False, False])
  np.testing.assert_array_equal(x.emb, np.concatenate([a.emb, b.emb]))
  np.testing.assert_array_equal(x.query, a.query)
  assert x.signals.links[2, 0] == 1  # Gamma's paragraph names Alpha Corp: a link across the two
  np.testing.assert_array_equal(out[1].gold, [False, True, False, False])
  assert out[1].example.question == "What is Delta?"
  # At most `n` candidates: questions that already have them (MuSiQue's 20) gave 40 and the
  # training arrays of N_PAD = 20 failed to take them; they are left out, others are cut.
  full = train_hops.with_distractors([a, b], n=2)
  assert full == []
  cut = train_hops.with_distractors([a, b], n=3)
  assert [len(x.passages) for x in cut] == [3, 3] and cut[0].emb.shape == (3, 4)
  np.testing.assert_array_equal(cut[0].gold, [True, False, False])
  assert cut[0].signals.links.shape == (3, 3)


def test_a_pipeline_built_again_from_the_same_weights_compiles_nothing():
  # A builder was hashed by identity: a Pipeline built again from the same weights (a notebook
  # cell run twice, the evaluation's cells) compiled every program again and kept both copies.
  params = hops.init_params(jax.random.key(5), hidden=8)
  a = methods.learned_hops_builder(params)
  b = methods.learned_hops_builder(jax.tree.map(np.array, params))  # equal weights, new arrays
  other = methods.learned_hops_builder(hops.init_params(jax.random.key(6), hidden=8))
  assert a == b and hash(a) == hash(b) and a != other
  enc = tiny_encoder(tiny_bert_config(max_position_embeddings=256))
  docs = ["## Shirley Temple\nShirley Temple was an American actress. She was a diplomat.",
          "## Kiss and Tell\nKiss and Tell is a 1945 film starring Shirley Temple.",
          "## Corliss Archer\nMeet Corliss Archer is a radio sitcom. It ran on TV."]
  q = "Which diplomat starred in Kiss and Tell?"
  first = jaxsel.Pipeline(enc, corag_scorer=a).select(q, docs, budget=40)
  with CompileCounter() as cc:
    again = jaxsel.Pipeline(enc, corag_scorer=b).select(q, docs, budget=40)
  assert cc.count == 0
  np.testing.assert_array_equal(again.indices, first.indices)
  with CompileCounter() as cc:
    jaxsel.Pipeline(enc, corag_scorer=other).select(q, docs, budget=40)
  assert cc.count > 0  # other weights are other programs
