"""One budget across granularities: a candidate passage sent whole or as some of its sentences.

Shape legend: M candidate passages, N sentence candidates, K picks.

With ``granularity="sentence"`` (`Pipeline.select`, `select_many`) the candidates the methods
choose among are the sentences of the request's passages (the passages as the Pipeline builds
them at ``"passage"``: split from documents, given as `Passage`s, or retrieved from an index):

1. `sentences` cuts each passage into its sentences (`text.sentence_spans`; a Markdown heading
   line goes with the sentence after it); a passage of one sentence stays its own candidate. A sentence keeps its passage's `doc`, `source` and
   `title`, its offsets are in the same document as its passage's (`start + offset`), and one
   that does not hold its passage's title is sent after it (``"title: sentence"``, the
   `Passage.prefix`; `text.heading`), so a sentence read alone still says what it is about.
   It costs what the reader is sent, prefix included. Its group (the text signals' and the
   learned scorer's document id) is its passage's document, so the second-hop signals of a
   passage (its lead entity, links to and from it) are its sentences'.
2. The method selects among the sentences as among passages (greedy, CORAG and the baselines
   alike). `k`, `pinned` and `max_per_group` count passages, as at ``"passage"`` (a document
   given to the server or an adapter is one passage): the solve runs without them, and its
   picks are kept in order while they hold (`Units`; a sentence of a passage already in always
   fits), before the top-up, which honours them too.
3. `merge` turns the picked sentences into what is sent: consecutive picked sentences of one
   passage become one `Passage` (their span, one prefix), a passage all of whose sentences are
   picked is sent whole, as it is; a sentence is therefore never sent beside its passage. The
   units are ordered by their first pick. Merging only drops separators, numbers and
   prefixes, and the cost is counted again on what is sent: the budget holds for the units
   (`reader.fit` for the candidates the Pipeline counts itself, the units' own `tokens` for
   `Passage`s given as they are).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

import numpy as np

from jaxsel._src import checks
from jaxsel._src import text as text_lib
from jaxsel._src.tokens import TokenCounter

GRANULARITIES = ("passage", "sentence", "auto")
_HEADING = re.compile(r"#{1,6}[ \t]")  # a Markdown heading line (`text` module's rule)


def check_granularity(granularity, *, unit: str = "passage", embeddings: bool = False) -> str:
  """`granularity` when it is one of `GRANULARITIES` (a ValueError naming the argument
  otherwise); ``"sentence"`` goes neither with word candidates (`unit="word"`) nor with
  `embeddings` of whole passages (the sentences are embedded by the Pipeline's encoder);
  ``"auto"`` goes with both and is then ``"passage"`` (`request.resolved_granularity`)."""
  checks.choice(granularity, "granularity", GRANULARITIES,
                hint=" ('passage': candidates sent whole; 'sentence': a passage sent whole or as "
                     "some of its sentences; 'auto': sentences when the budget cannot hold every "
                     "passage whole)")
  if granularity == "sentence" and unit == "word":
    raise ValueError("`granularity='sentence'` cuts passages into sentences; the Pipeline's "
                     "candidates are words (`unit='word'`). Use unit='passage'.")
  if granularity == "sentence" and embeddings:
    raise ValueError("`granularity='sentence'` embeds each passage's sentences with the "
                     "Pipeline's encoder; `embeddings` of whole passages cannot serve them. "
                     "Pass embeddings=None, or granularity='passage'.")
  return granularity


def resolve(granularity: str, *, budget, costs, embeddings: bool = False,
            unit: str = "passage") -> str:
  """`granularity`, with ``"auto"`` resolved for a request of candidates costing `costs` (`[M]`,
  as sent) under `budget`: ``"sentence"`` when the budget cannot hold every candidate whole,
  else ``"passage"`` (so also without a budget, with the caller's `embeddings` of whole
  passages, and for candidates no longer than a sentence: `unit` ``"sentence"`` or
  ``"word"``, whose sentences are themselves)."""
  if granularity != "auto":
    return granularity
  if budget is None or embeddings or unit != "passage":
    return "passage"
  return "sentence" if float(np.sum(costs)) > float(budget) else "passage"


def sentences(passages: list, counter: TokenCounter) -> tuple:
  """`[M]` passages -> (`[N]` sentence `Passage`s, `parents [N]` int32: each one's passage,
  the `[M]` passages). Each sentence's `tokens` are `counter`'s count of what it is sent as
  (`sent_text`); a passage of one sentence is its own candidate, as it is."""
  out, parents, todo = [], [], []
  for m, p in enumerate(passages):
    spans = _headed(p.text, text_lib.sentence_spans(p.text))
    if len(spans) <= 1:
      out.append(p)
      parents.append(m)
      continue
    for a, b in spans:
      t = p.text[a:b]
      todo.append(len(out))
      out.append(dataclasses.replace(p, text=t, start=p.start + a, end=p.start + b,
                                     prefix=text_lib.heading(p.title, t)))
      parents.append(m)
  if todo:
    costs = counter.count([out[i].sent_text for i in todo])
    for i, c in zip(todo, costs):
      out[i] = dataclasses.replace(out[i], tokens=int(c))
  return out, np.asarray(parents, np.int32), list(passages)


def _headed(text: str, spans: list) -> list:
  """`spans` with each Markdown heading line joined to the sentence after it (a heading alone
  says nothing; with its first sentence it is what the passage is about). A heading line is
  one piece however many sentence ends it holds ("## Manchester United F.C. season"); headings
  with no sentence after them stay as they are."""
  out, start, line_end = [], None, -1
  for a, b in spans:
    if start is not None and a < line_end:  # the rest of a heading line
      continue
    if _HEADING.match(text, a):
      start = a if start is None else start
      nl = text.find("\n", a)
      line_end = len(text) if nl < 0 else nl
      continue
    out.append((a if start is None else start, b))
    start = None
  if start is not None:
    out.append((start, spans[-1][1]))
  return out


def _runs(indices: np.ndarray, parents: np.ndarray) -> list:
  """The picked sentences `indices` as runs `[i, ..., j]` of consecutive candidates of one
  passage (candidates of a passage are consecutive), in candidate order."""
  runs = []
  for i in sorted(int(x) for x in indices):
    if runs and runs[-1][-1] == i - 1 and parents[i] == parents[runs[-1][-1]]:
      runs[-1].append(i)
    else:
      runs.append([i])
  return runs


def _unit(run: list, sents: list, parent, whole: bool, counter: TokenCounter):
  """The `Passage` a run of sentences of `parent` is sent as: `parent` itself when the run
  is all of it, else the run's span with the prefix its text needs."""
  if whole or (len(run) == 1 and sents[run[0]] is parent):
    return parent
  first, last = sents[run[0]], sents[run[-1]]
  if len(run) == 1:
    return first
  text = parent.text[first.start - parent.start:last.end - parent.start]
  prefix = text_lib.heading(parent.title, text)
  return dataclasses.replace(parent, text=text, start=first.start, end=last.end, prefix=prefix,
                             tokens=int(counter.count_one(prefix + text)))


def merge(result, parents: np.ndarray, passages: list, counter: TokenCounter,
          budget: Optional[float], *, own_costs: bool):
  """`result` (a `SelectionResult` over the sentence candidates) with its picks merged into
  the units sent (see the module docstring): `passages` `[K]` the units, `indices` `[K]` the
  first sentence of each, `scores` their best sentence's, `gains` the sum of their sentences',
  `curve` the objective after every sentence picked up to the unit. With `own_costs` (the
  caller's `Passage`s, costed by their `tokens`), the last units are dropped while their
  tokens exceed `budget`; otherwise `reader.fit` counts the context as sent."""
  order = np.asarray(result.indices, np.int64)
  if not len(order):
    return dataclasses.replace(result, granularity="sentence")
  rank = {int(i): r for r, i in enumerate(order)}
  sents = result.candidates
  counts = np.bincount(parents, minlength=len(passages))
  runs = sorted(_runs(order, parents), key=lambda run: min(rank[i] for i in run))
  units, firsts, scores, gains, curve, last = [], [], [], [], [], -1
  for run in runs:
    m = int(parents[run[0]])
    units.append(_unit(run, sents, passages[m], len(run) == counts[m], counter))
    ranks = [rank[i] for i in run]
    firsts.append(run[0])
    gains.append(float(np.sum(result.gains[ranks])))
    last = max(last, *ranks)
    curve.append(float(result.curve[last]))
    if result.scores is not None:
      scores.append(float(np.max(result.scores[ranks])))
  if own_costs and budget is not None and np.isfinite(budget):
    while units and sum(u.tokens for u in units) > budget:
      units, firsts, gains, curve = units[:-1], firsts[:-1], gains[:-1], curve[:-1]
      scores = scores[:len(units)]
  return dataclasses.replace(
      result, passages=units, indices=np.asarray(firsts, np.int64),
      scores=None if result.scores is None else np.asarray(scores, np.float32),
      gains=np.asarray(gains, np.float32), curve=np.asarray(curve, np.float32),
      cost=int(sum(u.tokens for u in units)), granularity="sentence")


class Units:
  """The passages (`parents` `[N]`) the picks so far come from, against `k` passages and at
  most `cap` passages per group (`constraints`' `(pinned, cap_groups [N], cap)`, ids of the
  passages' groups; -1: none)."""

  def __init__(self, parents: np.ndarray, k: Optional[int], constraints: Optional[tuple]):
    self.parents, self.k = parents, k
    self.groups, self.cap = (None, None) if constraints is None else constraints[1:]
    self.units, self.per_group = set(), {}

  def fits(self, i: int) -> bool:
    m = int(self.parents[i])
    if m in self.units:
      return True
    if self.k is not None and len(self.units) >= self.k:
      return False
    g = -1 if self.groups is None else int(self.groups[i])
    return g < 0 or self.per_group.get(g, 0) < self.cap

  def add(self, i: int) -> None:
    m = int(self.parents[i])
    if m not in self.units:
      self.units.add(m)
      g = -1 if self.groups is None else int(self.groups[i])
      self.per_group[g] = self.per_group.get(g, 0) + 1


def within(picks: tuple, parents: np.ndarray, *, k: Optional[int],
           constraints: Optional[tuple]) -> tuple:
  """(order, gains, curve) `[K]` of sentence picks, less those that would bring in a passage
  beyond `k` passages or beyond its group's cap (`Units`), in order."""
  order = np.asarray(picks[0], np.int64)
  units, keep = Units(parents, k, constraints), []
  for t, i in enumerate(order):
    if units.fits(int(i)):
      units.add(int(i))
      keep.append(t)
  keep = np.asarray(keep, np.int64)
  return tuple(np.asarray(x)[keep] for x in picks)


def fill(order: np.ndarray, gains: np.ndarray, curve: np.ndarray, *, costs: np.ndarray,
         relevance: np.ndarray, parents: np.ndarray, budget: float, k: Optional[int] = None,
         constraints: Optional[tuple] = None, skip: Optional[np.ndarray] = None,
         links: Optional[np.ndarray] = None, groups: Optional[np.ndarray] = None,
         guide: Optional[Sequence[int]] = None, guide_whole: float = 0.0,
         extra: Optional[Sequence[int]] = None) -> tuple:
  """CORAG's top-up at sentence granularity. In order, each taken while it fits the budget
  (its `costs` `[N]`), `k` passages and its group's cap of passages (`constraints`, `Units`)
  and is not to be skipped (`skip` `[N]` bool: `candidates.repeats`):

  1. the searched `order` `[T]` (always: it fits), the lead (first) sentence of each `guide`
     passage (the passages a search over whole passages chose, `guide.py`) sent after its
     pinned picks and before the others; or, when the `guide` passages' sentences cost at
     most `guide_whole` x `budget`, the pinned picks, every sentence of the guide's passages
     (sent whole), then each `extra` passage whole while the budget holds it whole (the next
     passages of a longer guide search), then the other searched picks while they fit;
  2. the lead sentence of each passage the search picked from, then the first sentence of
     each group (a document or section) they name (`links` `[N, N]` and `groups` `[N]`, the
     text signals': sentence i names the lead entity of j's group, which is its first
     sentence's; any sentence of a searched passage counts; by decreasing relevance);
  3. the other sentences of the guide's passages, then of the searched passages (passages in
     order, each one's sentences by decreasing `relevance` `[N]`);
  4. every other sentence by decreasing relevance.

  The sentence search stops a few picks deep and often in a passage that only looks relevant;
  the guide compares whole passages and finds the ones the question is about more often (two
  hops), a lead sentence says what its passage is about, and a passage a searched one names is
  the next hop (the director of the film; a 2WikiMultihopQA fact is mostly the lead of each of
  2-4 passages, a HotpotQA fact the rest of two passages). -> (order, gains, curve) `[K]`: a
  searched pick keeps its gain and objective value, a filled one has gain 0 and the value the
  search reached (a guide's lead or whole passage: that of the pinned picks before it, else
  0)."""
  order = [int(i) for i in order]
  pinned = set() if constraints is None else {int(i) for i in constraints[0]}
  first = [t for t, i in enumerate(order) if i in pinned]
  after = [t for t, i in enumerate(order) if i not in pinned]
  by_relevance = sorted(range(len(costs)), key=lambda i: (-float(relevance[i]), i))
  searched = list(dict.fromkeys(int(parents[i]) for i in order))
  members = {}  # each passage's sentences, in order
  for i, m in enumerate(parents):
    members.setdefault(int(m), []).append(i)
  lead = {m: sentences[0] for m, sentences in members.items()}
  guide = [int(m) for m in (() if guide is None else guide) if int(m) in members]
  guided = [i for m in guide for i in members[m]]
  sent_whole = bool(guided) and float(np.sum(costs[guided])) <= guide_whole * budget
  for m in (int(m) for m in (() if extra is None or not sent_whole else extra)):
    more = [] if m in guide else members.get(m, [])
    if not more or float(np.sum(costs[guided + more])) > budget:
      break
    guide, guided = guide + [m], guided + more
  # The searched picks fit (the search and `within` saw to it); sent after the guide's
  # passages whole, those past the budget are not.
  held = [order[t] for t in (first if sent_whole else range(len(order)))]
  taken, spent = set(held), float(np.sum(costs[held])) if held else 0.0
  units = Units(parents, k, constraints)
  for i in held:
    units.add(i)

  def take(candidates) -> list:
    nonlocal spent
    out = []
    for i in candidates:
      if (i in taken or spent + float(costs[i]) > budget or (skip is not None and skip[i])
          or not units.fits(i)):
        continue
      out.append(i)
      taken.add(i)
      spent += float(costs[i])
      units.add(i)
    return out

  leads = take(guided if sent_whole else [lead[m] for m in guide])
  if sent_whole:  # what is searched from: the pinned, the guide's and the kept picks' passages
    kept = set(take([order[t] for t in after]))
    after = [t for t in after if order[t] in kept]
    searched = list(dict.fromkeys(int(parents[i]) for i in
                                  [order[t] for t in first] + leads + [order[t] for t in after]))
  filled = take([lead[m] for m in searched]
                + _linked_leads(searched, parents, links, groups, relevance)
                + [i for m in guide + searched for i in by_relevance if parents[i] == m]
                + by_relevance)
  before = float(curve[first[-1]]) if first else 0.0
  last = float(curve[-1]) if len(curve) else 0.0
  gains, curve = np.asarray(gains), np.asarray(curve)
  return (np.asarray([order[t] for t in first] + leads + [order[t] for t in after] + filled,
                     np.int64),
          np.concatenate([gains[first], np.zeros(len(leads), gains.dtype), gains[after],
                          np.zeros(len(filled), gains.dtype)]),
          np.concatenate([curve[first], np.full(len(leads), before, curve.dtype), curve[after],
                          np.full(len(filled), last, curve.dtype)]))


def _linked_leads(searched: list, parents: np.ndarray, links, groups, relevance) -> list:
  """The first sentence of each group that a sentence of a `searched` passage names (`links`,
  `groups`; none when None) and that is not in a searched passage, by decreasing relevance."""
  if links is None or groups is None or not searched:
    return []
  groups = np.asarray(groups)
  named = (np.asarray(links)[np.isin(parents, searched)] > 0).any(axis=0)  # [N]
  ids, firsts = np.unique(groups, return_index=True)  # each group's first sentence
  hops = firsts[np.isin(ids, groups[named]) & ~np.isin(parents[firsts], searched)]
  return sorted(hops.tolist(), key=lambda i: (-float(relevance[i]), i))


def top_up(build, searched: tuple, *, costs: np.ndarray, relevance: np.ndarray,
           parents: np.ndarray, budget: float, k: Optional[int], constraints: Optional[tuple],
           skip: Optional[np.ndarray], sent_cost=None, links: Optional[np.ndarray] = None,
           groups: Optional[np.ndarray] = None, guide: Optional[Sequence[int]] = None,
           guide_whole: float = 0.0, extra: Optional[Sequence[int]] = None):
  """CORAG's top-up at sentence granularity (`fill` of the `searched` (order, gains, curve)),
  then the picks merged into the units sent (`build(order, gains, curve, budget=None)`, a
  `SelectionResult`). Sentences of one passage sent together cost less than apart (one prefix,
  one number), so the fill runs again with what the merge saved, while the context as sent
  (`sent_cost(result)`, default `result.cost`) stays within the budget and grows (at most 3
  rounds; a round over the budget is not taken, and the first round is trimmed as any
  selection is)."""
  best, best_cost, spare = None, -1, 0.0
  for _ in range(3):
    picks = fill(*searched, costs=costs, relevance=relevance, parents=parents,
                 budget=budget + spare, k=k, constraints=constraints, skip=skip, links=links,
                 groups=groups, guide=guide, guide_whole=guide_whole, extra=extra)
    result = build(*picks, budget=None)  # untrimmed: the whole fill, or nothing of it
    sent = result.cost if sent_cost is None else sent_cost(result)
    if sent > budget or sent <= best_cost:
      break
    best, best_cost = result, sent
    spare = float(np.sum(costs[picks[0]])) - sent
  return best if best is not None else build(*picks)
