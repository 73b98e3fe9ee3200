"""Splitting documents into sentences or passages, with character spans and token costs.

Plain Python, outside jit: it turns text into the candidates (and their token costs) that the
objectives and the search select from. Every `Passage` keeps its character span, so
`documents[p.doc][p.start:p.end] == p.text` and a selection always maps back to its source.

Sentence boundaries: Latin `.`, `!`, `?` (optionally followed by closing quotes or brackets)
before whitespace, except after common abbreviations and single-letter initials ("F. Hugh");
CJK `。`, `！`, `？` (no space needed); every line break. Blank lines separate paragraphs, and a
passage never crosses a paragraph (a Markdown heading joins the paragraph below it).

A byte order mark (U+FEFF) at the very start of a document (a file saved with one and read as
"utf-8") is not text: it belongs to no passage, so it never reaches the LLM nor changes the split.
Spans still count it (the first passage starts at 1), so they index the document as given; a
U+FEFF anywhere else is left as it is.

Every step is linear in the text (one pass per line, one batched tokenizer call per kind of
count), so a document that is one 5 MB line splits as fast as one of many short lines.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
import unicodedata
from typing import Callable, Optional, Sequence

import numpy as np

from jaxsel._src import checks
from jaxsel._src.tokens import RULE_TOKEN, TokenCounter, token_counter

UNITS = ("sentence", "passage", "word")
BOM = "\ufeff"  # a byte order mark a file read as UTF-8 (not "utf-8-sig") begins with
_HEADING_MARK = re.compile(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
# A run of end marks is tried from its first mark only: from inside the run the match could only
# fail again at the same place (re-trying every mark of a long run of dots was quadratic).
_LATIN_END = re.compile(r"(?<![.!?])[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_CJK_END = re.compile(r"[\u3002\uff01\uff1f]+[\u300d\u300f\u201d\u2019\uff09)]*")
_WORD_END = re.compile(r"[\w.]+$")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e cf al inc ltd co corp mt ft gen col lt sgt capt "
    "rev hon no nos vol fig approx dept est jan feb mar apr jun jul aug sep sept oct nov dec "
    "u.s u.k u.n a.m p.m".split())
_LONGEST_ABBREVIATION = max(map(len, _ABBREVIATIONS))
_CHECK_BATCH = 256  # passages whose packing is checked in one tokenizer call


@dataclasses.dataclass(frozen=True)
class Passage:
  """A sentence or passage of document `doc`, `text == documents[doc][start:end]`."""
  text: str
  start: int  # character offset of the first character in the document
  end: int  # one past the last character
  doc: int = 0  # index of the document it came from
  tokens: int = 0  # cost in tokens (of the tokenizer used to split)
  source: Optional[str] = None  # e.g. the file name of the document
  title: Optional[str] = None  # the Markdown heading it falls under (a key phrase for links)
  # What the reader is sent before `text` (not part of the span): with granularity="sentence",
  # a part of a passage that does not hold its passage's title gets "title: " (`heading`).
  prefix: str = ""

  @property
  def sent_text(self) -> str:
    """The passage as the reader reads it (and the encoder embeds it): `prefix + text`."""
    return self.prefix + self.text

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def heading(title: Optional[str], text: str) -> str:
  """What a part of a passage is sent with so that the reader knows what it is about: its
  passage's title as ``"title: "`` when `text` does not already hold the title, else ""."""
  if not title or not title.strip() or title in text:
    return ""
  return f"{title.strip()}: "


def token_spans(tokenizer=None) -> Callable[[str], list]:
  """A function `text -> [(start, end), ...]` giving the character span of every token.

  `tokenizer`: anything `jaxsel.token_counter` takes that gives offsets (a Hugging Face fast
  tokenizer, an encoder with `.tokenizer`, a tiktoken encoding) or `None`: a simple rule (one
  token per word, symbol or CJK character) that needs no model. An [UNK] covering several
  characters gives one span per character (as many spans as `token_costs` counts).
  """
  counter = token_counter(tokenizer)
  if not counter.has_spans:
    raise TypeError(f"the tokenizer {counter.name} gives no token offsets; `token_spans` needs "
                    "a Hugging Face fast tokenizer, a tiktoken encoding or None.")
  return lambda text: counter.spans([text])[0]


def token_costs(texts: Sequence[str], tokenizer=None) -> np.ndarray:
  """Token count of every text, `[N]` int32, in the unit of `tokenizer` (anything
  `jaxsel.token_counter` takes; without special tokens such as [CLS]). Never below the text's
  size in that unit: a word WordPiece writes as one [UNK] costs one token per character."""
  return token_counter(tokenizer).count(texts).astype(np.int32)


