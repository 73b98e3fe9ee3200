"""What `Pipeline.select` returns: the picks in order with their scores, gains and saturation
curve, laid out as a table, JSON, a plot, or the prompt for an LLM.

Shape legend: K picks, Q queries, N candidates.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import NamedTuple, Optional

import numpy as np

from jaxsel._src import checks
from jaxsel._src.base import Selection
from jaxsel._src.greedy import saturation_point

DEFAULT_TEMPLATE = (
    "Answer the question using only the context below.\n\n"
    "Context:\n{context}\n\n"
    "Question: {query}\n"
    "Answer:")
TEXT_TEMPLATE = "{context}"


def join_context(texts, *, numbered: bool = True) -> str:
  """Passages joined into a prompt's context: blank lines between, `[1] `, `[2] `, … before."""
  if not numbered:
    return "\n\n".join(texts)
  return "\n\n".join(f"[{i + 1}] {t}" for i, t in enumerate(texts))


PLACEHOLDER = re.compile(r"\{(query|context)\}")


def fill_template(template: str, queries, context: str) -> str:
  """`template` with `{query}` (the queries, one per line) and `{context}` filled in, in one
  pass: a question or a passage that itself contains "{context}" or "{query}" stays as written."""
  values = {"query": "\n".join(queries), "context": context}
  return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


# The orders a context can be sent in (`SelectionResult.ordered`).
ORDERS = ("selection", "pick", "document", "relevance", "edges")


class Pick(NamedTuple):
  """One pick, named by its document: `SelectionResult.picks`."""
  document: int  # the document's index (`Passage.doc`: in the documents given)
  start: int  # the characters sent are `documents[document][start:end]`
  end: int
  text: str  # those characters
  tokens: int  # what the pick costs
  relevance: Optional[float]  # to the queries (max over them); None for text selection
  gain: float  # its marginal gain under the method's objective when it was picked
  # What is sent before `text`: a part that does not hold its document's title gets "title: "
  # (`Passage.prefix`, granularity "sentence"); "" otherwise. `tokens` counts it.
  prefix: str = ""


