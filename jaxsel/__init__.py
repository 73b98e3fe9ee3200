"""jaxsel: which passages go into an LLM's context window, and in what order.

Shape legend used throughout: B batch, Q queries, N candidates, K picks, D embedding
dimension, L tokens.

The public API is this module's `__all__`; the implementation lives in `jaxsel._src`
(see docs/architecture.md). Two submodules stand beside it: `jaxsel.testing` (tiny random
models for tests) and `jaxsel.contrib` (research helpers with a lower bar: the configuration
agent's training, answer metrics, baselines, the registry's internals).

Each public name is imported on first use (PEP 562 `__getattr__`), so `import jaxsel` costs
next to nothing and a program pays only for what it touches: the encoders' transformers and
Flax stay unloaded until used. `_PUBLIC` lists each name once, under the module that defines
it; `__all__` and the lookup are made from it.
"""

import importlib as _importlib
import warnings as _warnings

__version__ = "0.2.0"

# Module -> the public names it defines. The one list of the public API.
_PUBLIC = {
    # contracts and results
    "jaxsel._src.base": ("Encoder", "Generator", "NO_ITEM", "Objective", "Scorer",
                         "SearchResult", "Selection"),
    # objectives and greedy
    "jaxsel._src.numerics": ("cosine_similarity",),
    "jaxsel._src.objectives.dense": ("coverage", "facility_location", "saturated_coverage"),
    "jaxsel._src.objectives.matrix_free": ("facility_location_from_embeddings",
                                           "saturated_coverage_from_embeddings"),
    "jaxsel._src.objectives.knn": ("KnnGraph", "knn_facility_location", "knn_graph",
                                   "knn_saturated_coverage"),
    "jaxsel._src.greedy": ("greedy", "saturation_point"),
    # CORAG search and its scorers
    "jaxsel._src.search": ("corag_search",),
    "jaxsel._src.scorers.base": ("weighted_sum",),
    "jaxsel._src.scorers.basic": ("link_scorer", "objective_scorer", "pairwise_scorer",
                                  "relevance_scorer", "title_links"),
    "jaxsel._src.scorers.model": ("cross_encoder_scorer", "embedding_scorer"),
    # several devices
    "jaxsel._src.sharding": ("candidate_sharded_greedy", "shard_batch", "sharded_greedy",
                             "sharded_search", "sharded_vmap"),
    # encoders
    "jaxsel._src.encoders.config": ("EncoderConfig",),
    "jaxsel._src.encoders.sentence": ("SentenceEncoder", "TokenEmbeddings", "load_encoder"),
    "jaxsel._src.encoders.cross": ("CrossEncoder", "load_cross_encoder"),
    # documents, index, pipeline
    "jaxsel._src.tokens": ("TokenCounter", "token_counter"),
    "jaxsel._src.text": ("Passage", "split_documents", "split_text", "token_costs"),
    "jaxsel._src.index": ("SearchHits", "VectorIndex"),
    "jaxsel._src.pipeline.config": ("PipelineConfig",),
    "jaxsel._src.pipeline.selection": ("Pipeline",),
    "jaxsel._src.methods": ("available_methods", "available_scorers", "default_method"),
    "jaxsel._src.pipeline.result": ("Answer", "Pick", "SelectionResult"),
    # the answer step
    "jaxsel._src.generation": ("EndpointError", "OpenAIGenerator", "TransformersGenerator",
                               "load_generator"),
    # the configuration agent (experimental; its training is in `jaxsel.contrib`)
    "jaxsel._src.agent.params": ("load_agent",),
}

__all__ = [name for names in _PUBLIC.values() for name in names]

_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}

# Submodules reached as attributes (`jaxsel.testing.tiny_encoder()` after `import jaxsel`).
# `files` is deprecated (it warns on use); `defaults` names the offline default models in the
# standard library only (the `jaxsel` command reads it before it loads JAX).
_SUBMODULES = ("contrib", "testing", "files", "defaults")

# Deprecated in 0.2, removed in 0.3: old public name -> where it lives now. Each still works
# and warns with a `DeprecationWarning` that names the new place.
_MOVED = {
    **dict.fromkeys(("AgentConfig", "AgentDataset", "ConfigAgent", "Configurator", "SearchChoice",
                     "TrainConfig", "make_dataset", "save_agent", "split_dataset", "train_agent",
                     "answer_scores", "exhaustive_search", "mmr", "naive_rag", "nonnegative",
                     "Request", "registry", "hop_scorer"), "jaxsel.contrib"),
}


def __getattr__(name: str):
  module = _WHERE.get(name)
  if module is not None:
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups do not come back here
    return value
  if name in _SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")  # the import binds jaxsel.<name>
  new = _MOVED.get(name)
  if new is not None:  # not cached: every use warns
    _warnings.warn(f"`jaxsel.{name}` moved to `{new}.{name}` (research helpers, a lower bar); "
                   f"the old name will be removed in jaxsel 0.3.", DeprecationWarning,
                   stacklevel=2)
    return getattr(_importlib.import_module(new), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
  return sorted(set(__all__) | {n for n in globals() if not n.startswith("_")})
