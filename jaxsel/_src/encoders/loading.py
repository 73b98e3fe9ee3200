"""Strict loading of Hugging Face checkpoints into the nnx encoder modules.

* `resolve_checkpoint(name_or_path)` -> a local folder: an existing folder as is (works
  offline); otherwise a hub id fetched with `huggingface_hub.snapshot_download`.
* `read_state_dict(folder)` -> `{key: array}` from `model.safetensors` (sharded too, via
  `model.safetensors.index.json`) or, only when no safetensors exist, `pytorch_model.bin`
  read with `torch.load(weights_only=True)`.
* `load_into(abstract, state_dict, prefix)` fills every parameter of a model built
  abstractly (`rngs=bert.ShapeOnly()`, or `nnx.eval_shape`) from its checkpoint key. A parameter without a key, a key that
  maps to no parameter, or a wrong shape raises with the key's name. Only buffers
  (`*.position_ids`, `*.token_type_ids`) and pre-training heads (`cls.*`, `lm_head.*`),
  which no inference path uses, are skipped.

The nnx attribute names mirror PyTorch's, so the key of parameter path
`encoder.layer.0.attention.self.query.kernel` is `encoder.layer.0.attention.self.query.weight`
(transposed); `embedding` and `scale` leaves are `weight` as well.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import huggingface_hub
import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx
from safetensors import safe_open

from jaxsel.defaults import DEFAULT_ENCODER, default_encoder_path

_HUB_PATTERNS = ["*.json", "*.txt", "*.model", "model*.safetensors", "1_Pooling/*",
                 "sentencepiece*", "tokenizer*"]
_SKIPPED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")
_SKIPPED_PREFIXES = ("cls.predictions.", "cls.seq_relationship.", "lm_head.")
_LEAF_TO_KEY = {"kernel": "weight", "embedding": "weight", "scale": "weight", "bias": "bias"}
BACKBONE_PREFIXES = ("", "bert.", "roberta.", "xlm_roberta.", "model.")


class CheckpointError(ValueError):
  """A checkpoint that does not match the model: missing, unmapped or misshaped keys."""


def resolve_checkpoint(name_or_path: str | os.PathLike) -> Path:
  """An existing local folder, or a hub id downloaded (or found in the hub cache)."""
  if name_or_path is None:
    raise TypeError("`name_or_path` is None; pass a checkpoint folder or a Hugging Face hub id.")
  if not isinstance(name_or_path, (str, os.PathLike)):
    raise TypeError(f"`name_or_path` must be a folder path or hub id string, got "
                    f"{type(name_or_path).__name__}.")
  path = Path(os.fspath(name_or_path)).expanduser()
  if path.is_dir():
    return path
  if path.exists():
    raise ValueError(f"`{name_or_path}` is a file; pass the checkpoint *folder* that holds "
                     "config.json and the weights.")
  name = os.fspath(name_or_path)
  if name.startswith((".", "/", "~")) or name.count("/") > 1:
    raise FileNotFoundError(f"No checkpoint folder at `{name}`.")
  try:
    folder = huggingface_hub.snapshot_download(name, allow_patterns=_HUB_PATTERNS)
    folder = Path(folder)
    if not any(folder.glob("*.safetensors")):  # PyTorch-only repositories
      folder = Path(huggingface_hub.snapshot_download(
          name, allow_patterns=_HUB_PATTERNS + ["pytorch_model*.bin"]))
    return folder
  except Exception as e:  # offline, unknown repo, gated repo, ...
    raise FileNotFoundError(
        f"`{name}` is neither a local folder nor a downloadable Hugging Face hub id "
        f"({type(e).__name__}: {e}). Offline, pass the path of a folder with config.json, "
        "the tokenizer files and model.safetensors.") from None


def _load_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
  out = {}
  for f in files:
    with safe_open(os.fspath(f), framework="numpy") as fh:
      for k in fh.keys():
        try:
          out[k] = fh.get_tensor(k)
        except (TypeError, ValueError):  # bfloat16 has no NumPy dtype: read via JAX
          with safe_open(os.fspath(f), framework="flax") as fj:
            out[k] = np.asarray(fj.get_tensor(k).astype(jnp.float32))
  return out


def _load_torch(files: list[Path]) -> dict[str, np.ndarray]:
  import torch
  out = {}
  for f in files:
    sd = torch.load(os.fspath(f), map_location="cpu", weights_only=True)
    for k, v in sd.items():
      out[k] = v.float().numpy() if v.is_floating_point() else v.numpy()
  return out


def _shards(folder: Path, index_name: str) -> list[Path]:
  index = json.loads((folder / index_name).read_text())
  names = sorted(set(index["weight_map"].values()))
  missing = [n for n in names if not (folder / n).is_file()]
  if missing:
    raise FileNotFoundError(f"{folder / index_name} lists shard(s) {missing} that are not in the folder.")
  return [folder / n for n in names]


def read_state_dict(folder: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a checkpoint folder as NumPy arrays, keyed by their PyTorch names."""
  folder = Path(folder)
  if (folder / "model.safetensors").is_file():
    return _load_safetensors([folder / "model.safetensors"])
  if (folder / "model.safetensors.index.json").is_file():
    return _load_safetensors(_shards(folder, "model.safetensors.index.json"))
  if (folder / "pytorch_model.bin").is_file():
    return _load_torch([folder / "pytorch_model.bin"])
  if (folder / "pytorch_model.bin.index.json").is_file():
    return _load_torch(_shards(folder, "pytorch_model.bin.index.json"))
  present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
  raise FileNotFoundError(
      f"No weights in {folder}: expected model.safetensors, model.safetensors.index.json "
      f"(+ shards) or pytorch_model.bin; found {present}.")


