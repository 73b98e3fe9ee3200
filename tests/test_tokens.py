"""Token counts in the reader's unit (`jaxsel.token_counter`): Hugging Face fast and slow
tokenizers, a tiktoken encoding, a callable, names; a count is never below the text's size in
that unit (a word WordPiece writes as one [UNK] costs its characters); words follow the
tokenizer's pre-tokenisation."""

import numpy as np
import pytest
import tiktoken
import transformers

import jaxsel
from jaxsel._src import text, tokens
from jaxsel._src.encoders.loading import default_encoder_path

JAPANESE = "東京は日本の首都であり、世界最大の都市圏の一つです。多くの人が電車で通勤しています。"
CHINESE = "北京是中国的首都，也是一座历史悠久的文化名城。长城位于北京北部。"
CODE = "def f(x):\n    return {k: v ** 2 for k, v in x.items() if v}  # squares\n"
TEXTS = ["Kiss and Tell is a 1945 film.", JAPANESE, CHINESE, CODE, "a" * 5000,
         "see https://example.com/" + "x" * 120 + " now", "emoji 😀 and ✓", ""]
GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


@pytest.fixture(scope="module")
def minilm():
  return transformers.AutoTokenizer.from_pretrained(str(default_encoder_path()))


@pytest.fixture(scope="module")
def byte_bpe():
  """A tiktoken encoding built offline: GPT-2's pattern over single bytes plus a few merges."""
  ranks = {bytes([i]): i for i in range(256)}
  for word in (b"th", b"the", b" the", b"an", b" an", b"and", b" and"):
    ranks[word] = len(ranks)
  return tiktoken.Encoding(name="bytes-and-a-few", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                           special_tokens={"<|endoftext|>": len(ranks)})


def test_a_word_wordpiece_writes_as_unk_costs_its_characters(minilm):
  """WordPiece maps a word over 100 characters (or with a character outside its vocabulary)
  to one [UNK]; the old count was 1 for 5000 x "a"."""
  assert len(minilm("a" * 5000, add_special_tokens=False)["input_ids"]) == 1  # what it sends
  counter = jaxsel.token_counter(minilm)
  assert counter.count(["a" * 5000, "a" * 101, "x 😀 y"]).tolist() == [5000, 101, 3]
  assert jaxsel.token_costs(["a" * 5000], minilm).tolist() == [5000]
  # Below the limit the count is WordPiece's own; an [UNK] of one character is one token.
  plain = [t for t in TEXTS if "a" * 101 not in t and "x" * 101 not in t]
  assert counter.count(plain).tolist() == [
      len(i) for i in minilm(plain, add_special_tokens=False)["input_ids"]]
  # As many spans as the count, each inside the text, in order.
  for t, row, n in zip(TEXTS, counter.spans(TEXTS), counter.count(TEXTS)):
    assert len(row) == n and all(0 <= s <= e <= len(t) for s, e in row)
    assert [s for s, _ in row] == sorted(s for s, _ in row)


def test_a_blob_is_cut_into_windows_of_max_tokens(minilm):
  doc = "Before. " + "a" * 5000 + " after."
  for tokenizer in (minilm, None):
    ps = text.split_text(doc, unit="passage", max_tokens=128, tokenizer=tokenizer)
    assert all(p.tokens <= 128 and doc[p.start:p.end] == p.text for p in ps)
    assert "".join(p.text for p in ps).replace(" ", "") == doc.replace(" ", "")
  ps = text.split_text(doc, unit="passage", max_tokens=128, tokenizer=minilm)
  assert sum(p.tokens for p in ps) >= 5000


