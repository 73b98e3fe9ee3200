"""Multi-hop QA examples and their per-question features for labelling and evaluation.

Shape legend: Q questions, N passages per question (padded to a common N with `valid`),
D embedding dimension.

Plain Python and NumPy, outside jit. A question's candidates are its passages, each embedded
and costed as `"title: paragraph"` (word-piece tokens of the encoder's tokenizer, without
special tokens). The features hold everything the scorers and baselines need as arrays, so
a whole split runs through one `jax.vmap`-ed search.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from jaxsel import token_costs
from jaxsel.contrib import registry
from training.files import atomic_savez


@dataclasses.dataclass(frozen=True)
class QAExample:
  """One question with its candidate passages and gold marks."""
  id: str
  question: str
  titles: tuple  # [N] passage titles ("" when unknown)
  passages: tuple  # [N] passage texts
  gold: tuple  # [N] bool: supporting passage
  answers: tuple  # answer strings (may be empty)

  def texts(self) -> list:
    """The candidate texts as embedded and costed: `"title: paragraph"`."""
    return [f"{t}: {p}" if t else p for t, p in zip(self.titles, self.passages)]


def _join_sentences(sentences) -> str:
  """A paragraph from HotpotQA-style sentences (most after the first start with a space)."""
  out = ""
  for s in sentences:
    if out and not s.startswith(" ") and not out.endswith(" "):
      out += " "
    out += s
  return out.strip()


def parse_example(obj: dict, line_no: int, path: str) -> QAExample:
  """One JSONL line `obj` (line `line_no` of `path`) as a `QAExample`; see `load_qa_jsonl`."""
  where = f"{path}:{line_no}"
  if "context" in obj and "supporting_facts" in obj:  # HotpotQA / 2WikiMultihopQA original format
    qid, question = str(obj.get("_id", line_no)), obj["question"]
    titles = [c[0] for c in obj["context"]]
    passages = [_join_sentences(c[1]) for c in obj["context"]]
    # Gold by title: a 2Wiki context may repeat a title, and every paragraph of it is gold.
    gold_titles = {t for t, _ in obj["supporting_facts"]}
    gold = [t in gold_titles for t in titles]
    answers = [obj["answer"]] if isinstance(obj.get("answer"), str) else list(obj.get("answer", []))
  elif "paragraphs" in obj and "question" in obj:  # MuSiQue
    qid, question = str(obj.get("id", line_no)), obj["question"]
    ps = obj["paragraphs"]
    titles = [p.get("title", "") for p in ps]
    passages = [p["paragraph_text"] for p in ps]
    gold = [bool(p.get("is_supporting", False)) for p in ps]
    answers = [obj.get("answer", "")] + list(obj.get("answer_aliases", []))
  elif "question_text" in obj and "contexts" in obj:  # IRCoT processed format (HotpotQA etc.)
    ctx = obj["contexts"]
    qid, question = str(obj.get("question_id", line_no)), obj["question_text"]
    titles = [c.get("title", "") for c in ctx]
    passages = [c["paragraph_text"] for c in ctx]
    gold = [bool(c.get("is_supporting", False)) for c in ctx]
    answers = [s for a in obj.get("answers_objects", []) for s in a.get("spans", [])]
  elif "question" in obj and "passages" in obj:  # generic: passages as dicts or strings
    qid, question = str(obj.get("id", line_no)), obj["question"]
    ps = obj["passages"]
    titles = [p.get("title", "") if isinstance(p, dict) else "" for p in ps]
    passages = [p.get("text", p.get("paragraph_text", "")) if isinstance(p, dict) else str(p) for p in ps]
    if "gold" in obj:
      gold_idx = set(int(i) for i in obj["gold"])
      gold = [i in gold_idx for i in range(len(ps))]
    else:
      gold = [bool(p.get("is_supporting", p.get("gold", False))) if isinstance(p, dict) else False
              for p in ps]
    ans = obj.get("answers", obj.get("answer", []))
    answers = [ans] if isinstance(ans, str) else list(ans)
  else:
    raise ValueError(f"{where}: expected `question_text` + `contexts` (IRCoT format), `question` + "
                     f"`context` + `supporting_facts` (HotpotQA, 2WikiMultihopQA), `question` + "
                     f"`paragraphs` (MuSiQue) or `question` + `passages`, got keys {sorted(obj)}.")
  if not isinstance(question, str) or not question.strip():
    raise ValueError(f"{where}: empty question.")
  if not passages:
    raise ValueError(f"{where}: question {qid!r} has no passages.")
  return QAExample(qid, question, tuple(titles), tuple(passages), tuple(gold),
                   tuple(str(a) for a in answers))


def load_qa_jsonl(path: str, *, limit: Optional[int] = None) -> list:
  """Reads QA examples from a JSONL file: IRCoT format, HotpotQA / 2WikiMultihopQA (`context`,
  `supporting_facts`), MuSiQue (`paragraphs`) or `question`/`passages`."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} not found.")
  out, seen = [], set()
  with open(path, encoding="utf-8") as f:
    for i, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        obj = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{i}: not valid JSON ({e}).") from None
      ex = parse_example(obj, i, path)
      if ex.id in seen:
        raise ValueError(f"{path}:{i}: duplicate question id {ex.id!r}.")
      seen.add(ex.id)
      out.append(ex)
      if limit is not None and len(out) >= limit:
        break
  return out


