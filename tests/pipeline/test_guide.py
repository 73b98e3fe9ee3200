"""The passage guide of a sentence request (`guide.py`, `granularity.fill(guide=...)`): the
request's whole passages searched for `guide` of them without a budget; the top-up sends their
lead sentences first and completes them before the searched passages, or sends them whole first
and, when the budget holds it whole, the next passage of a search for one more."""

import re
from pathlib import Path

import numpy as np
import pytest

import jaxsel
from jaxsel._src.pipeline import granularity

DOC = (Path(__file__).resolve().parents[2] / "jaxsel" / "data" / "hotpotqa_wiki.md").read_text(
    "utf-8")
DOCS = [DOC[:2500], DOC[2500:5000]]
SECTIONS = [s.strip() for s in re.split(r"\n(?=## )", DOC)[1:11]]  # ten titled paragraphs
Q = "What government position was held by the woman who portrayed Corliss Archer?"

PARENTS = np.asarray([0, 0, 0, 1, 1, 1, 2, 2], np.int32)
RELEVANCE = np.asarray([0.1, 0.5, 0.9, 0.2, 0.8, 0.3, 0.05, 0.4], np.float32)
COSTS = np.full(8, 10.0, np.float32)
SEARCHED = (np.asarray([4]), np.asarray([0.7]), np.asarray([0.7]))


def fill(budget, **kw):
  return granularity.fill(*SEARCHED, costs=COSTS, relevance=RELEVANCE, parents=PARENTS,
                          budget=budget, **kw)


def test_the_fill_sends_the_guides_leads_first_then_completes_its_passages():
  order, gains, curve = fill(80, guide=[2, 0])
  # guide leads (passages 2, 0), the searched pick, its passage's lead, then the guide's
  # passages' other sentences by relevance (7; 2, 1), then the searched passage's (5).
  assert order.tolist() == [6, 0, 4, 3, 7, 2, 1, 5]
  assert gains.tolist() == pytest.approx([0, 0, 0.7, 0, 0, 0, 0, 0])
  assert curve.tolist() == pytest.approx([0, 0, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7])
  assert fill(30, guide=[2, 0])[0].tolist() == [6, 0, 4]  # the searched pick always stays
  assert fill(20, guide=[2, 0])[0].tolist() == [6, 4]


def test_without_a_guide_the_fill_is_as_before_and_pinned_picks_stay_first():
  plain = fill(80)
  assert plain[0].tolist() == [4, 3, 5, 2, 1, 7, 0, 6]
  for a, b in zip(plain, fill(80, guide=[])):
    assert np.array_equal(a, b)
  pinned = (np.asarray([4]), np.full(8, -1, np.int32), 0)
  assert fill(40, guide=[2], constraints=pinned)[0].tolist() == [4, 6, 3, 7]


def test_the_guides_passages_go_whole_first_when_they_cost_a_share_of_the_budget_or_less():
  # Passages 2 and 0 (sentences 6, 7 and 0, 1, 2) cost 50: at most 0.7 x 80, so they are sent
  # whole, then the searched pick (4), its passage's lead (3) and the rest of it (5).
  order, gains, curve = fill(80, guide=[2, 0], guide_whole=0.7)
  assert order.tolist() == [6, 7, 0, 1, 2, 4, 3, 5]
  assert gains.tolist() == pytest.approx([0, 0, 0, 0, 0, 0.7, 0, 0])
  assert curve.tolist() == pytest.approx([0, 0, 0, 0, 0, 0.7, 0.7, 0.7])
  # Above the share (50 > 0.7 x 60) the fill is the leads-first one; 0 never sends them whole.
  for a, b in zip(fill(60, guide=[2, 0], guide_whole=0.7), fill(60, guide=[2, 0])):
    assert np.array_equal(a, b)
  # A searched pick that no longer fits after them is not sent.
  assert fill(55, guide=[2, 0], guide_whole=1.0)[0].tolist() == [6, 7, 0, 1, 2]
  # Pinned picks stay first; the pinned pick's passage is then completed.
  pinned = (np.asarray([4]), np.full(8, -1, np.int32), 0)
  assert fill(80, guide=[2, 0], guide_whole=0.7, constraints=pinned)[0].tolist() == [
      4, 6, 7, 0, 1, 2, 3, 5]