def test_slow_tokenizer_counts_like_the_fast_one_and_never_below(minilm):
  slow = transformers.BertTokenizerLegacy.from_pretrained(str(default_encoder_path()))
  assert not slow.is_fast
  fast, counted = jaxsel.token_counter(minilm), jaxsel.token_counter(slow)
  plain = TEXTS[:4] + ["emoji and"]
  assert counted.count(plain).tolist() == fast.count(plain).tolist()
  assert (counted.count(TEXTS) >= fast.count(TEXTS)).all()
  assert counted.count(["a" * 5000]).tolist() == [5000]
  assert not counted.has_spans  # no offsets: splitting cuts by counting
  ps = text.split_text("Intro. " + "word " * 300, unit="passage", max_tokens=50, tokenizer=slow)
  assert all(p.tokens <= 50 for p in ps) and len(ps) >= 6


def test_tiktoken_encoding(byte_bpe):
  counter = jaxsel.token_counter(byte_bpe)
  texts = TEXTS + ["the <|endoftext|> and"]  # special-token text counts as ordinary text
  assert counter.count(texts).tolist() == [len(byte_bpe.encode_ordinary(t)) for t in texts]
  for t, row in zip(texts, counter.spans(texts)):
    assert len(row) == len(byte_bpe.encode_ordinary(t))
    assert row == sorted(row) and (not row or (row[0][0] == 0 and row[-1][1] == len(t)))
  ps = text.split_text(" ".join(TEXTS), unit="sentence", max_tokens=40, tokenizer=byte_bpe)
  assert max(p.tokens for p in ps) <= 40


def test_tiktoken_names_fail_clearly_offline():
  with pytest.raises(ValueError, match="neither a tiktoken encoding"):
    jaxsel.token_counter("tiktoken:no-such-model")


def test_callable_counts_and_cuts_by_counting():
  chars = lambda texts: [len(t) for t in texts]  # noqa: E731
  counter = jaxsel.token_counter(chars)
  assert counter.count(["abc", ""]).tolist() == [3, 0]
  doc = "One two three four five six seven. " + "b" * 90 + " end " + JAPANESE
  ps = text.split_text(doc, unit="sentence", max_tokens=20, tokenizer=chars)
  assert all(p.tokens == len(p.text) <= 20 and doc[p.start:p.end] == p.text for p in ps)
  assert "".join(p.text for p in ps).replace(" ", "") == doc.replace(" ", "")
  # The longest runs of rule tokens that fit; one token alone over the limit is cut at 20.
  assert [p.text for p in ps][:3] == ["One two three four", "five six seven.", "b" * 20]


@pytest.mark.parametrize("bad, error, match", [
    (lambda texts: 3, TypeError, "one int per text"),
    (lambda texts: [1.5] * len(texts), TypeError, "one int per text"),
    (lambda texts: [-1] * len(texts), ValueError, "negative count"),
    (lambda texts: [True] * len(texts), TypeError, "one int per text|must return ints"),
    (len, TypeError, "lambda texts"),
])
def test_a_callable_that_does_not_count_fails_clearly(bad, error, match):
  with pytest.raises(error, match=match):
    jaxsel.token_counter(bad).count(["a b", "c"])


def test_by_name_or_path(minilm, tmp_path):
  by_path = jaxsel.token_counter(str(default_encoder_path()))
  assert by_path.count(TEXTS).tolist() == jaxsel.token_counter(minilm).count(TEXTS).tolist()
  with pytest.raises(FileNotFoundError, match="does not exist"):
    jaxsel.token_counter(str(tmp_path / "missing" / "tokenizer"))
  with pytest.raises(OSError, match="nothing is downloaded"):
    jaxsel.token_counter("nobody-has/this-tokenizer")
  with pytest.raises(TypeError, match="tiktoken Encoding"):
    jaxsel.token_counter(3.5)
  # An encoder (or anything with `.tokenizer`) counts with its tokenizer.
  enc = jaxsel.testing.tiny_encoder()
  assert jaxsel.token_counter(enc).count(["a b c"]).tolist() == \
      [len(enc.tokenizer("a b c", add_special_tokens=False)["input_ids"])]