def split_by_id(examples: Sequence[QAExample], *, n_train: int, seed: int = 0):
  """Seeded split into `(train, held_out)` by a permutation of the sorted question ids, so the
  split depends on the ids only (not on file order)."""
  ids = sorted(e.id for e in examples)
  if not 0 <= n_train <= len(ids):
    raise ValueError(f"`n_train` must be between 0 and {len(ids)}, got {n_train}.")
  perm = np.random.default_rng(seed).permutation(len(ids))
  train_ids = {ids[i] for i in perm[:n_train]}
  return ([e for e in examples if e.id in train_ids], [e for e in examples if e.id not in train_ids])


def load_split(path: str, *, split: str, n_train: int, seed: int = 0,
               limit: Optional[int] = None) -> list:
  """Loads `path` and keeps the `"train"` or `"held_out"` part of `split_by_id` (`"all"`:
  everything), then the first `limit` questions. What the training scripts share."""
  examples = load_qa_jsonl(path)
  if split != "all":
    train, held = split_by_id(examples, n_train=min(n_train, len(examples)), seed=seed)
    examples = train if split == "train" else held
  return examples if limit is None else examples[:limit]


class QAFeatures(NamedTuple):
  """Per-question arrays, padded to N passages (`valid` marks real ones). `[Q]` leading axis
  for a batch of questions."""
  query: np.ndarray  # [D] query embedding
  passages: np.ndarray  # [N, D] passage embeddings
  costs: np.ndarray  # [N] float32 word-piece tokens of "title: paragraph"; 0 for padding
  links: np.ndarray  # [N, N] link[i, j] = 1 where passage i names passage j's lead entity
  mentioned: np.ndarray  # [N] 1 where the question names passage j's lead entity
  gold: np.ndarray  # [N] bool
  valid: np.ndarray  # [N] bool
  entities: np.ndarray  # [N, N] weighted capitalised phrases passages i and j share
  groups: np.ndarray  # [N] int32 group of each passage (its own index; padding: N + index)
  overlap: np.ndarray  # [N] share of the question's IDF weight in passage j's words
  covered: np.ndarray  # [N, N] the same share of passages i and j together
  shared: np.ndarray  # [N, N] IDF² cosine of the non-question words i and j share

  @property
  def relevance(self) -> np.ndarray:
    """`[..., N]` query-passage cosine (embeddings are L2-normalised)."""
    return np.einsum("...d,...nd->...n", self.query, self.passages)

  @property
  def similarity(self) -> np.ndarray:
    """`[..., N, N]` passage-passage cosine."""
    return np.einsum("...nd,...md->...nm", self.passages, self.passages)


