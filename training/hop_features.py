"""Whole paragraphs as `Passage`s, titled or not, with the arrays the CORAG scorers read.

Shape legend: N candidate paragraphs of a question, D embedding dimension.

The form a framework adapter produces: each paragraph of a question is one `jaxsel.Passage`,
costed in the encoder's word pieces, either *titled* (text `"title: paragraph"`,
`Passage.title` set) or *untitled* (the bare paragraph, no title anywhere). For each question:
the Pipeline's query `[D]` and passage `[N, D]` embeddings and the bridge text signals
(`methods.text_signals`).

Embeddings are computed through a `CachedEncoder` (one `.npz` per set and form under
`--cache`, shared with the Pipeline runs of `python -m training forms`), so later runs read them:

    python -m training features --sets hotpot_test,hotpot_dev_train,musique,2wiki
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import NamedTuple, Optional, Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import jaxsel  # noqa: E402
from jaxsel.contrib import registry as methods  # noqa: E402
from training import qa, qa_sets  # noqa: E402
from training.embedding_cache import CachedEncoder  # noqa: E402
from training.qa import QAExample  # noqa: E402

FORMS = ("titled", "untitled")
CACHE = os.path.join(ROOT, "out", "hops")
ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


def paragraph_passages(example: QAExample, form: str, tokenizer) -> list:
  """One `jaxsel.Passage` per paragraph: `"title: paragraph"` with `title` set (`"titled"`),
  or the bare paragraph without a title (`"untitled"`); costs in `tokenizer`'s word pieces."""
  if form not in FORMS:
    raise ValueError(f"Unknown form {form!r}; use one of {', '.join(FORMS)}.")
  titled = form == "titled"
  texts = example.texts() if titled else list(example.passages)
  costs = jaxsel.token_costs(texts, tokenizer)
  return [jaxsel.Passage(t, 0, len(t), doc=i, tokens=int(c),
                         title=(example.titles[i] or None) if titled else None)
          for i, (t, c) in enumerate(zip(texts, costs))]


class Features(NamedTuple):
  """One question in one form (see the module docstring)."""
  example: QAExample
  passages: list  # [N] Passage
  query: np.ndarray  # [D]
  emb: np.ndarray  # [N, D]
  signals: object  # jaxsel.contrib.registry.text_signals(...)
  gold: np.ndarray  # [N] bool

  @property
  def costs(self) -> np.ndarray:
    return np.asarray([p.tokens for p in self.passages], np.float32)


def encoder_for(name: str, form: str, *, cache: str = CACHE, base=None) -> CachedEncoder:
  base = base if base is not None else jaxsel.load_encoder(ENCODER)
  return CachedEncoder(base, os.path.join(cache, f"emb_{qa_sets.cache_tag(name)}_{form}.npz"))


def features(examples: Sequence[QAExample], form: str, enc, *, progress: bool = False) -> list:
  """`Features` of every question (one encoder pass over the texts not cached yet)."""
  items = [(ex, paragraph_passages(ex, form, enc.tokenizer)) for ex in examples]
  texts = [p.text for _, ps in items for p in ps]
  qs = [ex.question for ex, _ in items]
  enc.encode(texts, prompt_name="passage", progress=progress)
  enc.encode(qs, prompt_name="query")
  if hasattr(enc, "save"):
    enc.save()
  out = []
  for ex, ps in items:
    e = enc.encode([p.text for p in ps], prompt_name="passage")
    q = enc.encode([ex.question], prompt_name="query")[0]
    sig = methods.text_signals([p.text for p in ps], [p.doc for p in ps], [p.title for p in ps],
                               [ex.question])
    out.append(Features(ex, ps, q, e, sig, np.asarray(ex.gold, bool)))
  return out


def load(name: str, form: str, *, cache: str = CACHE, base=None, limit: Optional[int] = None,
         progress: bool = False) -> list:
  """`Features` of question set `name` (`qa_sets.SETS`, or `"hotpot_hard"`) in `form`."""
  examples = load_examples(name, limit=limit)
  enc = encoder_for(name, form, cache=cache, base=base)
  return features(examples, form, enc, progress=progress)


HARD = os.path.join("train", "hotpotqa_hard", "train.jsonl")
LABELS = {**qa_sets.LABELS, "hotpot_hard": "HotpotQA hard (train)"}


def label(name: str) -> str:
  """The set's name in tables (`LABELS`; a file set's file name)."""
  return LABELS.get(name) or qa_sets.label(name)


def load_examples(name: str, *, limit: Optional[int] = None) -> list:
  """The examples of `name`: a `qa_sets` set (or a JSONL file's path), or `"hotpot_hard"` (992
  hard HotpotQA training questions of `train/hotpotqa_hard`, training only)."""
  if name == "hotpot_hard":
    return qa.load_qa_jsonl(os.path.join(qa_sets.DATA_ROOT, HARD), limit=limit)
  return qa_sets.load_set(name, limit=limit)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sets", default="hotpot_test,hotpot_dev_train,hotpot_train,musique,2wiki")
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--limit", type=int, default=None)
  p.add_argument("--cache", default=CACHE)
  args = p.parse_args(argv)
  base = jaxsel.load_encoder(ENCODER)
  for name in args.sets.split(","):
    for form in args.forms.split(","):
      t0 = time.time()
      f = load(name, form, cache=args.cache, base=base, limit=args.limit, progress=True)
      print(f"{name} {form}: {len(f)} questions in {time.time() - t0:.0f}s", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