def test_a_further_passage_goes_whole_after_the_guides_when_the_budget_holds_it_whole():
  # Passages 2 and 0 go whole (50 <= 0.7 x 80); passage 1 (30 more) fits the 80 whole: it
  # follows them, and the searched pick (4), now inside it, is sent with it.
  assert fill(80, guide=[2, 0], guide_whole=0.7, extra=[1])[0].tolist() == [
      6, 7, 0, 1, 2, 3, 4, 5]
  # 80 > 75: not whole, so not at all ahead of the searched pick; nor when the guide's
  # passages do not go whole (50 > 0.7 x 60).
  for budget in (75, 60):
    for a, b in zip(fill(budget, guide=[2, 0], guide_whole=0.7, extra=[1]),
                    fill(budget, guide=[2, 0], guide_whole=0.7)):
      assert np.array_equal(a, b)


@pytest.fixture(scope="module")
def pipe():
  return jaxsel.Pipeline(jaxsel.load_encoder("sentence-transformers/all-MiniLM-L6-v2"))


def test_the_guide_is_the_passage_search_for_two_without_a_budget(pipe, monkeypatch):
  """The default at sentence granularity hands its top-up the passages that CORAG over the
  request's whole passages picks for k=2, no budget and no top-up, as `select` gives them; the
  context opens inside a guide passage. `guide=0` hands none."""
  seen = []
  real = granularity.fill
  monkeypatch.setattr(granularity, "fill",
                      lambda *a, **kw: seen.append(kw["guide"]) or real(*a, **kw))
  res = pipe.select(Q, DOCS, budget=120, granularity="sentence")
  whole = pipe.split(DOCS, budget=120)
  want = pipe.replace(top_up=False).select(Q, DOCS, budget=None, k=2, granularity="passage")
  assert len(want.passages) == 2 and seen
  for guide in seen:
    assert [(whole[m].doc, whole[m].start, whole[m].end) for m in guide] == [
        (p.doc, p.start, p.end) for p in want.passages]
  first = res.passages[0]  # a guide passage's lead (or the searched pick it holds)
  assert any(first.doc == p.doc and p.start <= first.start < first.end <= p.end
             for p in want.passages)
  assert res.cost <= 120
  seen.clear()
  pipe.replace(guide=0).select(Q, DOCS, budget=120, granularity="sentence")
  assert seen and all(g is None for g in seen)
  with pytest.raises(ValueError, match="guide_extra"):
    pipe.replace(guide_extra=-1)
  with pytest.raises(ValueError, match="guide"):
    pipe.replace(guide=-1)


def test_a_budget_that_holds_the_guides_passages_gets_them_whole_first(pipe, monkeypatch):
  """With room for the guide's passages (their sentences at most `guide_whole` of the budget)
  the top-up sends all their sentences first and the context opens with them whole, as the
  document holds them; `guide_whole=0` sends their lead sentences first instead."""
  seen = []
  real = granularity.fill

  def spy(*a, **kw):
    out = real(*a, **kw)
    seen.append((kw["guide"], kw["guide_whole"], kw["extra"], np.asarray(kw["parents"]),
                 out[0]))
    return out

  monkeypatch.setattr(granularity, "fill", spy)
  whole = pipe.split(SECTIONS, budget=400)
  span = lambda p: (p.doc, p.start, p.end)  # noqa: E731
  res = pipe.select(Q, SECTIONS, budget=400, granularity="sentence")
  guide, share, extra, parents, order = seen[0]
  assert share == pipe.config.guide_whole == 0.7 and len(guide) == 2
  assert sum(whole[m].tokens for m in guide) <= 0.7 * 400
  # The further passage: the first beyond the guide's that the same search for 3 picks; the
  # three (pieces of at most 128 tokens) fit 400 whole, so the context opens with them.
  three = pipe.replace(top_up=False).select(Q, SECTIONS, budget=None, k=3, granularity="passage")
  beyond = [p for p in three.passages if span(p) not in {span(whole[m]) for m in guide}]
  assert len(extra) == pipe.config.guide_extra == 1 and span(whole[extra[0]]) == span(beyond[0])
  first = list(guide) + list(extra)
  n = int(np.isin(parents, first).sum())
  sent_whole = [m for m in first for _ in range(np.sum(parents == m))]
  assert parents[order[:n]].tolist() == sent_whole
  assert [span(p) for p in res.passages[:3]] == [span(whole[m]) for m in first]
  assert res.cost <= 400
  seen.clear()
  pipe.replace(guide_extra=0).select(Q, SECTIONS, budget=400, granularity="sentence")
  assert len(seen[0][2]) == 0 and parents[seen[0][4][:n]].tolist() != sent_whole
  seen.clear()
  pipe.replace(guide_whole=0.0).select(Q, SECTIONS, budget=400, granularity="sentence")
  guide, share, _, parents, order = seen[0]
  assert share == 0.0 and order[0] == np.flatnonzero(parents == guide[0])[0]  # its lead
  assert parents[order[:n]].tolist() != sent_whole
  with pytest.raises(ValueError, match="guide_whole"):
    pipe.replace(guide_whole=1.5)