def _strip_span(text: str, start: int, end: int):
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def _is_abbreviation(text: str, line_start: int, dot: int) -> bool:
  """True if the `.` at `dot` ends an abbreviation or an initial rather than a sentence."""
  # The word before the dot is read back only one character further than the longest
  # abbreviation: a longer word is neither (reading back to the line's start was quadratic).
  start = max(line_start, dot - _LONGEST_ABBREVIATION - 1)
  word = _WORD_END.search(text, start, dot)
  if word is None or word.start() == start > line_start:
    return False
  w = word.group().lower()
  if w in _ABBREVIATIONS:
    return True
  return len(w) == 1 and w.isalpha()  # an initial: "F. Hugh Herbert", "J. R. R."


def _sentence_spans(text: str, start: int, end: int) -> list:
  """Sentence spans inside `text[start:end]` (one paragraph), stripped, non-empty."""
  spans = []
  line_start = start
  while line_start < end:
    nl = text.find("\n", line_start, end)
    line_end = end if nl < 0 else nl
    cuts = []
    for m in _LATIN_END.finditer(text, line_start, line_end):
      if m.group().startswith(".") and len(m.group().rstrip("\"'\u201d\u2019)]")) == 1 and \
          _is_abbreviation(text, line_start, m.start()):
        continue
      cuts.append(m.end())
    cuts += [m.end() for m in _CJK_END.finditer(text, line_start, line_end)]
    s = line_start
    for c in sorted(set(cuts)) + [line_end]:
      a, b = _strip_span(text, s, c)
      if b > a:
        spans.append((a, b))
      s = c
    line_start = line_end + 1
  return spans


def sentence_spans(text: str) -> list:
  """`(start, end)` of every sentence of `text` (its paragraphs, then their sentences, as
  `split_text(unit="sentence")` cuts them), stripped and non-empty, in reading order."""
  return [s for a, b in _paragraph_spans(text) for s in _sentence_spans(text, a, b)]


def _paragraph_spans(text: str) -> list:
  spans, s = [], 0
  for m in _PARAGRAPH_BREAK.finditer(text):
    spans.append((s, m.start()))
    s = m.end()
  spans.append((s, len(text)))
  return [p for p in (_strip_span(text, a, b) for a, b in spans) if p[1] > p[0]]


def _only_headings(text: str, start: int, end: int) -> bool:
  return all(line.lstrip().startswith("#") for line in text[start:end].split("\n") if line.strip())


def _join_headings(text: str, paragraphs: list) -> list:
  """A paragraph of Markdown headings only joins the paragraph below it (each read once)."""
  merged, headings_only = [], False
  for a, b in paragraphs:
    if headings_only:  # the joined paragraph is headings only if both parts are
      merged[-1] = (merged[-1][0], b)
    else:
      merged.append((a, b))
    headings_only = _only_headings(text, a, b)
  return merged


def _headings(text: str) -> list:
  """`(start, title)` of every Markdown heading line (`#` to `######`, a space, the title)."""
  out = []
  for m in _HEADING_MARK.finditer(text):
    line_end = text.find("\n", m.end())
    rest = text[m.end():len(text) if line_end < 0 else line_end]
    if rest:  # the title without closing #s; a title of #s only keeps the first
      out.append((m.start(), (rest.rstrip(" \t#") or rest[0]).strip()))
    elif text[m.end() - 2] in " \t":  # "#  ": a heading with an empty title
      out.append((m.start(), ""))
  return out


def _costed(text: str, sentences: list, counter: TokenCounter, max_tokens: Optional[int]) -> list:
  """`(start, end, tokens, paragraph)` pieces of `(start, end, paragraph)` sentences: a sentence
  longer than `max_tokens` is cut into windows of `max_tokens` tokens at token boundaries (the
  tokenizer's offsets; a tokenizer without offsets cuts where the tokenizer counts at most
  `max_tokens`, see `_count_windows`). A window costs the tokens of its own text (a cut inside a
  word tokenizes differently alone)."""
  counts = counter.count([text[a:b] for a, b, _ in sentences])
  out, long = [], []
  for (a, b, p), n in zip(sentences, counts):
    if max_tokens is None or n <= max_tokens:
      out.append([(a, b, int(n), p)])
    else:
      out.append(None)
      long.append(len(out) - 1)
  if counter.has_spans:
    cuts = []
    for toks in counter.spans([text[sentences[i][0]:sentences[i][1]] for i in long]):
      cuts.append([(toks[j][0], toks[min(j + max_tokens, len(toks)) - 1][1])
                   for j in range(0, len(toks), max_tokens)])
  else:
    cuts = [[(s - sentences[i][0], e - sentences[i][0]) for s, e in
             _count_windows(text, sentences[i][0], sentences[i][1], counter, max_tokens)]
            for i in long]
  windows = [[(sentences[i][0] + s, sentences[i][0] + e) for s, e in row] for i, row in zip(long, cuts)]
  costs = iter(counter.count([text[s:e] for row in windows for s, e in row]))
  for i, row in zip(long, windows):
    out[i] = [(s, e, int(next(costs)), sentences[i][2]) for s, e in row]
  return [piece for pieces in out for piece in pieces]