def test_words_follow_the_pre_tokenisation(minilm, byte_bpe):
  """Issue 20 item 6: Japanese/Chinese text was one 172-215-token "word"; 5000 x "a" one word
  of 1 token. Now each CJK character is a word for BERT-family tokenizers and the rule,
  punctuation stays on its word, and a word costs at least its tokens."""
  mixed = "Tokyo (東京) is big, isn't it? " + JAPANESE
  for tokenizer in (minilm, None):
    words = text.split_text(mixed + " " + CHINESE, unit="word", tokenizer=tokenizer)
    got = [w.text for w in words]
    assert got[:6] == ["Tokyo", "(東", "京)", "is", "big,", "isn't"]
    assert {"首", "都", "北", "京", "部。"} <= set(got)
    assert ("であり、" in got) == (tokenizer is minilm)  # a kana run is a BERT word
    assert max(w.tokens for w in words) <= 6
    assert all(mixed.find(w.text) >= 0 or CHINESE.find(w.text) >= 0 for w in words)
  blob = text.split_text("x " + "a" * 5000, unit="word", tokenizer=minilm)
  assert [w.tokens for w in blob] == [1, 5000]
  # A tiktoken encoding takes the rule's words, each costed in full.
  words = text.split_text(JAPANESE, unit="word", tokenizer=byte_bpe)
  assert len(words) > 30 and all(w.tokens == len(byte_bpe.encode_ordinary(w.text)) for w in words)


def test_counts_are_cached_per_tokenizer_and_equal_fresh_counts(minilm, byte_bpe):
  """A counter keeps the counts it made; `token_counter` hands back the counter of a tokenizer
  it saw recently; cached counts equal fresh ones, the same text twice in one call included."""
  texts = TEXTS + TEXTS[:3]
  for tok in (minilm, byte_bpe, None):
    counter = jaxsel.token_counter(tok)
    assert jaxsel.token_counter(tok) is counter
    first = counter.count(texts)
    calls = []
    fn = counter.count_fn
    object.__setattr__(counter, "count_fn", lambda ts: calls.append(list(ts)) or fn(ts))
    try:
      assert counter.count(texts[::-1]).tolist() == first[::-1].tolist()
      assert calls == []  # every text looked up
      assert counter.count(texts + ["a new text"])[-1] == fn(["a new text"])[0]
      assert calls == [["a new text"]]  # only the new one counted
      counter.clear_cache()
      assert counter.count(texts).tolist() == first.tolist() == list(fn(texts))
    finally:
      object.__setattr__(counter, "count_fn", fn)


def test_the_count_cache_drops_the_least_recently_used_past_its_size():
  cache = tokens._CountCache(max_chars=10)
  count = lambda ts: np.array([len(t) for t in ts])  # noqa: E731
  cache.count(["aaaa", "bbbb"], count)
  cache.count(["aaaa"], count)  # "aaaa" used last: "bbbb" goes first
  cache.count(["cccc"], count)
  assert list(cache._counts) == ["aaaa", "cccc"] and cache._chars == 8
  assert cache.count(["x" * 50], count).tolist() == [50] and "x" * 50 not in cache._counts


def test_a_tokenizer_that_grew_gets_a_fresh_counter():
  """`add_tokens` changes what a text costs: the next `token_counter` counts anew."""
  tok = transformers.AutoTokenizer.from_pretrained(str(default_encoder_path()))
  word = "zzyzxquoroth"
  before = jaxsel.token_counter(tok)
  n = before.count_one(word)
  tok.add_tokens([word])
  after = jaxsel.token_counter(tok)
  assert after is not before and n > 1 and after.count_one(word) == 1


def test_a_callable_is_counted_every_time():
  calls = []
  counter = jaxsel.token_counter(lambda ts: calls.append(1) or [len(t) for t in ts])
  counter.count(["abc"])
  counter.count(["abc"])
  assert len(calls) == 2