def featurize(encoder, examples: Sequence[QAExample], *, n_max: Optional[int] = None,
              batch_size: int = 64, progress: bool = False) -> QAFeatures:
  """Embeds questions and passages with `encoder` (`jaxsel.load_encoder`) and stacks the
  features of all questions, padded to `n_max` passages (default the largest count).

  The text signals (`links`, `mentioned`, `entities`, `groups`, and the lexical `overlap`,
  `covered`, `shared`) are the Pipeline's
  (`registry.text_signals`) for the `"title: paragraph"` texts given as one document each: the
  lead entity of a passage is its title, read from the text as the Pipeline reads it."""
  examples = list(examples)
  if not examples:
    raise ValueError("`examples` is empty.")
  counts = [len(e.passages) for e in examples]
  n = max(counts) if n_max is None else int(n_max)
  if max(counts) > n:
    raise ValueError(f"a question has {max(counts)} passages, more than `n_max`={n}.")
  texts = [t for e in examples for t in e.texts()]
  p_emb = np.asarray(encoder.encode(texts, batch_size=batch_size, prompt_name="passage", progress=progress))
  q_emb = np.asarray(encoder.encode([e.question for e in examples], batch_size=batch_size,
                                    prompt_name="query", progress=progress))
  costs = token_costs(texts, encoder.tokenizer).astype(np.float32)
  q, d = len(examples), p_emb.shape[1]
  out = QAFeatures(q_emb.astype(np.float32), np.zeros((q, n, d), np.float32), np.zeros((q, n), np.float32),
                   np.zeros((q, n, n), np.float32), np.zeros((q, n), np.float32),
                   np.zeros((q, n), bool), np.zeros((q, n), bool), np.zeros((q, n, n), np.float32),
                   np.tile(np.arange(n, 2 * n, dtype=np.int32), (q, 1)),
                   np.zeros((q, n), np.float32), np.zeros((q, n, n), np.float32),
                   np.zeros((q, n, n), np.float32))
  start = 0
  for i, e in enumerate(examples):
    m = len(e.passages)
    out.passages[i, :m] = p_emb[start:start + m]
    out.costs[i, :m] = costs[start:start + m]
    sig = registry.text_signals(e.texts(), list(range(m)), [None] * m, [e.question])
    out.links[i, :m, :m] = sig.links
    out.mentioned[i, :m] = sig.mentioned
    out.entities[i, :m, :m] = sig.entities
    out.groups[i, :m] = sig.groups
    out.overlap[i, :m] = sig.overlap
    out.covered[i, :m, :m] = sig.covered
    out.shared[i, :m, :m] = sig.shared
    out.gold[i, :m] = e.gold
    out.valid[i, :m] = True
    start += m
  return out


def request(f: QAFeatures) -> registry.Request:
  """One question's features as the Pipeline's own `Request` (`registry.pipeline_request`, the
  function the Pipeline's solve builds its requests with), text signals included, so a label
  sweep scores what the search sees. Works under `jit` / `vmap`."""
  xp = np if isinstance(f.query, np.ndarray) else jnp
  signals = registry.TextSignals(links=f.links, mentioned=f.mentioned, entities=f.entities,
                                 groups=f.groups, overlap=f.overlap, covered=f.covered,
                                 shared=f.shared)
  inputs = registry.Inputs(query=f.query[None], query_valid=xp.ones((1,), bool),
                           passages=f.passages, symmetric=f.passages, costs=f.costs,
                           valid=f.valid, signals=signals)
  return registry.pipeline_request(inputs)


def take(features: QAFeatures, idx) -> QAFeatures:
  """Rows `idx` of a batch of features."""
  idx = np.asarray(idx)
  return QAFeatures(*(a[idx] for a in features))


def save_features(path: str, features: QAFeatures, ids: Sequence[str], *, meta: Optional[dict] = None) -> None:
  """Saves features with their question ids to an `.npz` (atomically)."""
  atomic_savez(path, ids=np.asarray(list(ids)), meta=json.dumps(meta or {}), **features._asdict())


