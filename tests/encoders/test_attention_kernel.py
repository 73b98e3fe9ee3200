"""The C++ attention kernel (`jaxsel/_src/native/csrc/attention.cc`) against the XLA path of
`SelfAttention`: really used on CPU, equal within float32 rounding on ragged masks (padded and
packed rows), vmappable, and not used where it does not apply (bfloat16)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxsel._src import native as _native
from jaxsel._src.encoders import attention, bert
from jaxsel._src.encoders import config as C

TOL = 1e-6  # relative to the largest output: float32 rounding, in another summation order


def _assert_close(got, want):
  np.testing.assert_allclose(got, want, rtol=0, atol=TOL * max(np.abs(want).max(), 1.0))


def _attention(hidden, heads, seed=0, dtype=jnp.float32, std=0.12):
  cfg = C.EncoderConfig(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=1,
                        intermediate_size=2 * hidden, vocab_size=32, max_position_embeddings=512)
  att = bert.SelfAttention(cfg, dtype=dtype, rngs=nnx.Rngs(seed))
  rng = np.random.default_rng(seed)
  for lin in (att.query, att.key, att.value):  # std 0.12: scores of order 1, as in BERTs
    lin.kernel[...] = jnp.asarray(rng.normal(0, std, lin.kernel.shape), dtype)
    lin.bias[...] = jnp.asarray(rng.normal(0, 0.5, lin.bias.shape), dtype)
  return att


def _inputs(lengths, l, hidden, seed=1, holes=False):
  """x `[B * L, H]`, mask `[B, L]` (right-padded to `lengths`, or with masked holes), bias."""
  rng = np.random.default_rng(seed)
  mask = np.arange(l)[None] < np.asarray(lengths)[:, None]
  if holes:  # masked positions inside the sequences (left padding, gaps)
    mask &= rng.random(mask.shape) < 0.7
  x = rng.normal(0, 1, (len(lengths) * l, hidden)).astype(np.float32)
  bias = np.where(mask, 0.0, np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
  return jnp.asarray(x), mask, jnp.asarray(bias)


def _xla(att):
  """The same module (same weights) with attention on the XLA path."""
  twin = nnx.clone(att)
  twin.backend = "xla"
  return twin


def _run(att, x, bias, pack):
  return jax.jit(lambda a, x, b, p: a(x, b, p))(att, x, bias, pack)


def test_kernel_is_built_and_used():
  att = _attention(32, 2)
  x, mask, bias = _inputs([5, 3], 8, 32)
  _run(att, x, bias, None)
  assert _native.available(), _native.status()
  hlo = jax.jit(lambda a, x, b: a(x, b)).lower(att, x, bias).as_text()
  assert "jaxsel_attention" in hlo
  pack = attention.packing(jnp.asarray(mask), 8)
  assert "jaxsel_attention" in jax.jit(lambda a, x, b, p: a(x, b, p)).lower(att, x[:8], bias, pack).as_text()
  assert "jaxsel_attention" not in jax.jit(lambda a, x, b: a(x, b)).lower(_xla(att), x, bias).as_text()


@pytest.mark.parametrize("hidden,heads", [(48, 3), (128, 2)])  # d = 16 (padded to 32), d = 64
@pytest.mark.parametrize("l", [1, 7, 64, 130])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("holes", [False, True])
def test_equals_xla_path(hidden, heads, l, packed, holes):
  att = _attention(hidden, heads, seed=l)
  rng = np.random.default_rng(l)
  lengths = [l, *rng.integers(1, l + 1, 4), max(l // 3, 1)]  # ragged, mostly not multiples of 16
  x, mask, bias = _inputs(lengths, l, hidden, seed=l + 1, holes=holes)
  real = int(mask.sum())
  if real == 0:
    pytest.skip("no real token")
  pack = None
  if packed:
    tokens = min(real + 3, mask.size)  # a few filler rows, as `packed_tokens` rounds up
    pack = attention.packing(jnp.asarray(mask), tokens)
    x = x[np.asarray(pack.rows)]
  got = np.asarray(_run(att, x, bias, pack))
  want = np.asarray(_run(_xla(att), x, bias, pack))
  assert got.shape == want.shape == (x.shape[0], hidden)
  if packed:  # rows past the real tokens are filler: the kernel writes zeros there
    _assert_close(got[:real], want[:real])
    assert not got[real:].any()
  else:  # every position, pads included (they attend to the real keys)
    _assert_close(got, want)


def _float64_attention(att, x, bias, heads):
  """NumPy float64 reference `[B * L, H]` on all positions."""
  lins = (att.query, att.key, att.value)
  w = np.concatenate([np.asarray(a.kernel[...], np.float64) for a in lins], 1)
  c = np.concatenate([np.asarray(a.bias[...], np.float64) for a in lins])
  b, l, h = bias.shape[0], bias.shape[-1], x.shape[-1]
  qkv = (np.asarray(x, np.float64) @ w + c).reshape(b, l, 3, heads, h // heads)
  s = np.einsum("bqnd,bknd->bnqk", qkv[:, :, 0], qkv[:, :, 1]) * (h // heads) ** -0.5
  s = s + np.asarray(bias, np.float64)
  e = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bnqk,bknd->bqnd", e / e.sum(-1, keepdims=True), qkv[:, :, 2]).reshape(-1, h)


@pytest.mark.parametrize("hidden,heads,l", [(48, 3, 7), (48, 3, 130), (128, 2, 130)])
def test_peaked_softmax_is_as_accurate_as_xla(hidden, heads, l):
  """Scores of order 10-20: float32 rounding of the scores is amplified by exp, on both
  paths alike; the kernel stays as close to a float64 reference as XLA does."""
  att = _attention(hidden, heads, seed=l, std=0.4)
  x, _, bias = _inputs([l, max(l // 2, 1), 3], l, hidden, seed=l + 1)
  ref = _float64_attention(att, x, bias, heads)
  got = np.asarray(_run(att, x, bias, None))
  want = np.asarray(_run(_xla(att), x, bias, None))
  err, xla_err = np.abs(got - ref).max(), np.abs(want - ref).max()
  assert err <= 2 * xla_err + 1e-6, (err, xla_err)


def test_fully_masked_sequence_matches_xla():
  """No real key: the softmax is uniform over all keys on both paths."""
  att = _attention(32, 2)
  x, mask, bias = _inputs([0, 5], 9, 32)
  got = np.asarray(_run(att, x, bias, None))
  want = np.asarray(_run(_xla(att), x, bias, None))
  _assert_close(got, want)


def test_vmap_equals_a_loop():
  att = _attention(64, 4)
  xs, biases = [], []
  for seed in range(3):
    x, _, bias = _inputs([11, 4, 7], 11, 64, seed=seed)
    xs.append(x)
    biases.append(bias)
  xs, biases = jnp.stack(xs), jnp.stack(biases)
  batched = jax.jit(jax.vmap(lambda x, b: att(x, b)))(xs, biases)
  assert "jaxsel_attention" in jax.jit(jax.vmap(lambda x, b: att(x, b))).lower(xs, biases).as_text()
  for i in range(3):
    np.testing.assert_array_equal(batched[i], _run(att, xs[i], biases[i], None))


def test_bfloat16_uses_xla():
  att = _attention(32, 2, dtype=jnp.bfloat16)
  x, _, bias = _inputs([5, 3], 8, 32)
  hlo = jax.jit(lambda a, x, b: a(x, b)).lower(att, x.astype(jnp.bfloat16), bias).as_text()
  assert "jaxsel_attention" not in hlo


@pytest.mark.parametrize("packed", [False, True])
def test_gradients_are_the_xla_paths(packed):
  """The kernel has no backward of its own: gradients differentiate the XLA path."""
  att = _attention(48, 3)
  x, mask, bias = _inputs([9, 4, 6], 9, 48, seed=5)
  pack = None
  real = int(mask.sum())
  if packed:
    pack = attention.packing(jnp.asarray(mask), real + 2)
    x = x[np.asarray(pack.rows)]
  w = jnp.asarray(np.random.default_rng(6).normal(0, 1, (x.shape[0], 48)), jnp.float32)
  keep = (jnp.arange(x.shape[0]) < real)[:, None] if packed else 1.0  # filler rows differ

  def loss(model, x):
    return jnp.sum(model(x, bias, pack) * w * keep)

  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  # the forward's value comes from the kernel (grad alone needs only the XLA backward)
  assert "jaxsel_attention" in jax.jit(jax.value_and_grad(loss, argnums=1)).lower(att, x).as_text()
  g_model, g_x = grad(att, x)
  w_model, w_x = grad(_xla(att), x)
  _assert_close(np.asarray(g_x), np.asarray(w_x))
  for got, want in zip(jax.tree.leaves(nnx.state(g_model)), jax.tree.leaves(nnx.state(w_model))):
    _assert_close(np.asarray(got), np.asarray(want))