def _count_windows(text: str, start: int, end: int, counter: TokenCounter,
                   max_tokens: int) -> list:
  """Windows `(s, e)` of `text[start:end]` for a tokenizer that gives no offsets: each is the
  longest run of rule tokens (words, symbols, CJK characters) the tokenizer counts at most
  `max_tokens` (binary search), or, when one rule token alone is over, its longest prefix of
  characters that is not."""
  ends = [m.end() for m in RULE_TOKEN.finditer(text, start, end)]
  fits = lambda e: counter.count_one(text[s:e]) <= max_tokens  # noqa: E731
  out, s = [], start
  while True:
    while s < end and text[s].isspace():
      s += 1
    if s >= end:
      return out
    first = bisect.bisect_right(ends, s)
    if fits(ends[first]):
      lo, hi = first, len(ends) - 1
      while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(ends[mid]) else (lo, mid - 1)
      e = ends[lo]
    else:
      lo, hi = s + 1, ends[first]
      while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
      e = lo
    out.append((s, e))
    s = e


def _pack(text: str, pieces: list, counter: TokenCounter, max_tokens: int, additive: bool) -> list:
  """Packs consecutive `(start, end, tokens)` pieces of one paragraph into passages.

  The rule: a passage takes the next piece while the tokenizer counts at most `max_tokens`
  tokens in `text[passage start:piece end]`, and costs that count. Counting every such prefix
  is quadratic in a paragraph of many short sentences, so passages are planned with the sum of
  their pieces' tokens, which the rule tokenizer (`additive`) always equals. A subword
  tokenizer can count a run of pieces differently from their sum (a window that starts inside
  a word), so for it the two counts the rule rests on are checked, a batch of passages per
  call: the passage's own (at most `max_tokens`) and the one with the next piece (more). Where
  a check fails, that passage is packed by the rule, piece by piece. (Like the rule, this
  takes a count that grows as pieces are appended; tokenizers that split at spaces do.)
  """
  total = [0, *itertools.accumulate(n for _, _, n in pieces)]

  def counts(runs):  # tokens of pieces j..k together, for each run (j, k)
    if additive:
      return [total[k + 1] - total[j] for j, k in runs]
    return [int(n) for n in counter.count([text[pieces[j][0]:pieces[k][1]] for j, k in runs])]

  def planned_end(j):  # one past the last piece of the passage from piece j, by the sum
    k = j + 1
    while k < len(pieces) and total[k + 1] - total[j] <= max_tokens:
      k += 1
    return k

  out, j = [], 0
  while j < len(pieces):
    plan = []
    while j < len(pieces) and (additive or len(plan) < _CHECK_BATCH):
      plan.append((j, planned_end(j)))
      j = plan[-1][1]
    runs = [(a, k - 1) for a, k in plan if k - 1 > a] + [(a, k) for a, k in plan if k < len(pieces)]
    counted = dict(zip(runs, counts(runs)))
    for a, k in plan:
      n = counted.get((a, k - 1), pieces[a][2])
      if (k - 1 == a or n <= max_tokens) and counted.get((a, k), max_tokens + 1) > max_tokens:
        out.append((pieces[a][0], pieces[k - 1][1], n))
        continue
      k, n = a + 1, pieces[a][2]
      while k < len(pieces) and (c := counts([(a, k)])[0]) <= max_tokens:
        k, n = k + 1, c
      out.append((pieces[a][0], pieces[k - 1][1], n))
      break
    j = k
  return out


def _words(text: str, counter: TokenCounter) -> list:
  """`(start, end, tokens)` of every word, each costing its own tokens (never less: an [UNK]
  word costs its characters). A word is one of the tokenizer's pre-tokenisation words (each
  CJK character for BERT-family tokenizers and the rule, a run of CJK text for byte-level BPE);
  punctuation joins the word it touches ("film,", "(Kiss)", "don't" stay whole) and a Markdown
  heading mark is not a word: whole words, never sub-word pieces."""
  found = []
  for a, b in counter.words(text):
    if found and found[-1][1] == a and _joins(text[a - 1], text[a]):
      found[-1] = (found[-1][0], b)
    else:
      found.append((a, b))
  found = [(a, b) for a, b in found if text[a:b].strip("#")]
  costs = counter.count([text[a:b] for a, b in found])
  return [(a, b, int(n)) for (a, b), n in zip(found, costs)]


