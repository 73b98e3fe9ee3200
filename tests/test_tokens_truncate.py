"""`TokenCounter.truncate` (Cohere's `max_tokens_per_doc` in `jaxsel serve`): the first
`max_tokens` tokens of a text, for a tokenizer with offsets and for one without."""

import pytest

import jaxsel
from jaxsel.cli.common import default_model, load_model

TEXT = "The Seine flows through Paris, then Rouen, and reaches the sea at Le Havre."


@pytest.fixture(scope="module")
def counters():
  words = jaxsel.token_counter(lambda texts: [len(t.split()) for t in texts])  # no offsets
  return [jaxsel.token_counter(None), words,
          jaxsel.token_counter(load_model(default_model()).tokenizer)]


@pytest.mark.parametrize("limit", [0, 1, 3, 7, 100])
def test_truncate_keeps_the_longest_prefix_within_the_limit(counters, limit):
  for counter in counters:
    cut = counter.truncate(TEXT, limit)
    assert TEXT.startswith(cut) and counter.count_one(cut) <= limit, counter.name
    assert cut == TEXT or counter.count_one(cut) == limit, counter.name  # nothing left unused
  words = counters[1].truncate(TEXT, limit)  # by counting: the longest prefix within the limit
  assert words == TEXT or counters[1].count_one(TEXT[:len(words) + 1]) > limit
  assert counters[0].truncate(TEXT, 3) == "The Seine flows"  # by offsets: at a token's end
  assert counters[1].truncate(TEXT, 3).rstrip() == "The Seine flows"
  assert counters[2].truncate(TEXT, 100) == TEXT


def test_truncate_bad_limit_names_it(counters):
  with pytest.raises(ValueError, match="max_tokens"):
    counters[0].truncate(TEXT, -1)
