"""The contracts between jaxsel's layers, in one module (as optax's and mctx's `base.py`):
what an objective, a scorer, an encoder, a generator and a configurator must provide, the
optional kernel hooks of an objective, the results they produce, and the one sentinel for
"no item". It imports nothing of jaxsel, so every layer may import it.

Shape legend: N candidates, K picks, T positions of an order, D embedding dimension.

The Protocol classes are what the algorithms are written against: `greedy` calls only the
`Objective` members (and `KernelObjective`'s where an objective has them), the search only
calls a scorer, the Pipeline only the `Encoder`, `Generator` and `Configurator` members.
`tests/contracts/` runs the same assertions against every real class and every test double,
so a stand-in can no longer implement a different contract than the real thing.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, NamedTuple, Optional, Protocol, Sequence, runtime_checkable

import jax

Array = jax.Array

NO_ITEM = -1  # an empty slot: in a greedy `Selection`, a search order, a tree's parent/chunk

BACKENDS = ("auto", "native", "xla")


class Selection(NamedTuple):
  """Result of greedy selection. With a batch, every field has a leading `[B]` axis.

  `bound` is a certificate (`jaxsel.greedy` explains it): no set within `k` and the budget
  has a value above it, so the picks reach at least `certified` of the optimum.
  """
  indices: Array  # [K] int32 picks in order, NO_ITEM (-1) after the last
  gains: Array  # [K] marginal gain of each pick, 0 after the last
  values: Array  # [K] f after each pick (the saturation curve), flat after the last
  count: Array  # [] int32 number of picks
  cost: Array  # [] total cost of the picks (0 without costs)
  bound: Array  # [] upper bound on the optimum f(S*) (NaN: none, stochastic greedy)
  certified: Array  # [] f(picks) / bound in [0, 1] (1 where bound is 0; NaN: no bound)


class SearchResult(NamedTuple):
  """An ordered combination (from the search or a baseline); `[B]` leading axis under `vmap`."""
  order: Array  # [T] int32 chunks in reading order, NO_ITEM (-1) after the last
  length: Array  # [] int32 number of chunks
  value: Array  # [] float32 the scorer's value of `order`
  cost: Array  # [] float32 total cost of `order` (never above the budget)
  utility: Array  # [] float32 tree utility U of the answer node (baselines: `value`)
  tree: Any  # the search `Tree`; None for baselines
  nonfinite: Array  # [] bool the scorer gave NaN or ±inf for a value used: the order is unreliable


@runtime_checkable
class Objective(Protocol):
  """A monotone submodular set function with an incremental state, as `greedy` uses it.

  Every jaxsel objective is a frozen pytree (array fields are leaves), so it passes through
  `jit` and `vmap`; a batch is the same class with a leading axis on every leaf.

  Subclass it to write your own objective. Kernels are not part of this contract: an
  objective that has its own also implements `KernelObjective`, which `greedy` tests for.
  """

  valid: Array  # [N] bool: candidates that may be picked (and items that count)

  # Field name -> axis of that field that runs over candidates (None: replicated, item side).
  # `candidate_sharded_greedy` splits exactly these axes over the devices.
  candidate_axes: ClassVar[Mapping[str, Optional[int]]]

  @property
  def num_candidates(self) -> int:
    """N."""

  def init(self) -> Any:
    """The state of the empty set."""

  def gains(self, state: Any, idx: Optional[Array] = None) -> Array:
    """Marginal gains `f(S + j) - f(S)`: `[N]`, or `[M]` for the candidates `idx` `[M]`."""

  def update(self, state: Any, j: Array) -> Any:
    """The state after adding candidate `j`."""

  def state_value(self, state: Any) -> Array:
    """`f(S)` of a state, `[]`."""

  def value(self, selected: Array) -> Array:
    """`f` of any bool mask `[N]` (invalid candidates ignored), `[]`."""


@runtime_checkable
class KernelObjective(Protocol):
  """Optional, beside `Objective`: an objective with its own kernels (the dense and
  matrix-free objectives: the native CPU gains and fused greedy runs). `greedy` tests for it
  (`isinstance`) and otherwise runs its own loop on the `Objective` members alone."""

  def with_backend(self, backend: str) -> Objective:
    """The objective with its gain computations on `backend` (one of `BACKENDS`)."""

  def fused_greedy(self, costs: Optional[Array], budget: Optional[Array],
                   min_gain: Optional[Array], *, k: int, lazy: bool,
                   ratio: bool) -> Optional[Selection]:
    """A whole greedy run in one fused kernel, or None where there is none: `greedy` then
    runs its own loop over `gains` / `update`. Same rules and picks as that loop."""


def with_backend(objective: Objective, backend: str) -> Objective:
  """`objective` with its kernels on `backend` where it has any (`KernelObjective`), else
  `objective` itself."""
  return objective.with_backend(backend) if isinstance(objective, KernelObjective) else objective


@runtime_checkable
class Scorer(Protocol):
  """Any callable `scorer(order [T] int32, -1 padded) -> value []` scores ordered chunk
  combinations for the CORAG search and the baselines. A pytree scorer's array leaves are
  traced (per-query data under `vmap`); other leaves (a plain function, a closure) are static.

  Optional: `num_candidates` (N, checked against the costs) and `append_gains(order) -> [N]`
  (`scorer(order + [j]) - scorer(order)` for every j, or None), which lets the search score a
  node's N children in one O(T·N) call instead of N full calls.
  """

  def __call__(self, order: Array) -> Array:
    ...


@runtime_checkable
class Encoder(Protocol):
  """What the Pipeline needs of a text encoder (`jaxsel.load_encoder` returns one)."""

  tokenizer: Any  # a Hugging Face tokenizer: token costs and splitting use it
  prompts: Mapping[str, str]  # prompt name -> prefix text ("query", "passage", ...)

  @property
  def dim(self) -> int:
    """D, the embedding dimension."""

  def encode(self, texts: Sequence[str], *, prompt_name: Optional[str] = None,
             normalize: bool = True, batch_size: int = 32,
             progress: Optional[bool] = None) -> Array:
    """`[N, D]` embeddings of `texts`, each prefixed with `prompts[prompt_name]` (no prefix
    for None); L2-normalised when `normalize`."""


@runtime_checkable
class Generator(Protocol):
  """Prompts in, one answer each out.

  `name` says which model answers (for logs and result tables). `generate` returns
  `len(prompts)` strings in the order of `prompts`, each stripped of surrounding whitespace,
  using at most `max_new_tokens` new tokens per answer (jaxsel's generators default to
  `generation.DEFAULT_MAX_NEW_TOKENS`).
  """

  name: str

  def generate(self, prompts: Sequence[str], *, max_new_tokens: int) -> list[str]:
    ...


@runtime_checkable
class Configurator(Protocol):
  """What the Pipeline asks per CORAG request (`Pipeline(agent=...)`): given the request's
  features, which scorer and search settings. The trained `jaxsel.contrib.ConfigAgent` is one.

  `predict(features [D]) -> choice`, where `features` is the mean of the request's query
  embeddings and `choice` has `scorer` (a registry name), `iterations` (int), `exploration`
  and `cost_penalty` (floats), as `jaxsel.contrib.SearchChoice` does.
  """

  def predict(self, features: Array) -> Any:
    ...
