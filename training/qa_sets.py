"""The question sets of the evaluation, by name.

Each question's paragraphs become documents as a user would hand them to `jaxsel.Pipeline`:
one `"title: paragraph"` string per paragraph (`QAExample.texts()`); a paragraph is gold when
it supports the answer (HotpotQA and 2Wiki: its title is in `supporting_facts`, MuSiQue:
`is_supporting`).

| name | questions | source (under the data root) |
|---|---|---|
| `hotpot_test` | 200 | `hotpotqa/dev_subsampled.jsonl`, held out by `qa.split_by_id(n_train=300, seed=0)`; never used for tuning |
| `hotpot_dev_train` | 300 | the other 300 of that split (the agent's labelling questions) |
| `hotpot_train` | 100 | `train/hotpotqa/train.jsonl` (HotpotQA train, distractor setting) |
| `musique` | 150 | `train/musique/train.jsonl` (MuSiQue-Ans train, 20 paragraphs each) |
| `2wiki` | 500 | `train/2wikimultihopqa/train.jsonl` (2WikiMultihopQA train) |

A set may also be a path to a JSONL file in any format `qa.load_qa_jsonl` reads (HotpotQA /
2WikiMultihopQA with `context` and `supporting_facts`, MuSiQue, IRCoT, or `question` +
`passages`): a set kept outside the project runs through the same evaluation commands
(`python -m training forms --sets /data/other.jsonl`, `python -m training granularity
--sets ...`); its label is the file name, its caches are named after the file and its path.

`GROUPS` are the three datasets of the cross-dataset runs (a configuration is chosen on two
and tested on the third): HotpotQA (dev-train and train), MuSiQue, 2Wiki.
"""

from __future__ import annotations

import hashlib
import os
from typing import Optional

from training import qa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_ROOT = os.environ.get("JAXSEL_QA_DATA", os.path.join(ROOT, "..", "shared", "data"))

HOTPOT_DEV = os.path.join("hotpotqa", "dev_subsampled.jsonl")
FILES = {"hotpot_test": HOTPOT_DEV, "hotpot_dev_train": HOTPOT_DEV,
         "hotpot_train": os.path.join("train", "hotpotqa", "train.jsonl"),
         "musique": os.path.join("train", "musique", "train.jsonl"),
         "2wiki": os.path.join("train", "2wikimultihopqa", "train.jsonl")}
SETS = tuple(FILES)
LABELS = {"hotpot_test": "HotpotQA test", "hotpot_dev_train": "HotpotQA dev-train",
          "hotpot_train": "HotpotQA train", "musique": "MuSiQue", "2wiki": "2Wiki"}
GROUPS = {"HotpotQA": ("hotpot_dev_train", "hotpot_train"), "MuSiQue": ("musique",),
          "2Wiki": ("2wiki",)}
TEST = "hotpot_test"
# The seeded id split of HotpotQA dev that the agent's recipe and the evaluation share.
N_TRAIN, SPLIT_SEED = 300, 0


def is_file(name: str) -> bool:
  """Whether set `name` is a path to a JSONL file rather than one of `SETS`."""
  return name not in FILES and (name.endswith((".jsonl", ".json")) or os.sep in name)


def label(name: str) -> str:
  """The set's name in tables: `LABELS`, or a file set's file name without its extension."""
  if is_file(name):
    return os.path.splitext(os.path.basename(name))[0]
  return LABELS.get(name, name)


def cache_tag(name: str) -> str:
  """What a set's cache files are named after: its name, or for a file set its file name and
  a hash of its absolute path (two files of the same name do not share a cache)."""
  if not is_file(name):
    return name
  digest = hashlib.sha256(os.path.abspath(name).encode()).hexdigest()[:10]
  stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in label(name))
  return f"{stem}-{digest}"


def load_set(name: str, *, data_root: Optional[str] = None, limit: Optional[int] = None) -> list:
  """The `QAExample`s of set `name` (one of `SETS`, or a JSONL file's path: `is_file`), in
  file order; the first `limit`."""
  if is_file(name):
    return qa.load_qa_jsonl(name, limit=limit)
  if name not in FILES:
    raise ValueError(f"Unknown question set {name!r}; use one of {', '.join(SETS)}, or the path "
                     f"of a JSONL file (HotpotQA, 2WikiMultihopQA, MuSiQue or IRCoT format).")
  path = os.path.join(data_root or DATA_ROOT, FILES[name])
  if name in ("hotpot_test", "hotpot_dev_train"):
    split = "held_out" if name == "hotpot_test" else "train"
    return qa.load_split(path, split=split, n_train=N_TRAIN, seed=SPLIT_SEED, limit=limit)
  return qa.load_qa_jsonl(path, limit=limit)


def documents(example: qa.QAExample) -> list:
  """What a user passes to `Pipeline.select`: one `"title: paragraph"` per paragraph."""
  return example.texts()
