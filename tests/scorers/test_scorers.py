"""Scorers against plain references: NumPy formulas, Python token assembly, the tokenizer's own
pair encoding and the tiny encoder / cross-encoder called directly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from jaxsel._src.scorers import base as scorer_base
from jaxsel._src.scorers import basic as scorers
from jaxsel._src.scorers import model as scorer_model
from jaxsel.testing import tiny_cross_encoder, tiny_encoder

import reference


def _orders(rng, n, d, num):
  out = np.full((num, d), -1, np.int32)
  for r in range(num):
    k = rng.integers(0, d + 1)
    out[r, :k] = rng.permutation(n)[:k]
  return out


@jax.jit
def _batched(scorer, orders):
  return jax.vmap(scorer)(orders)


def test_pairwise_and_link_match_numpy():
  rng = np.random.default_rng(0)
  n, d = 7, 4
  u, p = rng.normal(size=n), rng.normal(size=(n, n))
  link, src = (rng.uniform(size=(n, n)) < 0.3) * rng.uniform(size=(n, n)), rng.uniform(size=n)
  pw = scorers.pairwise_scorer(p, unary=u, discount=0.7)
  lk = scorers.link_scorer(link, source=src)
  orders = _orders(rng, n, d, 30)
  got_p = np.asarray(_batched(pw, orders))
  got_l = np.asarray(_batched(lk, orders))
  for r, row in enumerate(orders):
    o = [int(j) for j in row if j >= 0]
    want_p = sum(0.7 ** t * u[j] for t, j in enumerate(o)) + sum(
        p[o[s], o[t]] for t in range(len(o)) for s in range(t))
    want_l = sum(max([link[o[s], o[t]] * src[o[s]] for s in range(t)], default=0.0)
                 for t in range(len(o)))
    np.testing.assert_allclose(got_p[r], want_p, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_l[r], want_l, rtol=1e-5, atol=1e-5)
  # A link counts only from an EARLIER chunk.
  one = scorers.link_scorer(np.array([[0, 1.0], [0, 0]]))
  assert float(one(jnp.array([0, 1]))) == 1.0 and float(one(jnp.array([1, 0]))) == 0.0


@pytest.mark.parametrize("kind", ["facility", "saturated"])
def test_objective_scorer_matches_reference(kind):
  rng = np.random.default_rng(1)
  n, d = 6, 4
  emb = rng.normal(size=(n, 5))
  sim = np.asarray(jaxsel.cosine_similarity(emb))
  rel = rng.uniform(size=(2, n))
  if kind == "facility":
    obj, ref = jaxsel.facility_location(sim, rel), reference.fl_value
  else:
    obj, ref = jaxsel.saturated_coverage(sim, rel), reference.sc_value
  flat = scorers.objective_scorer(obj)
  disc = scorers.objective_scorer(obj, discount=0.5)
  orders = _orders(rng, n, d, 20)
  got, got_d = _batched(flat, orders), _batched(disc, orders)
  for r, row in enumerate(orders):
    o = [int(j) for j in row if j >= 0]
    mask = np.isin(np.arange(n), o)
    np.testing.assert_allclose(got[r], obj.value(mask), rtol=1e-5, atol=1e-6)
    prefix = [ref(sim, rel, np.isin(np.arange(n), o[:t])) for t in range(len(o) + 1)]
    want = sum(0.5 ** t * (prefix[t + 1] - prefix[t]) for t in range(len(o)))
    np.testing.assert_allclose(got_d[r], want, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="discount"):
    scorers.objective_scorer(obj, discount=1.5)
  with pytest.raises(TypeError, match="objective"):
    scorers.objective_scorer(sim)


def test_composition():
  rng = np.random.default_rng(2)
  a = scorers.relevance_scorer(rng.uniform(size=5))
  b = scorers.pairwise_scorer(rng.normal(size=(5, 5)))
  c = scorers.link_scorer(rng.uniform(size=(5, 5)))
  o = jnp.array([3, 1, 4, -1], jnp.int32)
  call = jax.jit(lambda s: s(o))
  va, vb, vc = float(call(a)), float(call(b)), float(call(c))
  np.testing.assert_allclose(call(0.7 * a + 0.3 * b), 0.7 * va + 0.3 * vb, rtol=1e-6)
  np.testing.assert_allclose(call(a - b), va - vb, rtol=1e-5)
  np.testing.assert_allclose(call(2.0 * (a + b) + c), 2 * va + 2 * vb + vc, rtol=1e-5)
  np.testing.assert_allclose(call(jaxsel.weighted_sum([(0.5, a), (2.0, a + c)])),
                             2.5 * va + 2 * vc, rtol=1e-5)
  s = 0.7 * a + 0.3 * b
  assert len(s.terms) == 2 and s.num_candidates == 5
  # Per-query weights under vmap: a batch of sums with different weights.
  ws = jnp.array([0.0, 1.0, 2.0])
  batch = jax.vmap(lambda w: w * a + b)(ws)
  np.testing.assert_allclose(jax.jit(jax.vmap(lambda s: s(o)))(batch), ws * va + vb, rtol=1e-5)
  with pytest.raises(ValueError, match="different candidate counts"):
    a + scorers.relevance_scorer(np.ones(4))
  with pytest.raises(TypeError, match="pair"):
    jaxsel.weighted_sum([a])
  with pytest.raises(ValueError, match="empty"):
    jaxsel.weighted_sum([])


def test_append_gains_equal_full_scoring():
  """Each scorer's incremental path: `scorer(order) + append_gains(order)[j]` is the full value
  of `order` with j appended, for random orders of every length (also composed and batched)."""
  rng = np.random.default_rng(3)
  n, d = 7, 4
  u, p = rng.normal(size=n), rng.normal(size=(n, n))
  link, src = (rng.uniform(size=(n, n)) < 0.3) * rng.uniform(size=(n, n)), rng.uniform(size=n)
  emb = rng.normal(size=(n, 5))
  sim, rel = np.asarray(jaxsel.cosine_similarity(emb)), rng.uniform(size=(2, n))
  pw = scorers.pairwise_scorer(p, unary=u, discount=0.7)
  lk = scorers.link_scorer(link, source=src)
  cases = [pw, scorers.relevance_scorer(u, discount=0.9), lk, 0.6 * pw - 0.3 * lk,
           scorers.objective_scorer(jaxsel.facility_location(sim, rel), discount=0.8),
           scorers.objective_scorer(jaxsel.saturated_coverage(sim, rel)) + 0.5 * lk]
  orders = _orders(rng, n, d - 1, 25)  # room for one more chunk
  orders = np.concatenate([orders, np.full((25, 1), -1, np.int32)], axis=1)
  length = (orders >= 0).sum(1)

  @jax.jit
  def check(scorer, orders):
    base = jax.vmap(scorer)(orders)
    gains = jax.vmap(scorer.append_gains)(orders)  # [C, N]
    ext = jnp.where(jnp.arange(d)[None, None, :] == length[:, None, None],
                    jnp.arange(n)[None, :, None], orders[:, None, :])  # [C, N, T]
    full = jax.vmap(jax.vmap(scorer))(ext)
    return base[:, None] + gains, full

  for sc in cases:
    inc, full = check(sc, orders)
    fresh = ~(orders[:, :, None] == np.arange(n)).any(1)  # j not yet in the order
    np.testing.assert_allclose(np.asarray(inc)[fresh], np.asarray(full)[fresh], rtol=1e-5, atol=1e-5)
  # Under vmap: a batch of scorers, one order each.
  batch = jax.vmap(lambda w: w * pw + lk)(jnp.array([0.5, 2.0]))
  got = jax.vmap(lambda s: s.append_gains(jnp.array([2, 5, -1, -1])))(batch)
  for r, w in enumerate((0.5, 2.0)):
    one = w * pw + lk
    np.testing.assert_allclose(got[r], one.append_gains(jnp.array([2, 5, -1, -1])), rtol=1e-5, atol=1e-6)
  # Scorers without the shortcut say so, and so does a sum that holds one.
  class NoShortcut(scorer_base.Composable):
    num_candidates = n
    def __call__(self, order):
      return jnp.sum(order)
  assert NoShortcut().append_gains(jnp.array([1, -1])) is None
  assert (pw + NoShortcut()).append_gains(jnp.array([1, -1])) is None


def test_title_links():
  texts = ["Ed Wood directed films.", "The film Ed Wood (1994) stars Johnny Depp.",
           "Johnny Depp is an actor; Parisian life.", "Paris is big.", "More on Johnny Depp."]
  titles = ["Ed Wood", "Ed Wood (film)", "Johnny Depp", "Paris", "Johnny Depp"]
  link = scorers.title_links(texts, titles)
  want = np.zeros((5, 5), np.float32)
  want[1, [2, 4]] = 1  # text 1 names Johnny Depp (both chunks of that title); "Ed Wood" is its own
  # "Parisian" is not "Paris"; chunks of one title never link to each other.
  np.testing.assert_array_equal(link, want)
  link2 = scorers.title_links(texts, titles, strip_parenthetical=False)
  assert link2[0, 1] == 0 and link2[1, 0] == 1
  # Any whitespace between a title's words matches; case is ignored unless asked.
  two = scorers.title_links(["about johnny\n Depp", "x"], ["a", "Johnny Depp"])
  assert two[0, 1] == 1
  assert scorers.title_links(["about johnny Depp", "x"], ["a", "Johnny Depp"], case_sensitive=True)[0, 1] == 0
  with pytest.raises(ValueError, match="same length"):
    scorers.title_links(texts, titles[:2])


def _py_assemble(order, chunks, prefix, max_len, sep, pad, chunk_type):
  body = list(prefix) + [t for j in order if j >= 0 for t in chunks[j]]
  body = body[:max_len - 1] + [sep]
  types = [0] * len(prefix) + [chunk_type] * (len(body) - len(prefix))
  k = len(body)
  return (body + [pad] * (max_len - k), [1] * k + [0] * (max_len - k),
          types[:k] + [0] * (max_len - k))


def test_assemble_tokens_matches_python():
  rng = np.random.default_rng(3)
  n, lc, d = 5, 6, 3
  lens = rng.integers(0, lc + 1, n)
  ids = rng.integers(10, 99, (n, lc))
  chunks = [list(ids[j, :lens[j]]) for j in range(n)]
  prefix = [2, 50, 51, 3]
  orders = _orders(rng, n, d, 20)
  for max_len in (5, 14, 25):
    got = jax.jit(jax.vmap(lambda o: scorer_model.assemble_tokens(
        o, jnp.asarray(ids), jnp.asarray(lens), prefix_ids=jnp.array(prefix + [0, 0]),
        prefix_len=4, max_len=max_len, sep_id=3, pad_id=0, chunk_type=1)))(orders)
    for r, order in enumerate(orders):
      want = _py_assemble(order, chunks, prefix, max_len, 3, 0, 1)
      for g, w in zip(got, want):
        np.testing.assert_array_equal(g[r], w)


def _tokenize_chunks(tok, texts, lc=16):
  enc = tok(texts, add_special_tokens=False)["input_ids"]
  ids = np.zeros((len(texts), lc), np.int32)
  for j, e in enumerate(enc):
    ids[j, :len(e)] = e
  return ids, np.array([len(e) for e in enc], np.int32)


TEXTS = ["paris is in france.", "the eiffel tower", "berlin, germany", "a tower of steel",
         "rivers and bridges"]


@pytest.fixture(scope="module")
def tiny_models():
  return tiny_encoder(), tiny_cross_encoder()


def test_embedding_scorer_matches_encoder(tiny_models):
  enc, _ = tiny_models
  ids, lens = _tokenize_chunks(enc.tokenizer, TEXTS)
  q = np.random.default_rng(4).normal(size=enc.dim).astype(np.float32)
  sc = jaxsel.embedding_scorer(enc.apply, q, ids, lens, cls_id=enc.cls_token_id,
                                sep_id=enc.sep_token_id, pad_id=enc.pad_token_id, max_len=40,
                                params=enc.params)
  orders = np.array([[1, 0, -1], [0, 1, -1], [3, -1, -1], [4, 2, 0]], np.int32)
  got = np.asarray(jax.jit(jax.vmap(sc))(orders))
  for r, order in enumerate(orders):
    text = " ".join(TEXTS[j] for j in order if j >= 0)
    e = enc.tokenizer(text, truncation=True, max_length=40, padding="max_length")
    emb = np.asarray(enc.apply_fn(jnp.array([e["input_ids"]]), jnp.array([e["attention_mask"]]),
                                  jnp.array([e["token_type_ids"]])))[0]
    want = emb @ q / np.linalg.norm(emb) / np.linalg.norm(q)
    np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-5)
  assert not np.isclose(got[0], got[1]), "the order of chunks must matter"
  # Without params: any function with the `apply_fn` signature (here a stand-in).
  table = np.random.default_rng(5).normal(size=(128, 8)).astype(np.float32)

  def stand_in(i, m, t):
    w = m * (1.0 + jnp.arange(i.shape[-1]) / 10)  # position weights: order matters
    return jnp.einsum("bl,bld->bd", w, jnp.asarray(table)[i])

  sc2 = jaxsel.embedding_scorer(stand_in, table[0], ids, lens, cls_id=2, sep_id=3, max_len=12)
  got2 = np.asarray(_batched(sc2, orders))
  for r, order in enumerate(orders):
    toks, mask, _ = _py_assemble(order, [list(ids[j, :lens[j]]) for j in range(len(TEXTS))],
                                 [2], 12, 3, 0, 0)
    emb = ((1.0 + np.arange(12) / 10) * np.array(mask)) @ table[toks]
    np.testing.assert_allclose(got2[r], emb @ table[0] / np.linalg.norm(emb) / np.linalg.norm(table[0]),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["bert", "xlm-roberta"])
def test_cross_encoder_scorer_matches_pair_encoding_and_searches(tiny_models, arch):
  """The assembled sequence is the model's own pair format: `[CLS] q [SEP] c [SEP]` with token
  types for BERT, `<s> q </s></s> c </s>` without them for XLM-R (e.g. BGE rerankers)."""
  from jaxsel.testing import tiny_cross_encoder, tiny_xlmr_config
  ce = tiny_models[1] if arch == "bert" else tiny_cross_encoder(tiny_xlmr_config())
  assert ce.pair_format == ({"pair_sep": 1, "chunk_type": 1} if arch == "bert"
                            else {"pair_sep": 2, "chunk_type": 0})
  tok = ce.tokenizer
  ids, lens = _tokenize_chunks(tok, TEXTS)
  query = "eiffel tower city?"
  qe = tok(query, add_special_tokens=False)["input_ids"]
  qids = np.zeros(20, np.int32)
  qids[:len(qe)] = qe
  kw = dict(cls_id=ce.cls_token_id, sep_id=ce.sep_token_id, pad_id=ce.pad_token_id, max_len=64,
            params=ce.params)
  sc = jaxsel.cross_encoder_scorer(ce.apply, qids, len(qe), ids, lens, **kw, **ce.pair_format)
  costs = lens.astype(np.float32)
  res = jaxsel.corag_search(sc, costs, budget=30.0, iterations=4, max_depth=3)
  assert float(res.cost) <= 30
  checks = np.stack([np.asarray(res.order), np.array([2, 0, -1]), np.array([0, 2, -1])])
  got = np.asarray(_batched(sc, checks))
  for r, order in enumerate(checks):
    text = " ".join(TEXTS[j] for j in order if j >= 0)
    e = tok(query, text, padding="max_length", max_length=64)
    types = e.get("token_type_ids", [0] * 64)
    want = np.asarray(ce.logits_fn(jnp.array([e["input_ids"]]), jnp.array([e["attention_mask"]]),
                                   jnp.array([types])))[0, 0]
    np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-7)  # random logits are ~1e-3
  np.testing.assert_allclose(res.value, got[0], rtol=1e-5)
  if arch == "xlm-roberta":  # BERT's layout on an XLM-R model is a different sequence
    bert_style = jaxsel.cross_encoder_scorer(ce.apply, qids, len(qe), ids, lens, **kw)
    assert np.abs(np.asarray(_batched(bert_style, checks)) - got).max() > 1e-6
  with pytest.raises(ValueError, match="pair_sep"):
    jaxsel.cross_encoder_scorer(ce.apply, qids, 3, ids, lens, cls_id=2, sep_id=3, pair_sep=3)
  with pytest.raises(ValueError, match="max_len"):
    jaxsel.cross_encoder_scorer(ce.apply, qids, 3, ids, lens, cls_id=2, sep_id=3, max_len=10)
  with pytest.raises(ValueError, match="chunk_lens"):
    jaxsel.cross_encoder_scorer(ce.apply, qids, 3, ids, lens[:2], cls_id=2, sep_id=3)


@pytest.mark.parametrize("discount", [float("nan"), float("inf"), 0.0, -0.5, 1.5])
def test_discount_outside_0_1_is_an_error(discount):
  """`relevance_scorer(discount=nan)` used to give an empty order with value 0, silently."""
  r = jnp.asarray([0.2, 0.5, 0.9])
  for build in (lambda: scorers.relevance_scorer(r, discount=discount),
                lambda: scorers.pairwise_scorer(jnp.zeros((3, 3)), unary=r, discount=discount),
                lambda: scorers.objective_scorer(jaxsel.coverage(jnp.eye(3)), discount=discount)):
    with pytest.raises(ValueError, match=r"`discount` must lie in \(0, 1\]"):
      build()
