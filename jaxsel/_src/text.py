"""Splitting documents into sentences or passages, with character spans and token costs.

Plain Python, outside jit: it turns text into the candidates (and their token costs) that the
objectives and the search select from. Every `Passage` keeps its character span, so
`documents[p.doc][p.start:p.end] == p.text` and a selection always maps back to its source.

Sentence boundaries: Latin `.`, `!`, `?` (optionally followed by closing quotes or brackets)
before whitespace, except after common abbreviations and single-letter initials ("F. Hugh");
CJK `。`, `！`, `？` (no space needed); every line break. Blank lines separate paragraphs, and a
passage never crosses a paragraph (a Markdown heading joins the paragraph below it).

Every step is linear in the text (one pass per line, one batched tokenizer call per kind of
count), so a document that is one 5 MB line splits as fast as one of many short lines.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Callable, Optional, Sequence

import numpy as np

from jaxsel._src import checks

UNITS = ("sentence", "passage", "word")
_WORD = re.compile(r"\S+")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
# Default token counter when no tokenizer is given: a CJK character, a word, or a symbol.
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
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

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _unwrap(tokenizer):
  """The Hugging Face tokenizer behind `tokenizer` (itself, or an encoder's `.tokenizer`)."""
  tok = getattr(tokenizer, "tokenizer", None) or tokenizer
  if tok is not None and not callable(tok):
    raise TypeError(
        f"`tokenizer` must be a Hugging Face tokenizer, an encoder with `.tokenizer`, or None; "
        f"got {type(tokenizer).__name__}.")
  return tok


def _batch_spans(tokenizer=None) -> Callable[[list], list]:
  """`texts -> [[(start, end), ...] for each text]`, as `token_spans`, in one tokenizer call."""
  tok = _unwrap(tokenizer)
  if tok is None:
    return lambda texts: [[m.span() for m in _TOKEN_RE.finditer(t)] for t in texts]

  def spans(texts: list) -> list:
    if not texts:
      return []
    try:
      out = tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError:  # a slow (Python) tokenizer has no offsets
      raise TypeError("`tokenizer` must be a fast Hugging Face tokenizer (with offsets); load it "
                      "with `AutoTokenizer.from_pretrained(name, use_fast=True)`.") from None
    # Some tokenizers give zero-width offsets to special pieces; they cost nothing.
    return [[tuple(o) for o in offsets if o[1] > o[0]] for offsets in out["offset_mapping"]]

  return spans


def token_spans(tokenizer=None) -> Callable[[str], list]:
  """A function `text -> [(start, end), ...]` giving the character span of every token.

  `tokenizer` may be a Hugging Face fast tokenizer (offsets from `return_offsets_mapping`),
  an object with a `.tokenizer` attribute (e.g. a jaxsel encoder), or `None`: a simple
  rule (one token per word, symbol or CJK character) that needs no model.
  """
  spans = _batch_spans(tokenizer)
  return lambda text: spans([text])[0]


def token_costs(texts: Sequence[str], tokenizer=None) -> np.ndarray:
  """Token count of every text, `[N]` int32 (without special tokens such as [CLS])."""
  texts = checks.check_texts(texts, "texts")
  tok = _unwrap(tokenizer)
  if tok is None or not texts:
    return np.asarray([len(_TOKEN_RE.findall(t)) for t in texts], np.int32)
  ids = tok(list(texts), add_special_tokens=False)["input_ids"]
  return np.asarray([len(i) for i in ids], np.int32)


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


def _costed(text: str, sentences: list, spans_of, max_tokens: Optional[int]) -> list:
  """`(start, end, tokens, paragraph)` pieces of `(start, end, paragraph)` sentences: a sentence
  longer than `max_tokens` is cut into windows of `max_tokens` tokens at token boundaries. A
  window costs the tokens of its own text (a cut inside a word tokenizes differently alone)."""
  out, windows = [], []
  for (a, b, p), toks in zip(sentences, spans_of([text[a:b] for a, b, _ in sentences])):
    if max_tokens is None or len(toks) <= max_tokens:
      out.append((a, b, len(toks), p))
      continue
    for i in range(0, len(toks), max_tokens):
      windows.append(len(out))
      out.append((a + toks[i][0], a + toks[min(i + max_tokens, len(toks)) - 1][1], 0, p))
  for i, toks in zip(windows, spans_of([text[out[i][0]:out[i][1]] for i in windows])):
    out[i] = (out[i][0], out[i][1], len(toks), out[i][3])
  return out


def _pack(text: str, pieces: list, spans_of, max_tokens: int, additive: bool) -> list:
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
    return [len(t) for t in spans_of([text[pieces[j][0]:pieces[k][1]] for j, k in runs])]

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


def _words(text: str, spans_of) -> list:
  """`(start, end, tokens)` of every whitespace-delimited word (punctuation stays with its word,
  a Markdown heading mark is not a word): whole words, never sub-word pieces."""
  found = [(m.start(), m.end()) for m in _WORD.finditer(text) if m.group().strip("#")]
  return [(a, b, len(t)) for (a, b), t in zip(found, spans_of([text[a:b] for a, b in found]))]


def _split(text: str, unit: str, max_tokens: Optional[int], spans_of, additive: bool,
           doc: int, source: Optional[str]) -> list:
  if unit == "word":
    return _titled(text, _words(text, spans_of), doc, source)
  paragraphs = _paragraph_spans(text)
  if unit == "passage":
    paragraphs = _join_headings(text, paragraphs)
  sentences = [(a, b, p) for p, (pa, pb) in enumerate(paragraphs)
               for a, b in _sentence_spans(text, pa, pb)]
  costed = _costed(text, sentences, spans_of, max_tokens)
  if unit == "sentence":
    pieces = [c[:3] for c in costed]
  else:  # a passage never crosses a paragraph
    pieces = [x for _, para in itertools.groupby(costed, key=lambda c: c[3])
              for x in _pack(text, [c[:3] for c in para], spans_of, max_tokens, additive)]
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


def _check_split(unit: str, max_tokens: Optional[int]) -> Optional[int]:
  if unit not in UNITS:
    raise ValueError(f"Unknown `unit` {unit!r}; use one of {', '.join(map(repr, UNITS))}.")
  if max_tokens is None and unit == "passage":
    max_tokens = 128
  if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                 or max_tokens < 1):
    raise ValueError(f"`max_tokens` must be a positive int or None, got {max_tokens!r}.")
  return max_tokens