def load_features(path: str):
  """`(features, ids, meta)` saved by `save_features`."""
  with np.load(path, allow_pickle=False) as z:
    missing = [f for f in QAFeatures._fields if f not in z.files]
    if missing:
      raise ValueError(f"{path} lacks the features {missing} (saved by an older version); "
                       "delete it to embed again.")
    feats = QAFeatures(*(z[f] for f in QAFeatures._fields))
    return feats, [str(i) for i in z["ids"]], json.loads(str(z["meta"]))


class FeatureCache:
  """Question features kept in an `.npz` so that labelling and evaluation embed each question
  once; entries are keyed by question id and checked against the encoder name and N."""

  def __init__(self, path: str, *, encoder: str, n_max: int):
    self.path, self.encoder, self.n_max = path, encoder, n_max
    self.pos: dict = {}
    self.features: Optional[QAFeatures] = None
    if os.path.exists(path):
      try:
        feats, ids, meta = load_features(path)
      except ValueError:  # an older layout: embedded again and overwritten
        feats, ids, meta = None, [], {}
      if feats is not None and meta.get("encoder") == encoder and feats.costs.shape[1] == n_max:
        self.features, self.pos = feats, {q: i for i, q in enumerate(ids)}

  def ensure(self, encoder, examples: Sequence[QAExample]) -> None:
    """Embeds the examples not cached yet and saves the cache."""
    missing = [e for e in examples if e.id not in self.pos]
    if not missing:
      return
    new = featurize(encoder, missing, n_max=self.n_max)
    ids = sorted(self.pos, key=self.pos.get) + [e.id for e in missing]
    self.features = new if self.features is None else QAFeatures(
        *(np.concatenate([a, b]) for a, b in zip(self.features, new)))
    self.pos = {q: i for i, q in enumerate(ids)}
    save_features(self.path, self.features, ids, meta={"encoder": self.encoder})

  def get(self, examples: Sequence[QAExample]) -> Optional[QAFeatures]:
    if self.features is None or any(e.id not in self.pos for e in examples):
      return None
    return take(self.features, [self.pos[e.id] for e in examples])


class QATokens(NamedTuple):
  """Token ids of the passages and questions for model-based scorers (no special tokens).
  `[Q]` leading axis for a batch."""
  chunk_ids: np.ndarray  # [N, Lc] int32, padded with the tokenizer's pad id
  chunk_lens: np.ndarray  # [N] int32 real token counts (0 for padding)
  query_ids: np.ndarray  # [Lq] int32
  query_len: np.ndarray  # [] int32


def tokenize(tokenizer, examples: Sequence[QAExample], *, n_max: int, max_chunk_tokens: int = 128,
             max_query_tokens: int = 48) -> QATokens:
  """Token ids of every question's `"title: paragraph"` passages (truncated to
  `max_chunk_tokens`) and of the question (truncated to `max_query_tokens`)."""
  pad = tokenizer.pad_token_id or 0
  q = len(examples)
  ids = np.full((q, n_max, max_chunk_tokens), pad, np.int32)
  lens = np.zeros((q, n_max), np.int32)
  qids = np.full((q, max_query_tokens), pad, np.int32)
  qlen = np.zeros((q,), np.int32)
  for i, e in enumerate(examples):
    if len(e.passages) > n_max:
      raise ValueError(f"question {e.id!r} has {len(e.passages)} passages, more than n_max={n_max}.")
    for j, toks in enumerate(tokenizer(e.texts(), add_special_tokens=False)["input_ids"]):
      toks = toks[:max_chunk_tokens]
      ids[i, j, :len(toks)] = toks
      lens[i, j] = len(toks)
    toks = tokenizer(e.question, add_special_tokens=False)["input_ids"][:max_query_tokens]
    qids[i, :len(toks)] = toks
    qlen[i] = len(toks)
  return QATokens(ids, lens, qids, qlen)