def _joins(left: str, right: str) -> bool:
  """Whether two touching pre-tokenisation words are one word: not both letters or digits
  (punctuation joins its neighbour), and not after a full-width mark ("、", "。"), which ends
  the CJK word before it and never starts the next."""
  if left.isalnum() and right.isalnum():
    return False
  return left.isalnum() or unicodedata.east_asian_width(left) not in ("W", "F")


def _split(text: str, unit: str, max_tokens: Optional[int], counter: TokenCounter,
           additive: bool, doc: int, source: Optional[str]) -> list:
  if text.startswith(BOM):  # split as a space: no passage holds it, the offsets stay the caller's
    text = " " + text[1:]
  if unit == "word":
    return _titled(text, _words(text, counter), doc, source)
  paragraphs = _paragraph_spans(text)
  if unit == "passage":
    paragraphs = _join_headings(text, paragraphs)
  sentences = [(a, b, p) for p, (pa, pb) in enumerate(paragraphs)
               for a, b in _sentence_spans(text, pa, pb)]
  costed = _costed(text, sentences, counter, max_tokens)
  if unit == "sentence":
    pieces = [c[:3] for c in costed]
  else:  # a passage never crosses a paragraph
    pieces = [x for _, para in itertools.groupby(costed, key=lambda c: c[3])
              for x in _pack(text, [c[:3] for c in para], counter, max_tokens, additive)]
  return _titled(text, pieces, doc, source)


def _titled(text: str, pieces: list, doc: int, source: Optional[str]) -> list:
  """`Passage`s of `(start, end, tokens)` pieces, each titled by the heading it falls under."""
  headings = _headings(text)
  out, h = [], 0
  for s, e, n in pieces:
    # The last heading that starts at or before the passage's end (its own first line, or above).
    while h < len(headings) and headings[h][0] < e:
      h += 1
    title = headings[h - 1][1] if h else None
    out.append(Passage(text[s:e], s, e, doc, n, source, title))
  return out


DEFAULT_PASSAGE_TOKENS = 128  # `max_tokens` of passages when none is given


def default_max_tokens(unit: str, max_tokens: Optional[int]) -> Optional[int]:
  """`max_tokens`, else the unit's default (128 for passages, none for sentences and words)."""
  return DEFAULT_PASSAGE_TOKENS if max_tokens is None and unit == "passage" else max_tokens


def _check_split(unit: str, max_tokens: Optional[int]) -> Optional[int]:
  checks.choice(unit, "unit", UNITS)
  return checks.integer(default_max_tokens(unit, max_tokens), "max_tokens", none=True)


def split_text(text: str, *, unit: str = "sentence", max_tokens: Optional[int] = None,
               tokenizer=None, doc: int = 0, source: Optional[str] = None) -> list:
  """Splits one document into `Passage`s with spans and token costs.

  Args:
    text: the document.
    unit: ``"sentence"`` (one candidate per sentence), ``"passage"`` (consecutive sentences
      of a paragraph packed up to `max_tokens`) or ``"word"`` (the tokenizer's words: its
      pre-tokenisation, so each CJK character is a word for BERT-family tokenizers, with
      punctuation kept on the word it touches: token-level selection in whole words).
    max_tokens: longest candidate in the tokenizer's tokens; longer sentences are cut at token
      boundaries. Default: none for sentences, 128 for passages; not used for words.
    tokenizer: what counts the tokens, the reader's unit: anything `jaxsel.token_counter`
      takes (a Hugging Face or tiktoken tokenizer, a name or path, a callable
      `texts -> counts`, an encoder) or None (the rule: a word, symbol or CJK character each
      one token). Every `Passage.tokens` is in that unit and never below the text's size in it.
    doc, source: recorded on every passage.

  A text that is not valid Unicode (a lone surrogate) is a `ValueError` naming where it is.
  """
  if not isinstance(text, str):
    raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
  checks.check_unicode(text, "text")
  max_tokens = _check_split(unit, max_tokens)
  return _split(text, unit, max_tokens, token_counter(tokenizer), tokenizer is None, doc, source)


def split_documents(documents: Sequence[str], *, unit: str = "sentence",
                    max_tokens: Optional[int] = None, tokenizer=None,
                    sources: Optional[Sequence[str]] = None) -> list:
  """`split_text` over several documents; `Passage.doc` is the document's index."""
  documents = checks.check_texts(documents, "documents")
  if sources is not None and len(sources) != len(documents):
    raise ValueError(f"`sources` must name every document: {len(sources)} names for "
                     f"{len(documents)} documents.")
  max_tokens = _check_split(unit, max_tokens)
  counter = token_counter(tokenizer)
  out = []
  for i, d in enumerate(documents):
    out += _split(d, unit, max_tokens, counter, tokenizer is None, i,
                  None if sources is None else sources[i])
  return out
