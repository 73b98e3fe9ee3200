"""Second-hop scorers: the value of a chunk once an earlier pick has been read.

Shape legend: N candidate chunks, F features, H hidden units.

Multi-hop dense retrieval (Xiong et al. 2021) finds the second passage of a chain with the
question reformulated by the first one. With unit embeddings and no extra encoder call, the
query moved towards chunk i, `q + e_i`, has cosine `(r_j + s_ij) / sqrt(2 + 2 r_i)` with chunk j
(`reformulated_relevance`, from the request's relevance `r` and similarity `s`): no titles or
capitalised names needed.

Both scorers value an ordered combination `o` as an expected count of useful chunks:

  `V(o) = Σ_t u(o_t) + Σ_{t≥1} max(0, max_{s<t} g(o_s, o_t) − u(o_t))`

each chunk counts by its own value `u` or, when higher, by its value given the best earlier
pick `g`, so the search looks for a first pick that makes a second one likely.

* `hop_scorer` (registry `"hops"`): `u` = relevance, `g` = the reformulated relevance.
* `learned_hop_scorer` (registry `"learned_hops"`): `u` = P(chunk j is needed) and `g` =
  P(chunk j is needed | chunk i was read), two small MLPs over per-request features
  (`unary_features`, `pair_features`: relevances, their ranks and gaps to the best, the
  reformulated relevance, similarity, the text signals of `jaxsel._src.bridge` including the
  lexical overlaps that need no titles or capitals, costs), trained
  with optax on multi-hop QA with and without titles (`training/train_hops.py`). The shipped
  weights are `jaxsel/data/hop_scorer.safetensors`, checked against their SHA-256 when loaded
  (`load_hop_params`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load, save

from jaxsel._src.io import atomic_write, file_sha256
from jaxsel._src.scorers.basic import link_scorer, relevance_scorer

Array = jax.Array

# Features are only ever appended: a model trained with the first F of them reads those
# (`mlp`), so weights trained before the lexical features (`bridge.lexical_signals`) still load.
UNARY_FEATURES = ("relevance", "relevance_gap", "relevance_rank", "best_second_hop",
                  "best_second_hop_gap", "mentioned", "cost",
                  "overlap", "overlap_gap", "overlap_rank")
PAIR_FEATURES = ("relevance_i", "relevance_j", "relevance_gap_j", "second_hop",
                 "second_hop_lift", "second_hop_row_gap", "second_hop_rank", "second_hop_ji",
                 "similarity", "link", "entities",
                 "overlap_i", "overlap_j", "covered", "covered_lift", "shared", "shared_rank")
COST_SCALE = 256.0  # costs are given to the model in units of 256 tokens
RANK_SCALE = 10.0  # ranks in units of 10 candidates
# Ranks are clipped at 9: the training sets have 10 candidates per question, and a rank beyond
# them (MuSiQue's 20 paragraphs, split documents) made the model rank its 11th-best chunk above
# the best one (recall@2 of the unary model on held-out MuSiQue 0.24, relevance alone 0.47).
RANK_CLIP = 9.0

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "data")
WEIGHTS = os.path.join(DATA, "hop_scorer.safetensors")
# SHA-256 of the shipped weights: a changed or truncated file is refused, not used.
WEIGHTS_SHA256 = "651ae8fa6b637e452352b5948c465b05c31140174c43b55e1639e05eee1613a5"


def _value_scorer(unary, pair, valid):
  """`Σ_t u(o_t) + Σ_t max(0, max_{s<t} pair[o_s, o_t] − u(o_t))` (see the module docstring)."""
  v = valid.astype(jnp.float32)
  u = jnp.where(valid, unary, 0.0)
  lift = jnp.maximum(pair - u[None, :], 0.0) * v[:, None] * v[None, :]
  return relevance_scorer(u) + link_scorer(lift)


def hop_scorer(relevance, similarity, *, weight: float = 1.0, valid=None):
  """The untrained second-hop scorer: `u` = `relevance` `[N]`, `g` = `weight ·
  reformulated_relevance` (from `relevance` and `similarity` `[N, N]`; see the module
  docstring)."""
  relevance = jnp.asarray(relevance, jnp.float32)
  valid = jnp.ones(relevance.shape, bool) if valid is None else jnp.asarray(valid, bool)
  r2 = reformulated_relevance(relevance, jnp.asarray(similarity, jnp.float32), valid)
  return _value_scorer(relevance, weight * r2, valid)


# ----------------------------------------------------------------------------- features


def reformulated_relevance(relevance, similarity, valid) -> Array:
  """`[N, N]` the relevance of chunk j to the query moved towards chunk i, with no encoder call:
  `cos(q + e_i, e_j) = (r_j + s_ij) / sqrt(2 + 2 r_i)` for unit embeddings (relevance `r`
  `[N]` and similarity `s` `[N, N]` as the request has them, clipped at 0); zero on the
  diagonal and on invalid rows and columns."""
  n = relevance.shape[-1]
  r2 = (relevance[None, :] + similarity) / jnp.sqrt(2.0 + 2.0 * relevance[:, None])
  keep = valid[:, None] & valid[None, :] & ~jnp.eye(n, dtype=bool)
  return jnp.where(keep, r2, 0.0)


def _rank_along_rows(x: Array, valid: Array) -> Array:
  """`[N, N]` how many valid entries of row i are strictly larger than entry j (0 = best),
  at most `RANK_CLIP`."""
  xs = jnp.where(valid, x, -jnp.inf)
  rank = jnp.sum(xs[..., None, :] > xs[..., :, None], axis=-1).astype(jnp.float32)
  return jnp.minimum(rank, RANK_CLIP)


def _on_valid(x, valid) -> Array:
  """`[N]` x on valid candidates and 0 elsewhere; all 0 where x is None (a signal not given)."""
  return jnp.where(valid, jnp.zeros(valid.shape, jnp.float32) if x is None else x, 0.0)


def _gap_and_rank(x: Array, valid: Array) -> tuple:
  """(x − its best valid value, its rank among the valid candidates / RANK_SCALE) of `[N]` x."""
  top = jnp.max(jnp.where(valid, x, -jnp.inf))
  return x - top, _rank_along_rows(x[None, :], valid[None, :])[0] / RANK_SCALE


def unary_features(relevance, similarity, mentioned, costs, valid, *, overlap=None) -> Array:
  """`[N, len(UNARY_FEATURES)]` float32 features of each candidate (zero rows on invalid ones);
  `overlap` `[N]` (`bridge.lexical_signals`; default zeros)."""
  v = valid.astype(jnp.float32)
  ov = _on_valid(overlap, valid)
  rel = _on_valid(relevance, valid)
  r2 = reformulated_relevance(rel, similarity, valid)
  best2 = jnp.max(r2, axis=0)
  f = jnp.stack([rel, *_gap_and_rank(rel, valid), best2, best2 - rel, mentioned,
                 costs / COST_SCALE, ov, *_gap_and_rank(ov, valid)], axis=-1)
  return f * v[:, None]


def pair_features(relevance, similarity, links, entities, valid, *, overlap=None, covered=None,
                  shared=None) -> Array:
  """`[N, N, len(PAIR_FEATURES)]` float32 features of each ordered pair (i earlier, j later);
  `overlap` `[N]`, `covered` and `shared` `[N, N]` from `bridge.lexical_signals` (default zeros)."""
  n = relevance.shape[-1]
  zeros = jnp.zeros((n, n), jnp.float32)
  ov = _on_valid(overlap, valid)
  cov = zeros if covered is None else covered
  sh = zeros if shared is None else shared
  v = valid.astype(jnp.float32)
  row_valid = valid[None, :] & valid[:, None] & ~jnp.eye(n, dtype=bool)
  rel = _on_valid(relevance, valid)
  top = jnp.max(jnp.where(valid, rel, -jnp.inf))
  r2 = reformulated_relevance(rel, similarity, valid)
  row_top = jnp.max(jnp.where(row_valid, r2, -jnp.inf), axis=1, keepdims=True)
  row_top = jnp.where(jnp.isfinite(row_top), row_top, 0.0)
  rank = _rank_along_rows(r2, row_valid)
  full = lambda x: jnp.broadcast_to(x, (n, n))  # noqa: E731
  f = jnp.stack([full(rel[:, None]), full(rel[None, :]), full((rel - top)[None, :]), r2,
                 r2 - rel[None, :], r2 - row_top, rank / RANK_SCALE, r2.T, similarity, links,
                 jnp.minimum(entities / 2.0, 1.0),
                 full(ov[:, None]), full(ov[None, :]), cov, cov - ov[:, None], sh,
                 _rank_along_rows(sh, row_valid) / RANK_SCALE], axis=-1)
  return f * (v[:, None] * v[None, :])[..., None]


# ----------------------------------------------------------------------------- the model


def mlp(params: Mapping[str, Array], prefix: str, x: Array) -> Array:
  """`[..., F'] -> [...]` logits of the first F features (F = the size of `{prefix}.mean`,
  F' ≥ F): `(x − mean) / scale`, then dense layers `{prefix}.w{k}`, `{prefix}.b{k}` with GELU
  between them."""
  mean = params[f"{prefix}.mean"]
  h = (x[..., :mean.shape[-1]] - mean) / params[f"{prefix}.scale"]
  k = 0
  while f"{prefix}.w{k + 1}" in params:
    h = jax.nn.gelu(h @ params[f"{prefix}.w{k}"] + params[f"{prefix}.b{k}"])
    k += 1
  return (h @ params[f"{prefix}.w{k}"] + params[f"{prefix}.b{k}"])[..., 0]


def init_params(key, *, hidden: int = 32, layers: int = 2, unary_stats=None, pair_stats=None,
                unary_features: int = len(UNARY_FEATURES),
                pair_features: int = len(PAIR_FEATURES)) -> dict:
  """Random MLP weights for `learned_hop_scorer` (`layers` hidden layers of `hidden` units)
  reading the first `unary_features` / `pair_features` features; `*_stats` = (mean `[F]`,
  scale `[F]`) of the training features (default 0 and 1)."""
  params = {}
  for prefix, nf, stats in (("unary", unary_features, unary_stats),
                            ("pair", pair_features, pair_stats)):
    mean, scale = stats if stats is not None else (np.zeros(nf), np.ones(nf))
    params[f"{prefix}.mean"] = jnp.asarray(mean, jnp.float32)
    params[f"{prefix}.scale"] = jnp.asarray(scale, jnp.float32)
    sizes = [nf] + [hidden] * layers + [1]
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
      key, sub = jax.random.split(key)
      params[f"{prefix}.w{k}"] = jax.random.normal(sub, (a, b), jnp.float32) * np.sqrt(1.0 / a)
      params[f"{prefix}.b{k}"] = jnp.zeros((b,), jnp.float32)
  return params


def hop_probabilities(params, *, relevance, similarity, links, entities, mentioned, costs, valid,
                      overlap=None, covered=None, shared=None):
  """(`u` `[N]`, `g` `[N, N]`): P(chunk j is needed) and P(j is needed | i was read)."""
  uf = unary_features(relevance, similarity, mentioned, costs, valid, overlap=overlap)
  pf = pair_features(relevance, similarity, links, entities, valid, overlap=overlap,
                     covered=covered, shared=shared)
  return jax.nn.sigmoid(mlp(params, "unary", uf)), jax.nn.sigmoid(mlp(params, "pair", pf))


def learned_hop_scorer(params, *, relevance, similarity, links, entities, mentioned, costs, valid,
                       overlap=None, covered=None, shared=None):
  """The learned second-hop scorer of a request (see the module docstring)."""
  u, g = hop_probabilities(params, relevance=relevance, similarity=similarity, links=links,
                           entities=entities, mentioned=mentioned, costs=costs, valid=valid,
                           overlap=overlap, covered=covered, shared=shared)
  return _value_scorer(u, g, valid)


# ----------------------------------------------------------------------------- weights


@functools.lru_cache(maxsize=4)
def load_hop_params(path: Optional[str] = None, sha256: Optional[str] = None) -> dict:
  """The learned scorer's weights from a safetensors file (default: the shipped ones, checked
  against `WEIGHTS_SHA256`; another file is checked against `sha256` when given), as read-only
  NumPy float32 arrays: cached, so the first call may come from inside a `jit` trace (the
  Pipeline's solve), where JAX arrays made here would be that trace's tracers and leak."""
  if path is None:
    path, sha256 = WEIGHTS, WEIGHTS_SHA256
  fix = ("reinstall jaxsel (pip install --force-reinstall jaxsel) or train them with "
         "training/train_hops.py")
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:  # missing, a folder, no permission, a failing disk (EIO)
    why = ("there is no such file" if isinstance(e, FileNotFoundError) else
           "it is a folder" if isinstance(e, IsADirectoryError) else e.strerror or str(e))
    raise ValueError(f"Cannot read the learned hop-scorer weights at {path}: {why}; {fix}.") from None
  if sha256 is not None:
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
      raise ValueError(f"The weights at {path} have SHA-256 {got}, expected {sha256}: the file is "
                       "damaged or not the one this jaxsel was released with; reinstall jaxsel.")
  try:
    tensors = load(data)
  except Exception as e:  # safetensors' own error types
    raise ValueError(f"The learned hop-scorer weights at {path} are not a safetensors file "
                     f"({e}); {fix}.") from None
  params = {k: np.array(v, np.float32) for k, v in tensors.items()}
  for v in params.values():
    v.setflags(write=False)
  return params


def save_hop_params(path: str, params: Mapping, metadata: Optional[dict] = None) -> str:
  """Writes `params` as safetensors (atomically); returns the file's SHA-256. `metadata` (the
  training recipe) is stored as one JSON string under `"recipe"`: safetensors writes several
  metadata keys in a random order, so the same weights would not give the same file."""
  meta = {"recipe": json.dumps(metadata, sort_keys=True)} if metadata else None
  data = save({k: np.asarray(v, np.float32) for k, v in params.items()}, metadata=meta)
  atomic_write(path, data)
  return file_sha256(path)
