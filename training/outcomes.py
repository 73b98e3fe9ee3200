"""Features of a selection's *outcome*, for the selection-aware configuration agent
(`training/agent_menu.py`, issue 49 part 4): every menu entry runs on a request (each `select`
costs milliseconds once the candidates are embedded), and the agent reads what each entry
picked, not only the question.

Per request and menu entry, `OUTCOME_FEATURES` of its picks (`[doc, start, end, tokens]` over
the request's paragraphs), computed from the request alone (no label):

* the tokens used against the budget, the number of pieces and of paragraphs touched, the
  share of the touched paragraphs sent whole;
* how much of the question the context holds: the share of the question's IDF weight its
  words hold (`bridge.lexical_signals`' weighting over the request's paragraphs) and the share
  of the question's capitalised phrases (`bridge.entities`) it names;
* the touched paragraphs' cosine to the query (all-MiniLM-L6-v2 embeddings of the whole
  paragraphs): the best and the mean;
* chain: the share of the touched paragraphs whose lead entity the question names or that
  link to or from another touched paragraph (`bridge.bridge_signals`: a second hop the first
  one names);
* agreement: the mean Jaccard overlap of the entry's touched paragraphs with the other
  entries'.

Shape legend: Q questions, R requests per question, K menu entries, F features.
"""

from __future__ import annotations

import numpy as np

from jaxsel._src import bridge

OUTCOME_FEATURES = ("tokens / budget", "log pieces", "log paragraphs", "whole share",
                    "question words held", "question phrases named", "best cosine",
                    "mean cosine", "chain")
# and, over the menu entries a choice is among (`agreement`): the mean Jaccard overlap of the
# entry's touched paragraphs with the other entries'.


def _context(passages, picks) -> str:
  return "\n\n".join(passages[d].text[a:b] for d, a, b, _ in picks)


class Request:
  """What one request's outcome features read once: the question's weighted words and
  phrases, the paragraphs' links and their cosine to the query."""

  def __init__(self, question: str, passages, query: np.ndarray, emb: np.ndarray):
    texts = [p.text for p in passages]
    titles = [p.title for p in passages]
    sig = bridge.bridge_signals(question, texts, list(range(len(texts))), titles)
    self.passages = passages
    self.mentioned = sig.mentioned > 0
    self.linked = (sig.links + sig.links.T) > 0
    words = bridge.content_words(question)
    n = len(texts)
    held = [bridge.content_words(t) for t in texts]
    df = {w: sum(w in h for h in held) for w in words}
    self.idf = {w: float(np.log1p((n - d + 0.5) / (d + 0.5))) for w, d in df.items()}
    self.phrases = [e.lower() for e in bridge.entities(question)]
    q = query / (np.linalg.norm(query) + 1e-12)
    e = emb / (np.linalg.norm(emb, axis=1, keepdims=True) + 1e-12)
    self.cos = e @ q

  def features(self, picks, budget: float) -> np.ndarray:
    """`OUTCOME_FEATURES` `[F]` of `picks`."""
    docs = sorted({int(p[0]) for p in picks})
    whole = {int(d) for d, a, b, _ in picks if a == 0 and b == len(self.passages[d].text)}
    ctx = _context(self.passages, picks)
    held = bridge.content_words(ctx)
    total = sum(self.idf.values())
    words = sum(v for w, v in self.idf.items() if w in held) / total if total > 0 else 0.0
    low = ctx.lower()
    phrases = (np.mean([p in low for p in self.phrases]) if self.phrases else 1.0)
    cos = self.cos[docs] if docs else np.zeros(1)
    chain = (np.mean([self.mentioned[d] or any(self.linked[d, e] for e in docs if e != d)
                      for d in docs]) if docs else 0.0)
    return np.asarray([sum(p[3] for p in picks) / budget, np.log1p(len(picks)),
                       np.log1p(len(docs)), len(whole) / max(len(docs), 1), words, phrases,
                       cos.max(), cos.mean(), chain], np.float32)


def agreement(docs: np.ndarray) -> np.ndarray:
  """`[..., K]` -> `[..., K]`: each entry's mean Jaccard overlap of its touched paragraphs
  (`docs`, an object array of sets) with the other entries'."""
  flat = docs.reshape(-1, docs.shape[-1])
  out = np.ones(flat.shape, np.float32)
  k_n = flat.shape[1]
  if k_n > 1:
    for i, row in enumerate(flat):
      for k in range(k_n):
        out[i, k] = np.mean([len(row[k] & row[j]) / max(len(row[k] | row[j]), 1)
                             for j in range(k_n) if j != k])
  return out.reshape(docs.shape)
