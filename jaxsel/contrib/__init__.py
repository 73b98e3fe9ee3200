"""Research helpers: a lower bar than `jaxsel`'s own names, as optax's `contrib`.

What the project's research scripts (`training/`, `bench/`) and evaluations use, and what a
user who studies the methods may want, but that selecting a context does not need:

* the configuration agent (experimental: it ties the fixed default on held-out multi-hop QA,
  `training/RESULTS.md`) and its training: `ConfigAgent`, `AgentConfig`, `SearchChoice`, the
  `Configurator` protocol, `make_dataset`, `split_dataset`, `train_agent`, `TrainConfig`,
  `AgentDataset`, `save_agent`. Load a trained one with `jaxsel.load_agent` and pass it as
  `jaxsel.Pipeline(..., agent=...)`;
* answer metrics for evaluation: `answer_scores` (HotpotQA EM/F1, ROUGE; `jaxsel[eval]`);
* the baselines CORAG is measured against: `naive_rag`, `mmr`, `exhaustive_search` (the
  Pipeline reaches the first two as `method="naive"` / `"mmr"`);
* `nonnegative` (what `jaxsel.cosine_similarity(..., nonneg=...)` applies);
* `registry` (the methods, objectives and scorers by name, and the arrays of a request,
  `Request`, for code that builds them itself) and `hop_scorer` (the learned second-hop
  scorer's parts, for training it).

Names here may change between minor releases. Each is imported on first use.
"""

import importlib as _importlib

# Module -> the names it defines here. The one list of `jaxsel.contrib`.
_PUBLIC = {
    "jaxsel._src.base": ("Configurator",),
    "jaxsel._src.agent.config": ("AgentConfig", "SearchChoice"),
    "jaxsel._src.agent.model": ("ConfigAgent",),
    "jaxsel._src.agent.params": ("save_agent",),
    "jaxsel._src.agent.train": ("AgentDataset", "TrainConfig", "make_dataset", "split_dataset",
                                "train_agent"),
    "jaxsel._src.answer_metrics": ("answer_scores",),
    "jaxsel._src.baselines": ("exhaustive_search", "mmr", "naive_rag"),
    "jaxsel._src.numerics": ("nonnegative",),
    "jaxsel._src.methods": ("Request",),
}

_SUBMODULES = ("registry", "hop_scorer")

__all__ = [name for names in _PUBLIC.values() for name in names] + list(_SUBMODULES)

_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str):
  if name in _SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")
  module = _WHERE.get(name)
  if module is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  value = getattr(_importlib.import_module(module), name)
  globals()[name] = value
  return value


def __dir__() -> list:
  return sorted(set(__all__) | {n for n in globals() if not n.startswith("_")})
