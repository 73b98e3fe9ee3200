"""Splitting documents into sentences or passages, with character spans and token costs.

Plain Python, outside jit: it turns text into the candidates (and their token costs) that the
objectives and the search select from. Every `Passage` keeps its character span, so
`documents[p.doc][p.start:p.end] == p.text` and a selection always maps back to its source.

Sentence boundaries: Latin `.`, `!`, `?` (optionally followed by closing quotes or brackets)
before whitespace, except after common abbreviations and single-letter initials ("F. Hugh");
CJK `。`, `！`, `？` (no space needed); every line break. Blank lines separate paragraphs, and a
passage never crosses a paragraph (a Markdown heading joins the paragraph below it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

UNITS = ("sentence", "passage")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
# Default token counter when no tokenizer is given: a CJK character, a word, or a symbol.
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
_HEADING = re.compile(r"(?m)^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_LATIN_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_CJK_END = re.compile(r"[\u3002\uff01\uff1f]+[\u300d\u300f\u201d\u2019\uff09)]*")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e cf al inc ltd co corp mt ft gen col lt sgt capt "
    "rev hon no nos vol fig approx dept est jan feb mar apr jun jul aug sep sept oct nov dec "
    "u.s u.k u.n a.m p.m".split())


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


def token_spans(tokenizer=None) -> Callable[[str], list]:
  """A function `text -> [(start, end), ...]` giving the character span of every token.

  `tokenizer` may be a Hugging Face fast tokenizer (offsets from `return_offsets_mapping`),
  an object with a `.tokenizer` attribute (e.g. a jaxsel encoder), or `None`: a simple
  rule (one token per word, symbol or CJK character) that needs no model.
  """
  tok = getattr(tokenizer, "tokenizer", None) or tokenizer
  if tok is None:
    return lambda text: [m.span() for m in _TOKEN_RE.finditer(text)]
  if not callable(tok):
    raise TypeError(
        f"`tokenizer` must be a Hugging Face tokenizer, an encoder with `.tokenizer`, or None; "
        f"got {type(tokenizer).__name__}.")

  def spans(text: str) -> list:
    out = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    # Some tokenizers give zero-width offsets to special pieces; they cost nothing.
    return [tuple(o) for o in out["offset_mapping"] if o[1] > o[0]]

  return spans


def token_costs(texts: Sequence[str], tokenizer=None) -> np.ndarray:
  """Token count of every text, `[N]` int32 (without special tokens such as [CLS])."""
  texts = _check_texts(texts, "texts")
  tok = getattr(tokenizer, "tokenizer", None) or tokenizer
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
  word = re.search(r"[\w.]+$", text[line_start:dot])
  if word is None:
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


def _windows(text: str, a: int, b: int, spans_fn, max_tokens: int) -> list:
  """Cuts `text[a:b]` into pieces of at most `max_tokens` tokens, at token boundaries."""
  toks = [(a + s, a + e) for s, e in spans_fn(text[a:b])]
  if len(toks) <= max_tokens:
    return [(a, b)]
  out = []
  for i in range(0, len(toks), max_tokens):
    chunk = toks[i:i + max_tokens]
    out.append((chunk[0][0], chunk[-1][1]))
  return out


def split_text(text: str, *, unit: str = "sentence", max_tokens: Optional[int] = None,
               tokenizer=None, doc: int = 0, source: Optional[str] = None) -> list:
  """Splits one document into `Passage`s with spans and token costs.

  Args:
    text: the document.
    unit: ``"sentence"`` (one candidate per sentence) or ``"passage"`` (consecutive sentences
      of a paragraph packed up to `max_tokens`).
    max_tokens: longest candidate in tokens; longer sentences are cut at token boundaries.
      Default: none for sentences, 128 for passages.
    tokenizer: as in `token_spans` (a Hugging Face tokenizer, an encoder, or None).
    doc, source: recorded on every passage.
  """
  if not isinstance(text, str):
    raise TypeError(f"`text` must be a str, got {type(text).__name__}.")
  if unit not in UNITS:
    raise ValueError(f"Unknown `unit` {unit!r}; use one of {', '.join(map(repr, UNITS))}.")
  if max_tokens is None and unit == "passage":
    max_tokens = 128
  if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                 or max_tokens < 1):
    raise ValueError(f"`max_tokens` must be a positive int or None, got {max_tokens!r}.")
  spans_fn = token_spans(tokenizer)
  paragraphs = _paragraph_spans(text)
  if unit == "passage":  # a Markdown heading belongs to the paragraph below it
    merged = []
    for p in paragraphs:
      if merged and all(line.lstrip().startswith("#")
                        for line in text[merged[-1][0]:merged[-1][1]].split("\n") if line.strip()):
        merged[-1] = (merged[-1][0], p[1])
      else:
        merged.append(p)
    paragraphs = merged
  pieces = []  # (start, end, tokens)
  for pa, pb in paragraphs:
    sentences = []
    for a, b in _sentence_spans(text, pa, pb):
      for s, e in (_windows(text, a, b, spans_fn, max_tokens) if max_tokens else [(a, b)]):
        sentences.append((s, e, len(spans_fn(text[s:e]))))
    if unit == "sentence":
      pieces += sentences
      continue
    cur = None
    for s, e, _ in sentences:
      if cur is not None:
        n = len(spans_fn(text[cur[0]:e]))
        if n <= max_tokens:
          cur = (cur[0], e, n)
          continue
        pieces.append(cur)
      cur = (s, e, len(spans_fn(text[s:e])))
    if cur is not None:
      pieces.append(cur)
  headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
  out, h = [], 0
  for s, e, n in pieces:
    # The last heading that starts at or before the passage's end (its own first line, or above).
    while h < len(headings) and headings[h][0] < e:
      h += 1
    title = headings[h - 1][1] if h else None
    out.append(Passage(text[s:e], s, e, doc, n, source, title))
  return out


def split_documents(documents: Sequence[str], *, unit: str = "sentence",
                    max_tokens: Optional[int] = None, tokenizer=None,
                    sources: Optional[Sequence[str]] = None) -> list:
  """`split_text` over several documents; `Passage.doc` is the document's index."""
  documents = _check_texts(documents, "documents")
  if sources is not None and len(sources) != len(documents):
    raise ValueError(f"`sources` must name every document: {len(sources)} names for "
                     f"{len(documents)} documents.")
  out = []
  for i, d in enumerate(documents):
    out += split_text(d, unit=unit, max_tokens=max_tokens, tokenizer=tokenizer, doc=i,
                      source=None if sources is None else sources[i])
  return out


def _check_texts(texts, name: str) -> list:
  if isinstance(texts, str):
    raise TypeError(f"`{name}` must be a list of strings, not one string; wrap it: [{name}].")
  if texts is None or not isinstance(texts, Iterable):
    raise TypeError(f"`{name}` must be a list of strings, got {type(texts).__name__}.")
  texts = list(texts)
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise TypeError(f"`{name}[{i}]` must be a str, got {type(t).__name__}.")
  return texts