def test_an_index_sources_guide_uses_the_passages_embeddings_the_index_holds(pipe, monkeypatch):
  """Over an index the guide searches the hits with the index's own embeddings: the request
  embeds its sentences (and its query) and no whole passage, and the guide's picks are the
  passage search's over the index."""
  from jaxsel._src.pipeline import embedding
  from jaxsel._src.pipeline import guide as guide_lib
  index = pipe.build_index(DOCS)
  embedded, guides = [], []
  real_embed, real_requests = embedding.Embedder.embed, guide_lib.requests
  monkeypatch.setattr(embedding.Embedder, "embed", lambda self, texts, role="passage": (
      embedded.extend(texts) or real_embed(self, texts, role)))

  def requests(p, prepared):
    out = real_requests(p, prepared)
    guides.extend(out)
    return out

  monkeypatch.setattr(guide_lib, "requests", requests)
  res = pipe.select(Q, index, budget=120, granularity="sentence")
  assert res.cost <= 120 and len(guides) == 1
  g, rows = guides[0]
  assert rows.tolist() == list(range(len(g.candidates.passages)))  # all: a narrow request
  sentences = {p.sent_text for p in granularity.sentences(g.candidates.passages, pipe.tokenizer)[0]}
  assert embedded and set(embedded) <= sentences | {Q}
  held = [next(i for i, t in enumerate(index.texts) if t == p.text) for p in g.candidates.passages]
  assert np.array_equal(g.candidates.embeddings, np.asarray(index.embeddings)[held])
  want = pipe.replace(top_up=False).select(Q, index, budget=None, k=2, granularity="passage")
  solved = guide_lib.solve(pipe.config, guides)[0]
  assert [g.candidates.passages[m].text for m in solved.passages] == [p.text for p in want.passages]


def test_a_request_wider_than_the_search_guides_with_the_passages_it_searches(pipe, monkeypatch):
  """Over more sentences than CORAG searches (`search_width`), the guide embeds and searches
  only the passages of the sentences it searches, and its picks name those passages."""
  from jaxsel._src.pipeline import embedding
  from jaxsel._src.pipeline import guide as guide_lib
  narrow = pipe.replace(search_width=6)
  embedded, guides, seen = [], [], []
  real_embed, real_requests, real_fill = (embedding.Embedder.embed, guide_lib.requests,
                                          granularity.fill)
  monkeypatch.setattr(embedding.Embedder, "embed", lambda self, texts, role="passage": (
      embedded.extend(texts) or real_embed(self, texts, role)))

  def requests(p, prepared):
    guides.extend(prepared)
    return real_requests(p, prepared)

  monkeypatch.setattr(guide_lib, "requests", requests)
  monkeypatch.setattr(granularity, "fill",
                      lambda *a, **kw: seen.append(kw["guide"]) or real_fill(*a, **kw))
  res = narrow.select(Q, DOCS, budget=120, granularity="sentence")
  assert res.cost <= 120
  r, = guides
  c = r.candidates
  assert r.searched is not None and len(r.searched) == 6
  rows = sorted({int(c.parents[i]) for i in r.searched})
  assert len(rows) < len(c.units)  # some passages have no searched sentence
  wide = {p.sent_text for p in c.units} - {c.units[m].sent_text for m in rows}
  sentences = {p.sent_text for p in c.passages}
  assert wide - sentences and not (wide - sentences) & set(embedded)  # never embedded whole
  for guide in seen:
    assert 1 <= len(guide) <= 2 and set(int(m) for m in guide) <= set(rows)
