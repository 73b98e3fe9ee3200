"""Saving and loading a configuration agent's parameters (as gemma's `params.py` does).

A trained agent is saved as a directory holding `config.json` and `params.safetensors`
(`save_agent` / `load_agent`); `config.json` records the SHA-256 of `params.safetensors`, so a
modified or damaged weights file is an error that names it, and loading is strict and names every
missing, unexpected or mis-shaped weight.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import load as st_load, save as st_save

from jaxsel._src.agent.config import AgentConfig
from jaxsel._src.agent.model import ConfigAgent, new_agent
from jaxsel._src.io import atomic_write

AGENT_FORMAT = "jaxsel-config-agent/2"  # /2: config.json holds `params_sha256`
_UNCHECKED_FORMAT = "jaxsel-config-agent/1"  # loaded with a warning: no checksum to verify
CONFIG_FILE = "config.json"
PARAMS_FILE = "params.safetensors"


def agent_params(agent: ConfigAgent) -> dict:
  """The agent's parameters as a plain nested dict of arrays."""
  return nnx.to_pure_dict(nnx.state(agent, nnx.Param))


def _flatten(tree: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in tree.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = np.asarray(v)
  return out


def set_agent_params(agent: ConfigAgent, params: dict, *, source: str = "params") -> None:
  """Loads a plain nested dict into `agent`, strictly: every weight must be present with
  the model's shape, and no extra weight may appear."""
  want = _flatten(agent_params(agent))
  got = _flatten(params)
  missing = sorted(set(want) - set(got))
  extra = sorted(set(got) - set(want))
  if missing or extra:
    raise ValueError(f"{source} does not match the agent's config: missing weights {missing}, "
                     f"unexpected weights {extra}.")
  for k in want:
    if got[k].shape != want[k].shape:
      raise ValueError(f"{source}: weight `{k}` has shape {got[k].shape}, the agent's config "
                       f"expects {want[k].shape} (was it trained with another in_dim, hidden or scorers?).")
    if not np.isfinite(got[k]).all():
      raise ValueError(f"{source}: weight `{k}` contains NaN or infinite values.")
  state = nnx.state(agent, nnx.Param)
  nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, params))
  nnx.update(agent, state)


def save_agent(agent: ConfigAgent, path: str, *, metadata: Optional[dict] = None) -> str:
  """Writes `path/params.safetensors`, then `path/config.json` with the weights' SHA-256
  (each atomically; the config is written last, so it never vouches for weights not on disk)."""
  if not isinstance(agent, ConfigAgent):
    raise TypeError(f"`agent` must be a ConfigAgent, got {type(agent).__name__}.")
  os.makedirs(path, exist_ok=True)
  params = st_save(_flatten(agent_params(agent)), metadata={"format": AGENT_FORMAT})
  cfg = {"format": AGENT_FORMAT, "config": agent.config.to_dict(), "metadata": metadata or {},
         "params_sha256": hashlib.sha256(params).hexdigest()}
  atomic_write(os.path.join(path, PARAMS_FILE), params)
  atomic_write(os.path.join(path, CONFIG_FILE), json.dumps(cfg, indent=2).encode())
  return path


def _unflatten(flat: dict) -> dict:
  out: dict = {}
  for k, v in flat.items():
    node = out
    *head, last = k.split(".")
    for h in head:
      node = node.setdefault(h, {})
    node[last] = v
  return out


def load_agent(path: str) -> ConfigAgent:
  """Loads an agent saved by `save_agent` (a local directory).

  The weights must match the SHA-256 that `config.json` records (a `ValueError` names the
  file otherwise). An agent saved before checksums were recorded (format
  `jaxsel-config-agent/1`) still loads, with a warning that its weights are unverified;
  `save_agent` it again to add the checksum."""
  cfg_path, params_path = os.path.join(path, CONFIG_FILE), os.path.join(path, PARAMS_FILE)
  for p in (cfg_path, params_path):
    if not os.path.isfile(p):
      raise FileNotFoundError(f"{p} not found: `path` must be a directory written by "
                              "jaxsel.contrib.save_agent (config.json + params.safetensors).")
  try:
    with open(cfg_path) as f:
      cfg = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{cfg_path} is corrupt (not valid JSON): {e}") from None
  if not isinstance(cfg, dict) or cfg.get("format") not in (AGENT_FORMAT, _UNCHECKED_FORMAT):
    raise ValueError(f"{cfg_path} is not a jaxsel agent config (format "
                     f"{cfg.get('format') if isinstance(cfg, dict) else None!r}, expected {AGENT_FORMAT!r}).")
  config = AgentConfig.from_dict(cfg["config"])
  with open(params_path, "rb") as f:
    raw = f.read()
  _check_params_sha256(raw, cfg, params_path)
  try:
    flat = st_load(raw)
  except Exception as e:  # safetensors raises its own error types for truncated files
    raise ValueError(f"{params_path} is corrupt or truncated: {e}") from None
  agent = new_agent(config)
  set_agent_params(agent, _unflatten(flat), source=params_path)
  return agent


def _check_params_sha256(raw: bytes, cfg: dict, params_path: str) -> None:
  if cfg["format"] == _UNCHECKED_FORMAT:
    warnings.warn(f"{params_path} was saved without a checksum ({_UNCHECKED_FORMAT}), so damage to "
                  "it cannot be detected; save the agent again with jaxsel.contrib.save_agent to "
                  "add one.",
                  stacklevel=3)
    return
  want = cfg.get("params_sha256")
  if not isinstance(want, str):
    raise ValueError(f"{params_path} cannot be verified: its {CONFIG_FILE} lacks `params_sha256` "
                     f"(required by {AGENT_FORMAT}); save the agent again with "
                     "jaxsel.contrib.save_agent.")
  if hashlib.sha256(raw).hexdigest() != want:
    raise ValueError(f"{params_path} is corrupt or truncated: its SHA-256 does not match the one "
                     f"recorded in {CONFIG_FILE} (modified or damaged on disk); save or train the "
                     "agent again.")
