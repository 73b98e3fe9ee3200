"""Second-hop signals from plain text, for the CORAG "bridge" scorer (plain Python, outside jit).

Shape legend: N candidate passages.

A multi-hop question names one entity; the passage about the second one often does not
resemble the question at all, but an earlier passage names it. These signals find such links
without needing titles from the caller:

* the *lead entity* of a group of passages (one document, or one Markdown section of it): its
  heading when it has one, else the text before a leading ``"Title: "`` (at most 12 words),
  else the first capitalised phrase of its first sentence;
* `links[i, j] = 1` where passage i names the lead entity of j's group (whole words, any case,
  a trailing parenthetical such as "(1945 film)" dropped), or, for a person-like lead, a shorter
  form of it (`ShortNames`: "John W. Brunius" for "John Wilhelm Brunius"); passages of one group
  never link;
* `mentioned[j] = 1` where the query names the lead entity of j's group (either way);
* `entities[i, j]`: the capitalised phrases passages i and j (of different groups) share and
  the query does not contain, each weighted by `log(1 + groups / groups holding it)`.

And lexical signals that need neither titles nor capital letters (`lexical_signals`: lower-cased
words, English stopwords dropped, each weighted by its BM25 IDF over the request's passages,
`idf(w) = log(1 + (N − df + 0.5) / (df + 0.5))`):

* `overlap[j]`: the share of the query's IDF weight that passage j's words hold;
* `covered[i, j]`: the share that passages i and j hold together (a second hop covers what the
  first leaves out);
* `shared[i, j]`: IDF²-weighted cosine of the words passages i and j (of different groups)
  share and the query does not contain: the bridge entity of untitled text.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple, Optional, Sequence

import numpy as np

_TITLE = re.compile(r"^\s*([^\n:]{1,150}?):\s")
_HEADING = re.compile(r"^\s*#{1,6}\s+(.+?)\s*#*\s*$", re.M)
STOPWORDS = frozenset("""a an the he she it they his her its their this that these those in on at of
for by with from to and or but as is was were be been are i we you there here when where which
who what how after before during while since although though however also not no yes if then
than so such born died one two three four five six seven eight nine ten first second
third""".split())
_CONNECT = frozenset({"of", "the", "and", "de", "da", "del", "der", "van", "von", "du", "la", "le",
                      "di", "y", "&", "for", "in"})
_WORD = re.compile(r"(?:[A-Z][a-z]{0,2}\.)+(?=\s)|[\w'\u00C0-\u024F&-]+(?:\.(?=\w))?[\w'\u00C0-\u024F&-]*|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_TITLE_WORDS = 12
MIN_CHARS = 3


_LEXICAL_WORD = re.compile(r"\w+")


class BridgeSignals(NamedTuple):
  links: np.ndarray  # [N, N] float32: passage i names the lead entity of j's group
  mentioned: np.ndarray  # [N] float32: the query names the lead entity of j's group
  entities: np.ndarray  # [N, N] float32: weighted capitalised phrases shared by i and j
  groups: np.ndarray  # [N] int32: the group (document or section) of each passage
  overlap: Optional[np.ndarray] = None  # [N] float32: `lexical_signals` (None: not computed)
  covered: Optional[np.ndarray] = None  # [N, N] float32
  shared: Optional[np.ndarray] = None  # [N, N] float32


def strip_parenthetical(title: str) -> str:
  """`"Ed Wood (film)"` -> `"Ed Wood"`, whitespace normalised."""
  return " ".join(re.sub(r"\s*\([^)]*\)\s*$", "", title).split())


def entities(text: str) -> list:
  """Capitalised phrases of `text`: maximal runs of capitalised words (connectors such as
  "of", "de" allowed inside, trimmed at the ends); a run that is only a stopword (a
  sentence-initial "The", "He") is not a phrase."""
  out, run = [], []

  def flush():
    while run and run[-1].lower() in _CONNECT:
      run.pop()
    while run and run[0].lower() in STOPWORDS:
      run.pop(0)
    if run:
      phrase = " ".join(run).strip(".'-")
      if len(phrase) >= MIN_CHARS and phrase.lower() not in STOPWORDS:
        out.append(phrase)
    run.clear()

  for m in _WORD.finditer(text):
    w = m.group()
    if not (w[:1].isalnum() or w == "&"):
      flush()
    elif w[:1].isupper() or (w[:1].isdigit() and run):
      run.append(w)
    elif run and w.lower() in _CONNECT:
      run.append(w)
    else:
      flush()
  flush()
  return out


def lead_entity(text: str, title: Optional[str] = None) -> str:
  """The key phrase of a passage group whose first passage is `text` (see the module docstring)."""
  if title:
    return title.strip()
  head = _HEADING.match(text.lstrip())
  if head and text.lstrip().startswith("#"):
    return head.group(1).strip()
  m = _TITLE.match(text)
  if m and len(m.group(1).split()) <= MAX_TITLE_WORDS:
    return m.group(1).strip()
  found = entities(_SENTENCE_END.split(text.strip(), maxsplit=1)[0])
  return found[0] if found else ""


_NAME_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*\.?")  # a word of a name, an initial's dot kept
_SAID_CHARS = 80  # how far before a surname its given names are looked for
_NOT_IN_NAMES = _CONNECT | STOPWORDS


def _person_like(words: list) -> bool:
  """A lead of 2-4 capitalised words, no connector or stopword, the last not an initial."""
  return (2 <= len(words) <= 4 and all(_NAME_WORD.fullmatch(w) and w[0].isupper() for w in words)
          and not any(w.lower().rstrip(".") in _NOT_IN_NAMES for w in words)
          and len(words[-1].rstrip(".")) >= MIN_CHARS)


def _given_matches(said: str, given: str) -> bool:
  """Whether a word said before a surname can stand for the given name `given` (both lower
  case, without an initial's dot): the same name, its initial ("w" for "wilhelm"), a short form
  of at least 3 letters ("tim" for "timothy"), or the full name where the lead has only the
  initial."""
  if not said or not given:
    return False
  if said == given or (len(said) == 1 and given[0] == said) or (len(given) == 1 and said[0] == given):
    return True
  return len(said) >= 3 and given.startswith(said)


class ShortNames:
  """Finds where a text names a person-like lead entity by a shorter form: its first given
  name, then any of its other given names in order, then its surname; each given name whole,
  as an initial or as a short form of at least 3 letters ("John W. Brunius", "Edward Ludwig",
  "Tim Story" for "John Wilhelm Brunius", "Edward Irving Ludwig", "Timothy Kevin Story").
  Untitled passages take their lead from the first sentence, which gives the full name; other
  passages name the person as people usually do. The surname alone is not enough (relatives
  share it), nor a phrase that drops the first word ("Corliss Archer" is not "Meet Corliss
  Archer")."""

  def __init__(self, leads: Sequence[str]):
    self.by_surname: dict = {}  # surname (lower) -> [(group, given names)]
    for k, lead in enumerate(leads):
      words = lead.split()
      if _person_like(words):
        given = [w.rstrip(".").lower() for w in words[:-1]]
        self.by_surname.setdefault(words[-1].lower(), []).append((k, given))
    self.surnames = re.compile(r"(?<![\w'\u2019-])(?:" + "|".join(map(re.escape, sorted(self.by_surname)))
                               + r")(?![\w'\u2019-])", re.IGNORECASE) if self.by_surname else None

  def named(self, text: str, own_lead: str = "") -> set:
    """The groups whose lead `text` names by a short form (not where it writes `own_lead`)."""
    out = set()
    for m in self.surnames.finditer(text) if self.surnames else ():
      if not m.group()[0].isupper():
        continue
      before = list(_NAME_WORD.finditer(text, max(0, m.start() - _SAID_CHARS), m.start()))
      said, end = [], m.start()  # the capitalised words just before the surname, right to left
      for w in reversed(before[-3:]):
        if not (w.group()[0].isupper() and text[w.end():end].isspace()) or \
            (w.group().endswith(".") and len(w.group()) > 2):  # "Jr.", a sentence's last word
          break
        said.append(w.group())  # as written: the name compared with `own_lead` below
        end = w.start()
      bare = [w.rstrip(".").lower() for w in said]
      # .get: a match in any case may lower-case to another string ("İkeda" for "Ikeda")
      for k, given in self.by_surname.get(m.group().lower(), ()) if said else ():
        i, used = len(given), []
        for w, b in zip(said, bare):  # each stands for an earlier given name than the one after it
          j = next((j for j in range(i - 1, -1, -1) if _given_matches(b, given[j])), None)
          if j is None:
            break
          used.append(w)
          i = j
        name = " ".join([*reversed(used), m.group()])
        if used and i == 0 and name.lower() != own_lead.lower():
          out.add(k)
    return out


def whole_words(phrase: str, *, case_sensitive: bool = False) -> "re.Pattern":
  """A pattern finding `phrase` as whole words, any whitespace between them (`"Paris"` does
  not match `"Parisian"`)."""
  words = r"\s+".join(re.escape(w) for w in phrase.split())
  return re.compile(r"(?<!\w)" + words + r"(?!\w)", 0 if case_sensitive else re.IGNORECASE)


def group_ids(docs: Sequence[int], titles: Sequence[Optional[str]]) -> np.ndarray:
  """`[N]` int32: passages of one document and one heading form a group."""
  ids: dict = {}
  return np.asarray([ids.setdefault((d, t), len(ids)) for d, t in zip(docs, titles)], np.int32)


def bridge_signals(query: str, texts: Sequence[str], docs: Sequence[int],
                   titles: Sequence[Optional[str]]) -> BridgeSignals:
  """The signals of one request: the joined `query` text, the passages' `texts`, their
  documents `docs` and titles (`Passage.title`, e.g. Markdown headings; None: unknown)."""
  n = len(texts)
  groups = group_ids(docs, titles)
  g = int(groups.max()) + 1 if n else 0
  first = {}
  for i, k in enumerate(groups):
    first.setdefault(int(k), i)
  leads = [strip_parenthetical(lead_entity(texts[first[k]], titles[first[k]])) for k in range(g)]
  patterns = {k: whole_words(t) for k, t in enumerate(leads) if len(t) >= MIN_CHARS}
  same_lead = {k: {m for m in patterns if leads[m].lower() == leads[k].lower()} for k in patterns}
  short = ShortNames(leads)

  def named(text: str, own_lead: str = "") -> set:  # the groups whose lead `text` names
    return {k for k, pat in patterns.items() if pat.search(text)} | short.named(text, own_lead)

  names = np.zeros((n, g), np.float32)  # passage i names group k's lead
  for i, text in enumerate(texts):
    own = int(groups[i])
    for k in named(text, leads[own]):
      if k != own and own not in same_lead[k]:
        names[i, k] = 1.0
  links = names[:, groups]
  in_query = named(query)
  mentioned = np.asarray([float(k in in_query) for k in groups], np.float32)
  q_low = query.lower()
  q_phrases = {e.lower() for e in entities(query)}
  phrases = [{e for e in (x.lower() for x in entities(t))
              if e not in q_phrases and e not in q_low and not e.isdigit()} for t in texts]
  holders: dict = {}  # phrase -> groups holding it
  for i, ps in enumerate(phrases):
    for e in ps:
      holders.setdefault(e, set()).add(int(groups[i]))
  weight = {e: math.log(1 + g / len(h)) for e, h in holders.items()}
  ent = np.zeros((n, n), np.float32)
  for i in range(n):
    for j in range(n):
      if groups[i] != groups[j]:
        shared = phrases[i] & phrases[j]
        if shared:
          ent[i, j] = sum(weight[e] for e in sorted(shared))  # one order: the same float sum
  overlap, covered, shared = lexical_signals(query, texts, groups)
  return BridgeSignals(links, mentioned, ent, groups, overlap, covered, shared)


def content_words(text: str) -> set:
  """The lower-cased words of `text` (Unicode word characters), English stopwords dropped."""
  return {w for w in _LEXICAL_WORD.findall(text.lower()) if w not in STOPWORDS}


def lexical_signals(query: str, texts: Sequence[str], groups: Sequence[int]) -> tuple:
  """(`overlap` `[N]`, `covered` `[N, N]`, `shared` `[N, N]`) float32 of `query` and the
  passages' `texts` (see the module docstring); `shared` is zero on the diagonal and between
  passages of one group (`groups` `[N]`), `covered` is `overlap` on the diagonal."""
  n = len(texts)
  words = [content_words(t) for t in texts]
  vocab: dict = {}  # in sorted order per passage: the float sums below do not depend on hashing
  for ws in words:
    for w in sorted(ws):
      vocab.setdefault(w, len(vocab))
  has = np.zeros((n, len(vocab)), np.float32)
  for i, ws in enumerate(words):
    has[i, [vocab[w] for w in ws]] = 1.0
  df = has.sum(0)
  idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
  in_query = np.zeros(len(vocab), bool)
  in_query[[vocab[w] for w in content_words(query) if w in vocab]] = True
  q_idf = np.where(in_query, idf, 0.0).astype(np.float32)
  total = float(q_idf.sum())
  scale = 1.0 / total if total > 0 else 0.0
  overlap = has @ q_idf * scale
  covered = overlap[:, None] + overlap[None, :] - (has * q_idf) @ has.T * scale  # |i ∪ j|
  rest = has * np.where(in_query, 0.0, idf ** 2)[None, :]
  norms = np.sqrt(np.maximum((rest * has).sum(1), 1e-12))
  shared = (rest @ has.T) / (norms[:, None] * norms[None, :])
  groups = np.asarray(groups)
  shared = np.where(groups[:, None] == groups[None, :], 0.0, shared)
  return (overlap.astype(np.float32), covered.astype(np.float32), shared.astype(np.float32))