def split_text(text: str, *, unit: str = "sentence", max_tokens: Optional[int] = None,
               tokenizer=None, doc: int = 0, source: Optional[str] = None) -> list:
  """Splits one document into `Passage`s with spans and token costs.

  Args:
    text: the document.
    unit: ``"sentence"`` (one candidate per sentence), ``"passage"`` (consecutive sentences
      of a paragraph packed up to `max_tokens`) or ``"word"`` (every whitespace-delimited word,
      punctuation included: token-level selection in whole words).
    max_tokens: longest candidate in tokens; longer sentences are cut at token boundaries.
      Default: none for sentences, 128 for passages; not used for words.
    tokenizer: as in `token_spans` (a Hugging Face tokenizer, an encoder, or None).
    doc, source: recorded on every passage.

  A text that is not valid Unicode (a lone surrogate) is a `ValueError` naming where it is.
  """
  if not isinstance(text, str):
    raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
  checks.check_unicode(text, "text")
  max_tokens = _check_split(unit, max_tokens)
  return _split(text, unit, max_tokens, _batch_spans(tokenizer), _unwrap(tokenizer) is None,
                doc, source)


def split_documents(documents: Sequence[str], *, unit: str = "sentence",
                    max_tokens: Optional[int] = None, tokenizer=None,
                    sources: Optional[Sequence[str]] = None) -> list:
  """`split_text` over several documents; `Passage.doc` is the document's index."""
  documents = checks.check_texts(documents, "documents")
  if sources is not None and len(sources) != len(documents):
    raise ValueError(f"`sources` must name every document: {len(sources)} names for "
                     f"{len(documents)} documents.")
  max_tokens = _check_split(unit, max_tokens)
  spans_of, additive = _batch_spans(tokenizer), _unwrap(tokenizer) is None
  out = []
  for i, d in enumerate(documents):
    out += _split(d, unit, max_tokens, spans_of, additive, i,
                  None if sources is None else sources[i])
  return out
