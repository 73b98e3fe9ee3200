"""`training/grids.adapter`, what `python -m training defaults` scores the adapters by: the
pieces each framework adapter sent, as (document, start, end, text sent) in the texts it was
given — parts of documents under a tight budget (the default granularity cuts sentences),
whole documents under a roomy one — the same in the three frameworks (they share one
selection); with titles, LangChain's and Haystack's parts are headed by them."""

import pytest

from training import grids

QUESTION = "What government position was held by the woman who portrayed Corliss Archer?"
TEXTS = ["Kiss and Tell is a 1945 American comedy film. It stars Shirley Temple as Corliss Archer. "
         "The film was directed by Richard Wallace.",
         "Shirley Temple was an American actress. She later served as Chief of Protocol of the "
         "United States. She was also an ambassador to Ghana.",
         "Meet Corliss Archer was a radio program. It aired on CBS from 1943. Janet Waldo played "
         "the title role for years."]


@pytest.mark.parametrize("budget", [24, 10_000])
def test_adapters_report_the_pieces_they_sent(tiny, budget):
  got = {name: grids.adapter(name, tiny, budget)(QUESTION, TEXTS) for name in grids.ADAPTERS}
  first = got["langchain"]
  assert first and all(v == first for v in got.values()), got
  for i, a, b, sent in first:
    assert 0 <= a < b <= len(TEXTS[i]) and sent == TEXTS[i][a:b]
  whole = [(i, a, b) for i, a, b, _ in first if (a, b) == (0, len(TEXTS[i]))]
  if budget == 10_000:
    assert sorted(first) == [(i, 0, len(t), t) for i, t in enumerate(TEXTS)]
  else:
    assert len(whole) < len(first)  # parts of documents: sentences under a tight budget
    titles = ["Kiss and Tell", "Shirley Temple", None]
    titled = {name: grids.adapter(name, tiny, budget)(QUESTION, TEXTS, titles)
              for name in ("langchain", "haystack")}
    assert titled["langchain"] == titled["haystack"]
    for i, a, b, sent in titled["langchain"]:
      part, title = TEXTS[i][a:b], titles[i]
      assert sent == (f"{title}: " if title and title not in part else "") + part
