"""Settings that cannot work fail when the Pipeline is built; prompts are filled in one pass."""

import pytest

import jaxsel
from jaxsel._src.pipeline.result import DEFAULT_TEMPLATE, fill_template
from jaxsel.testing import tiny_bert_config, tiny_encoder

# Longer than one window of the tiny encoder below (64 positions, one character a token).
DOC = "Shirley Temple was an American actress. She later served as Chief of Protocol."


def test_fill_template_substitutes_both_placeholders_in_one_pass():
  """Issue 20.10: `{query}` went in first, so a question containing "{context}" got the whole
  context pasted inside it. Placeholders the question or the context bring stay as written."""
  queries = ["What is {context}?", "and {query}"]
  context = "[1] a {query} b {context}"
  got = fill_template("Q: {query}\nC: {context}\nQ again: {query}", queries, context)
  q = "\n".join(queries)
  assert got == "Q: " + q + "\nC: " + context + "\nQ again: " + q
  # The default template, split at its placeholders by hand.
  head, rest = DEFAULT_TEMPLATE.split("{context}")
  middle, tail = rest.split("{query}")
  assert fill_template(DEFAULT_TEMPLATE, queries, context) == head + context + middle + q + tail
  assert fill_template("no placeholders {other}", queries, context) == "no placeholders {other}"


def test_late_chunking_max_tokens_beyond_the_window_fails_when_built():
  """Issue 20.12: `max_tokens` above the encoder's window failed only at `select`; the README
  promises bad settings fail when the Pipeline is built (and when `replace` makes one)."""
  enc = tiny_encoder(tiny_bert_config(max_position_embeddings=64, hidden_size=32))
  capacity = enc.max_length - 2  # [CLS] and [SEP]; the tiny encoder's prompts are empty
  match = rf"`max_tokens` {capacity + 1} is longer than late chunking can embed.*{capacity} text tokens"
  with pytest.raises(ValueError, match=match):
    jaxsel.Pipeline(enc, late_chunking=True, max_tokens=capacity + 1)
  assert enc.chunk_capacity(prompt_name="passage") == capacity
  with pytest.raises(ValueError, match=match):
    jaxsel.Pipeline(enc, max_tokens=capacity + 1).replace(late_chunking=True)
  with pytest.raises(ValueError, match=match):
    jaxsel.Pipeline(enc, late_chunking=True).replace(max_tokens=capacity + 1)
  # Without late chunking any length is fine; at the window's size, late chunking works.
  jaxsel.Pipeline(enc, max_tokens=capacity + 1)
  pipe = jaxsel.Pipeline(enc, late_chunking=True, max_tokens=capacity)
  res = pipe.select("Who played Corliss Archer?", [DOC], budget=2 * capacity)
  assert len(DOC) > enc.max_length and max(p.tokens for p in res.candidates) <= capacity
  assert 0 < res.cost <= 2 * capacity
  # With a prompt, the window holds fewer text tokens.
  prompted = tiny_encoder(tiny_bert_config(max_position_embeddings=64, hidden_size=32),
                          prompts={"query": "q: ", "passage": "passage: "})
  room = prompted.chunk_capacity(prompt_name="passage")
  assert room == capacity - len(prompted.tokenizer("passage: ", add_special_tokens=False)["input_ids"])
  with pytest.raises(ValueError, match=rf"`max_tokens` {room + 1} is longer"):
    jaxsel.Pipeline(prompted, late_chunking=True, max_tokens=room + 1)