def normalise_keys(state_dict: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Old BERT checkpoints name LayerNorm parameters `gamma`/`beta`."""
  out = {}
  for k, v in state_dict.items():
    if k.endswith(".gamma"):
      k = k[:-len(".gamma")] + ".weight"
    elif k.endswith(".beta"):
      k = k[:-len(".beta")] + ".bias"
    out[k] = v
  return out


def backbone_prefix(keys, prefixes=BACKBONE_PREFIXES) -> str:
  """The prefix (`""`, `"bert."`, `"roberta."`, ...) under which the backbone's keys live."""
  for p in prefixes:
    if p + "embeddings.word_embeddings.weight" in keys:
      return p
  raise CheckpointError("No `embeddings.word_embeddings.weight` key (with any of the prefixes "
                        f"{list(prefixes)}); this is not a BERT-family checkpoint.")


def param_key(path: tuple) -> tuple[str, bool]:
  """(checkpoint key, transpose?) for an nnx parameter path."""
  leaf = str(path[-1])
  if leaf not in _LEAF_TO_KEY:
    raise CheckpointError(f"Parameter {'.'.join(map(str, path))} has no checkpoint mapping.")
  key = ".".join(str(p) for p in path[:-1]) + "." + _LEAF_TO_KEY[leaf]
  return key, leaf == "kernel"


def _skipped(key: str) -> bool:
  return key.endswith(_SKIPPED_SUFFIXES) or key.startswith(_SKIPPED_PREFIXES)


def load_into(abstract: nnx.Module, state_dict: Mapping[str, np.ndarray], *,
              prefix: str = "", dtype=jnp.float32) -> nnx.Module:
  """The model `abstract` (its parameters shapes only: built with `rngs=bert.ShapeOnly()`
  or by `nnx.eval_shape`) filled from `state_dict`, strictly.

  A model parameter at path `p` reads key `prefix + key(p)` (the prefix of a backbone
  saved inside a larger model, e.g. `"bert."`).
  Every checkpoint key must be used, except buffers and pre-training heads.
  """
  graphdef, state = nnx.split(abstract)
  used, filled, missing, bad_shape = set(), [], [], []
  for path, var in nnx.to_flat_state(state):
    key, transpose = param_key(path)
    key = prefix + key
    if key not in state_dict:
      missing.append(key)
      continue
    arr = np.asarray(state_dict[key])
    if transpose:
      arr = arr.T
    if arr.shape != tuple(var.shape):
      bad_shape.append(f"{key}: checkpoint {tuple(arr.shape)}{' (transposed)' if transpose else ''}"
                       f" vs model {tuple(var.shape)}")
      continue
    used.add(key)
    # (device_put of a NumPy array: half the time of jnp.asarray over 100 parameters)
    filled.append((path, var.replace(jax.device_put(np.asarray(arr, dtype=dtype)))))
  unmapped = sorted(k for k in state_dict if k not in used and not _skipped(k))
  problems = []
  if missing:
    problems.append(f"missing key(s) {missing}")
  if bad_shape:
    problems.append(f"wrongly shaped key(s) {bad_shape}")
  if unmapped:
    problems.append(f"unmapped key(s) {unmapped}")
  if problems:
    raise CheckpointError("Checkpoint does not match the model: " + "; ".join(problems) +
                          ". Check that config.json belongs to these weights and that the "
                          "loader matches the architecture (encoder vs cross-encoder).")
  return nnx.merge(graphdef, nnx.from_flat_state(filled))


# ----------------------------------------------------------------------------- the offline default
# (DEFAULT_ENCODER and default_encoder_path live in `defaults`, which the command reads early.)

def checkpoint_folder(name_or_path, dtype) -> Path:
  """Checks `dtype` and resolves `name_or_path` to a folder with a config.json."""
  if dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
    raise ValueError(f"`dtype` must be jnp.float32, jnp.bfloat16 or jnp.float16, got {dtype!r}.")
  folder = resolve(name_or_path)
  if not (folder / "config.json").is_file():
    raise FileNotFoundError(f"{folder} has no config.json; it is not a Hugging Face checkpoint folder.")
  return folder


def resolve(name_or_path) -> Path:
  """`resolve_checkpoint`, plus the offline copy of the default encoder for its hub id."""
  if (isinstance(name_or_path, str) and name_or_path in (DEFAULT_ENCODER, "all-MiniLM-L6-v2")
      and not Path(name_or_path).is_dir() and default_encoder_path() is not None):
    return default_encoder_path()
  return resolve_checkpoint(name_or_path)