@dataclasses.dataclass
class SelectionResult:
  """What `Pipeline.select` picked, in pick order, and why.

  Arrays are NumPy, `[K]` over the picks unless said otherwise.
  """
  method: str
  queries: list  # the Q query strings ([] for text selection)
  passages: list  # [K] picked `Passage`s in pick order
  indices: np.ndarray  # [K] their positions in `candidates`
  scores: Optional[np.ndarray]  # [K] relevance of each pick (max over queries); None without queries
  gains: np.ndarray  # [K] marginal gain of each pick under the method's objective
  curve: np.ndarray  # [K] objective value after each pick: the saturation curve
  cost: int  # tokens of all picks
  budget: Optional[float]
  candidates: list  # [N] every candidate `Passage`
  candidate_scores: Optional[np.ndarray] = None  # [Q, N] relevance r_qj (non-negative)
  documents: Optional[list] = None  # the source documents, when the pipeline split them
  unit: str = "passage"  # what a candidate is: "passage", "sentence" or "word"
  # "sentence": `candidates` are the sentences of the request's passages and each pick is a
  # passage or a run of its sentences (`jaxsel._src.pipeline.granularity`); "passage": as is.
  granularity: str = "passage"
  # Greedy's certificate (`jaxsel.greedy`): no selection within the budget (and k) reaches an
  # objective value above `bound`, so the picks reach at least `certified` of the optimum.
  # None where there is none (CORAG, the baselines, stochastic greedy).
  bound: Optional[float] = None
  certified: Optional[float] = None
  # CORAG: whether the search scored every order within the budget (its answer is then exact
  # for the scorer), the value of its answer (before the top-up), and its highest optimistic
  # value estimate (UCT's; not a bound: `jaxsel._src.tree.search_estimate`).
  exhausted: Optional[bool] = None
  searched: Optional[float] = None
  estimate: Optional[float] = None

  @property
  def certificate(self) -> str:
    """One line on how good the picks provably are ("" where nothing is known)."""
    if self.certified is not None:
      value = float(self.curve[-1]) if len(self.curve) else 0.0
      return (f"certified \u2265 {math.floor(100 * self.certified)}% of optimal "
              f"(value {value:.4g}, upper bound {self.bound:.4g})")
    if self.exhausted:
      return (f"exact: the search scored every order within the budget (best value "
              f"{self.searched:.4g})")
    if self.estimate is not None:
      return (f"search not exhaustive: best value found {self.searched:.4g}, optimistic "
              f"estimate {self.estimate:.4g} (UCT's, not a bound)")
    return ""

  @property
  def saturation(self) -> int:
    """Number of picks before the marginal gain falls below 5% of the first pick's."""
    g = np.asarray(self.gains, np.float32)  # on the host: no JAX program for a short list
    sel = Selection(indices=np.asarray(self.indices, np.int32), gains=g, values=g,
                    count=np.asarray(len(g), np.int32), cost=np.zeros(()),
                    bound=np.zeros(()), certified=np.zeros(()))
    return int(saturation_point(sel))

  def __len__(self) -> int:
    return len(self.passages)

  @property
  def picks(self) -> list:
    """`[K]` `Pick`s in pick order: each names its document and the span of it that is sent
    (a part of it at granularity "sentence", or where the pipeline split the document)."""
    return [Pick(int(p.doc), int(p.start), int(p.end), p.text, int(p.tokens),
                 None if self.scores is None else float(self.scores[t]), float(g), p.prefix)
            for t, (p, g) in enumerate(zip(self.passages, self.gains))]

  def ordered(self, order: str = "selection", *, previous=None) -> list:
    """The picked passages in `order` (see `ORDERS`):

    * ``"selection"`` or ``"pick"``: pick order (what the method valued first);
    * ``"document"``: source order (document, then offset), for reading;
    * ``"relevance"``: most relevant to the queries first (pick order without queries);
    * ``"edges"``: the most relevant at both ends and the least in the middle (relevance
      ranks 1, 3, 5, ... then ..., 6, 4, 2), for readers that lose the middle of a long
      context.

    `previous`: what an earlier request sent (its `SelectionResult`, or the texts it sent as
    `Passage.sent_text`, in order): the pieces of it picked again come first, in its order and
    byte for byte, so a follow-up's prompt starts as the earlier one did (an LLM server's prefix
    cache reuses it); the new pieces follow in `order`."""
    checks.choice(order, "order", ORDERS)
    ps = list(self.passages)
    if order == "document" or self.unit == "word":
      ps.sort(key=lambda p: (p.doc, p.start))
    elif order in ("relevance", "edges") and self.scores is not None:
      rank = np.argsort(-np.asarray(self.scores, np.float64), kind="stable")
      ps = [ps[i] for i in rank]
    if order == "edges":
      ps = ps[0::2] + ps[1::2][::-1]
    if previous is None:
      return ps
    sent = [p.sent_text for p in previous.passages] if isinstance(previous, SelectionResult) \
        else [p.sent_text if hasattr(p, "sent_text") else p for p in previous]
    place = {t: i for i, t in reversed(list(enumerate(sent)))}
    kept = sorted((p for p in ps if p.sent_text in place), key=lambda p: place[p.sent_text])
    return kept + [p for p in ps if p.sent_text not in place]

  def context(self, *, order: str = "selection", numbered: bool = True, previous=None) -> str:
    """The picked passages joined into one context, in `order` (`ordered`: ``"selection"``,
    ``"document"``, ``"relevance"``, ``"edges"``; `previous` keeps an earlier request's pieces
    first)."""
    ps = self.ordered(order, previous=previous)
    if self.unit == "word":
      return self._words(ps)
    return join_context([p.sent_text for p in ps], numbered=numbered)

  def _words(self, ps: list) -> str:
    """Picked words in reading order: neighbours in a document keep the text between them,
    a gap is marked with an ellipsis."""
    out = []
    for prev, p in zip([None] + ps[:-1], ps):
      if prev is None:
        out.append(p.text)
      elif (self.documents is not None and prev.doc == p.doc
            and not self.documents[p.doc][prev.end:p.start].strip()):
        out.append(self.documents[p.doc][prev.end:p.start] + p.text)
      else:
        out.append(" … " + p.text)
    return "".join(out)

  def prompt(self, template: Optional[str] = None, *, order: str = "selection",
             numbered: bool = True, previous=None) -> str:
    """The prompt for an LLM: `template` with `{context}` and `{query}` filled in.

    The default template asks to answer the query (queries joined by newlines) from the
    context; without queries it is the context alone.
    """
    if template is None:
      template = DEFAULT_TEMPLATE if self.queries else TEXT_TEMPLATE
    if "{context}" not in template:
      raise ValueError("`template` must contain '{context}' (and usually '{query}').")
    return fill_template(template, self.queries,
                         self.context(order=order, numbered=numbered, previous=previous))

  def to_dict(self) -> dict:
    """A JSON-serialisable summary (the `jaxsel select --json` schema)."""
    picks = []
    for rank, (p, i, g, v) in enumerate(zip(self.passages, self.indices, self.gains, self.curve)):
      picks.append({
          "rank": rank + 1, "candidate": int(i), "text": p.text, "doc": p.doc,
          "source": p.source, "start": p.start, "end": p.end, "tokens": p.tokens,
          "score": None if self.scores is None else float(self.scores[rank]),
          "gain": float(g), "value": float(v)})
      if self.granularity == "sentence":  # what is sent before `text` (its passage's title)
        picks[-1]["prefix"] = p.prefix
    out = {"method": self.method, "queries": list(self.queries), "budget": self.budget,
           "cost": int(self.cost), "num_candidates": len(self.candidates),
           "saturation": self.saturation, "bound": self.bound, "certified": self.certified,
           "exhausted": self.exhausted, "searched": self.searched, "estimate": self.estimate,
           "selected": picks}
    if self.granularity == "sentence":  # the schema of a passage selection stays as it was
      out["granularity"] = self.granularity
    return out

  def table(self, *, width: int = 100) -> str:
    """A human-readable table of the picks."""
    head = f"{'#':>3}  {'tokens':>6}  {'score':>6}  {'gain':>8}  {'value':>8}  passage"
    lines = [head, "-" * min(width, len(head) + 40)]
    room = max(20, width - len(head) + len("passage"))
    for rank, p in enumerate(self.passages):
      snippet = " ".join(p.sent_text.split())
      if len(snippet) > room:
        snippet = snippet[:room - 1] + "\u2026"
      score = "-" if self.scores is None else f"{self.scores[rank]:.3f}"
      lines.append(f"{rank + 1:>3}  {p.tokens:>6}  {score:>6}  {self.gains[rank]:>8.3f}  "
                   f"{self.curve[rank]:>8.3f}  {snippet}")
    budget = "none" if self.budget is None else f"{self.budget:g}"
    lines.append(f"{len(self.passages)} of {len(self.candidates)} candidates, {self.cost} tokens "
                 f"(budget {budget}), method {self.method}, saturation after {self.saturation} picks")
    if self.certificate:
      lines.append(self.certificate)
    return "\n".join(lines)

  def plot(self, path=None, *, ax=None):
    """Plots the saturation curve (objective value and marginal gain per pick); saves a PNG to
    `path` when given. Returns the matplotlib figure."""
    # matplotlib (a second or more to import) is loaded by the first plot, not by `select`.
    plt = checks.optional_module("matplotlib.pyplot", feature="`SelectionResult.plot`", extra="plot")
    Figure = checks.optional_module("matplotlib.figure", feature="`SelectionResult.plot`",
                             extra="plot").Figure
    if ax is not None:
      fig = ax.figure
    elif path is not None:  # no pyplot figure: nothing left open in pyplot's state
      fig = Figure(figsize=(6, 3.5))
      ax = fig.subplots()
    else:
      fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(1, len(self.curve) + 1)
    tokens = np.cumsum([p.tokens for p in self.passages])
    ax.plot(x, self.curve, "o-", label="objective value f(S)")
    ax.bar(x, self.gains, alpha=0.35, label="marginal gain")
    if len(x) and self.saturation < len(x):
      ax.axvline(self.saturation + 0.5, color="grey", ls="--", label="saturation")
    ax.set_xlabel("picks (cumulative tokens: " + ", ".join(map(str, tokens[:8]))
                  + (", …" if len(tokens) > 8 else "") + ")")
    ax.set_ylabel("value")
    ax.set_title(f"{self.method}: saturation curve")
    ax.legend(loc="center right")
    fig.tight_layout()
    if path is not None:
      fig.savefig(path, dpi=120)
    return fig


@dataclasses.dataclass
class Answer:
  """What `Pipeline.answer` returns: the generated answer and how it was made."""
  text: str  # the generator's answer (stripped)
  selection: SelectionResult  # the context, as `select` returns it
  prompt: str  # what the generator was given
  generator: str  # the generator's name
  timings: dict  # seconds: {"select": ..., "generate": ...}

  def __str__(self) -> str:
    return self.text
