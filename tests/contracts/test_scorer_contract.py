"""The `jaxsel.Scorer` contract, asserted against every scorer jaxsel builds and every
scorer-like test double: a value for any `-1`-padded order, under `jit` and `vmap`, and an
`append_gains` (where there is one) equal to the scorer's own differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsel
from doubles import OpaqueScorer, sum_scorer
from jaxsel._src import methods
from jaxsel.testing import tiny_cross_encoder, tiny_encoder

N, T = 6, 4


def _scorers():
  rng = np.random.default_rng(1)
  e = rng.normal(size=(N, 8)).astype(np.float32)
  q = rng.normal(size=(1, 8)).astype(np.float32)
  links = (rng.random((N, N)) < 0.3).astype(np.float32)
  req = methods.request(q, e, costs=np.full(N, 10.0, np.float32), links=links,
                        mentioned=np.eye(N)[2])
  out = {name: methods.scorer(name, req, discount=0.9) for name in methods.SCORERS}
  r = np.asarray(methods.best_relevance(req))
  out["pairwise"] = jaxsel.pairwise_scorer(-np.asarray(req.similarity), unary=r, discount=0.8)
  out["weighted_sum"] = 0.5 * out["relevance"] - 0.25 * out["links"]
  out["plain_function"] = sum_scorer
  out["opaque_double"] = OpaqueScorer(out["facility_location"])
  enc = tiny_encoder()
  ids = jnp.asarray(rng.integers(5, 60, (N, 5)), jnp.int32)
  lens = jnp.full((N,), 5, jnp.int32)
  out["embedding"] = jaxsel.embedding_scorer(enc.apply, enc.encode(["which film?"])[0],
                                             ids, lens, cls_id=enc.cls_token_id,
                                             sep_id=enc.sep_token_id, max_len=24, params=enc.params)
  ce = tiny_cross_encoder()
  out["cross_encoder"] = jaxsel.cross_encoder_scorer(
      ce.apply, jnp.asarray([7, 8, 9], jnp.int32), 3, ids, lens, cls_id=ce.cls_token_id,
      sep_id=ce.sep_token_id, max_len=32, params=ce.params)
  return out


SCORERS = _scorers()


@pytest.fixture(params=sorted(SCORERS), ids=str)
def scorer(request):
  return SCORERS[request.param]


def _order(*js):
  o = np.full(T, -1, np.int32)
  o[:len(js)] = js
  return jnp.asarray(o)


def test_is_a_scorer(scorer):
  assert isinstance(scorer, jaxsel.Scorer) and callable(scorer)
  n = getattr(scorer, "num_candidates", None)
  assert n is None or n == N


def test_values_under_jit_and_vmap(scorer):
  orders = jnp.stack([_order(), _order(1), _order(1, 3), _order(3, 1, 0)])
  eager = np.asarray([float(scorer(o)) for o in orders])
  assert np.isfinite(eager).all()
  np.testing.assert_allclose(jax.jit(jax.vmap(scorer))(orders), eager, rtol=1e-5, atol=1e-5)


def test_append_gains_are_the_scorer_s_differences(scorer):
  fn = getattr(scorer, "append_gains", None)
  if fn is None:
    return  # optional: the search then scores every child in full
  for order in (_order(), _order(2), _order(2, 0)):
    gains = fn(order)
    if gains is None:
      continue
    used = int(jnp.sum(order >= 0))
    base = float(scorer(order))
    for j in range(N):
      if j not in np.asarray(order):
        appended = order.at[used].set(j)
        assert float(gains[j]) == pytest.approx(float(scorer(appended)) - base, rel=1e-4, abs=1e-5)


def test_the_search_accepts_it(scorer):
  res = jaxsel.corag_search(scorer, jnp.full((N,), 10.0), budget=30.0, iterations=3, max_depth=T)
  assert int(res.length) <= 3 and float(res.cost) <= 30.0
  assert float(res.value) == pytest.approx(float(scorer(res.order)), rel=1e-4, abs=1e-5)
