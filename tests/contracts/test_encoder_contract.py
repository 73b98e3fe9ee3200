"""The `jaxsel.Encoder` contract, asserted against the real `SentenceEncoder` (tiny random
BERT and XLM-R, with and without prompts) and every encoder test double. The Pipeline only
calls these members; a double that meant something else by them (the prompt bug: a prompt
*name* embedded as text) fails here."""

import numpy as np
import pytest

import jaxsel
from doubles import HashEncoder
from jaxsel.testing import tiny_encoder, tiny_xlmr_config

TEXTS = ["Shirley Temple was an actress.", "kiss and tell is a 1945 film", "x"]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def _encoders():
  return {
      "tiny_bert": tiny_encoder(),
      "tiny_bert_prompts": tiny_encoder(prompts=PROMPTS),
      "tiny_xlmr": tiny_encoder(tiny_xlmr_config(), prompts=PROMPTS),
      "hash_double": HashEncoder(),
      "hash_double_prompts": HashEncoder(prompts=PROMPTS),
  }


ENCODERS = _encoders()


@pytest.fixture(params=sorted(ENCODERS), ids=str)
def enc(request):
  return ENCODERS[request.param]


def test_is_an_encoder(enc):
  assert isinstance(enc, jaxsel.Encoder)
  assert {"query", "passage"} <= set(enc.prompts)
  assert isinstance(enc.dim, int) and enc.dim > 0


def test_encode_shape_norm_and_settings(enc):
  out = np.asarray(enc.encode(TEXTS, prompt_name=None, normalize=True, batch_size=2, progress=False))
  assert out.shape == (3, enc.dim) and out.dtype == np.float32
  np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
  again = np.asarray(enc.encode(TEXTS, batch_size=32))
  np.testing.assert_allclose(again, out, atol=1e-5)  # batch size never changes the result


def test_a_prompt_name_prefixes_its_text(enc):
  for name, prefix in enc.prompts.items():
    named = np.asarray(enc.encode(TEXTS, prompt_name=name))
    literal = np.asarray(enc.encode([prefix + t for t in TEXTS]))
    np.testing.assert_allclose(named, literal, atol=1e-5, err_msg=name)
  if enc.prompts["query"]:
    plain = np.asarray(enc.encode(TEXTS))
    assert np.abs(np.asarray(enc.encode(TEXTS, prompt_name="query")) - plain).max() > 1e-3


def test_the_pipeline_embeds_through_the_contract(enc):
  pipe = jaxsel.Pipeline(enc)
  for role in ("query", "passage"):
    np.testing.assert_allclose(pipe.embed(TEXTS, role), np.asarray(enc.encode(TEXTS, prompt_name=role)),
                               atol=1e-6)
