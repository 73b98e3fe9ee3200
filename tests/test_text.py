"""Sentence/passage splitting: spans map back to the source, boundaries, token costs."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxsel import text

DOC = (Path(__file__).resolve().parents[1] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text("utf-8")


def _texts(ps):
  return [p.text for p in ps]


def test_latin_sentences_abbreviations_and_initials():
  s = 'Dr. Smith met F. Hugh Herbert (e.g. in the U.S. office). He said "hi." Then left!  Why? ok'
  assert _texts(text.split_text(s)) == [
      "Dr. Smith met F. Hugh Herbert (e.g. in the U.S. office).", 'He said "hi."', "Then left!",
      "Why?", "ok"]


def test_cjk_sentences_need_no_space_and_newlines_split():
  s = "我喜欢猫。你呢？好的！\n第二行没有句号\n\nA new paragraph."
  assert _texts(text.split_text(s)) == ["我喜欢猫。", "你呢？", "好的！", "第二行没有句号", "A new paragraph."]
  # The default counter gives one token per CJK character.
  assert [p.tokens for p in text.split_text("我喜欢猫。")] == [5]


def test_spans_map_back_to_the_source():
  for unit in text.UNITS:
    ps = text.split_documents(["", DOC, "  x  "], unit=unit, max_tokens=40, sources=["a", "b", "c"])
    assert ps, unit
    docs = ["", DOC, "  x  "]
    for p in ps:
      assert docs[p.doc][p.start:p.end] == p.text
      assert p.text == p.text.strip() and p.text
      assert p.source == "abc"[p.doc]
    assert ps[-1].text == "x" and ps[-1].doc == 2


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .!?\n。？c D")), max_size=80))
def test_sentences_partition_the_non_space_characters(s):
  """Every non-space character lies in exactly one sentence, in order, without overlaps."""
  ps = text.split_text(s)
  covered = np.zeros(len(s), int)
  last = -1
  for p in ps:
    assert p.start >= last and s[p.start:p.end] == p.text
    covered[p.start:p.end] += 1
    last = p.end
  nonspace = np.array([not c.isspace() for c in s], bool)
  assert (covered[nonspace] == 1).all()
  assert (covered <= 1).all()


def test_passages_pack_sentences_within_paragraphs_and_max_tokens():
  ps = text.split_text(DOC, unit="passage", max_tokens=60)
  assert max(p.tokens for p in ps) <= 60
  for p in ps:
    body = p.text.split("\n\n")
    # A passage never spans two paragraphs (a heading joins the paragraph below it).
    assert sum(not b.lstrip().startswith("#") for b in body) <= 1
  # Headings are kept with their paragraph.
  assert any(p.text.startswith("## Shirley Temple\n\nShirley Temple Black") for p in ps)
  sentences = text.split_text(DOC, unit="sentence", max_tokens=60)
  assert len(ps) < len(sentences)
  # Packing loses no text: the passages' sentences are the sentences.
  inner = [s for p in ps for s in text.split_text(p.text, max_tokens=60)]
  assert _texts(inner) == _texts(sentences)


def test_long_sentences_are_cut_at_token_boundaries():
  s = " ".join(f"w{i}" for i in range(25)) + "."
  ps = text.split_text(s, max_tokens=10)
  assert [p.tokens for p in ps] == [10, 10, 6]  # the final "." is a token
  assert " ".join(_texts(ps)) == s


def test_hf_tokenizer_costs(minilm_tokenizer):
  ps = text.split_text(DOC[:3000], unit="passage", max_tokens=50, tokenizer=minilm_tokenizer)
  ids = minilm_tokenizer([p.text for p in ps], add_special_tokens=False)["input_ids"]
  assert [p.tokens for p in ps] == [len(i) for i in ids]
  assert max(p.tokens for p in ps) <= 50
  np.testing.assert_array_equal(text.token_costs([p.text for p in ps], minilm_tokenizer),
                                [len(i) for i in ids])


@pytest.fixture(scope="module")
def minilm_tokenizer():
  from transformers import AutoTokenizer
  from jaxsel.encoders import default_encoder_path
  return AutoTokenizer.from_pretrained(str(default_encoder_path()))


def test_bad_input():
  with pytest.raises(TypeError, match="wrap it"):
    text.split_documents("one string")
  with pytest.raises(TypeError, match=r"documents\[1\]"):
    text.split_documents(["a", 3])
  with pytest.raises(ValueError, match="unit"):
    text.split_text("a", unit="word")
  with pytest.raises(ValueError, match="max_tokens"):
    text.split_text("a", max_tokens=0)
  with pytest.raises(ValueError, match="sources"):
    text.split_documents(["a", "b"], sources=["x"])
  with pytest.raises(TypeError, match="tokenizer"):
    text.split_text("a", tokenizer=3)
  assert text.split_text("   \n\n  ") == []
