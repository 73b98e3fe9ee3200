"""jaxsel: which passages go into an LLM's context window, and in what order.

Shape legend used throughout: B batch, Q queries, N candidates, K picks, D embedding
dimension, L tokens.

The public API is this module's `__all__`; the implementation lives in `jaxsel._src`
(see docs/architecture.md). `jaxsel.testing` holds tiny random models.

Each public name is imported on first use (PEP 562 `__getattr__`), so `import jaxsel` costs
next to nothing and a program pays only for what it touches: the encoders' transformers and
Flax, the answer metrics' rouge-score and NLTK, the agent's Orbax stay unloaded until used.
`_LAZY` maps each public name to its module; the `TYPE_CHECKING` imports list the same names
for type checkers and IDEs (`tests/test_layout.py` checks that the two agree).
"""

import importlib as _importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from jaxsel._src.base import (NO_ITEM, Configurator, Encoder, Generator, Objective, Scorer,
                                SearchResult, Selection)
  from jaxsel._src.numerics import cosine_similarity, nonnegative
  from jaxsel._src.objectives.dense import coverage, facility_location, saturated_coverage
  from jaxsel._src.objectives.matrix_free import (facility_location_from_embeddings,
                                                  saturated_coverage_from_embeddings)
  from jaxsel._src.objectives.knn import (KnnGraph, knn_facility_location, knn_graph,
                                          knn_saturated_coverage)
  from jaxsel._src.greedy import greedy, saturation_point
  from jaxsel._src.scorers.base import weighted_sum
  from jaxsel._src.scorers.basic import (link_scorer, objective_scorer, pairwise_scorer,
                                         relevance_scorer, title_links)
  from jaxsel._src.scorers.model import cross_encoder_scorer, embedding_scorer
  from jaxsel._src.search import corag_search
  from jaxsel._src.baselines import exhaustive_search, mmr, naive_rag
  from jaxsel._src.sharding import (candidate_sharded_greedy, shard_batch, sharded_greedy,
                                    sharded_search, sharded_vmap)
  from jaxsel._src.encoders.config import EncoderConfig
  from jaxsel._src.encoders.sentence import SentenceEncoder, TokenEmbeddings, load_encoder
  from jaxsel._src.encoders.cross import CrossEncoder, load_cross_encoder
  from jaxsel._src.tokens import TokenCounter, token_counter
  from jaxsel._src.text import Passage, split_documents, split_text, token_costs
  from jaxsel._src.index import SearchHits, VectorIndex
  from jaxsel._src.methods import Request
  from jaxsel._src.pipeline.config import PipelineConfig
  from jaxsel._src.pipeline.selection import (Pipeline, available_methods, available_scorers,
                                              default_method)
  from jaxsel._src.pipeline.result import Answer, SelectionResult
  from jaxsel._src.generation import (EndpointError, OpenAIGenerator,
                                      TransformersGenerator, load_generator)
  from jaxsel._src.answer_metrics import answer_scores
  from jaxsel._src.agent.config import AgentConfig, SearchChoice
  from jaxsel._src.agent.model import ConfigAgent
  from jaxsel._src.agent.params import load_agent, save_agent
  from jaxsel._src.agent.train import (AgentDataset, TrainConfig, make_dataset, split_dataset,
                                       train_agent)
  from jaxsel import files, hop_scorer, registry, testing

__version__ = "0.2.0"

__all__ = [
    # contracts and results
    "Configurator",
    "Encoder",
    "NO_ITEM",
    "Objective",
    "Scorer",
    "SearchResult",
    "Selection",
    # objectives and greedy
    "cosine_similarity",
    "coverage",
    "facility_location",
    "facility_location_from_embeddings",
    "greedy",
    "KnnGraph",
    "knn_facility_location",
    "knn_graph",
    "knn_saturated_coverage",
    "nonnegative",
    "saturated_coverage",
    "saturated_coverage_from_embeddings",
    "saturation_point",
    # search, scorers, baselines
    "corag_search",
    "cross_encoder_scorer",
    "embedding_scorer",
    "exhaustive_search",
    "link_scorer",
    "mmr",
    "naive_rag",
    "objective_scorer",
    "pairwise_scorer",
    "relevance_scorer",
    "title_links",
    "weighted_sum",
    # several devices
    "candidate_sharded_greedy",
    "shard_batch",
    "sharded_greedy",
    "sharded_search",
    "sharded_vmap",
    # encoders
    "CrossEncoder",
    "EncoderConfig",
    "SentenceEncoder",
    "TokenEmbeddings",
    "load_cross_encoder",
    "load_encoder",
    # documents, index, pipeline
    "Passage",
    "Pipeline",
    "PipelineConfig",
    "Request",
    "SearchHits",
    "SelectionResult",
    "VectorIndex",
    "available_methods",
    "available_scorers",
    "default_method",
    "split_documents",
    "split_text",
    "token_costs",
    "token_counter",
    "TokenCounter",
    # the answer step
    "Answer",
    "EndpointError",
    "Generator",
    "OpenAIGenerator",
    "TransformersGenerator",
    "answer_scores",
    "load_generator",
    # configuration agent
    "AgentConfig",
    "AgentDataset",
    "ConfigAgent",
    "SearchChoice",
    "TrainConfig",
    "load_agent",
    "make_dataset",
    "save_agent",
    "split_dataset",
    "train_agent",
    "testing",
    # for scripts that build requests themselves (`training/`); `files` is deprecated
    "files",
    "hop_scorer",
    "registry",
]


# Public name -> the module that defines it (`__getattr__` imports it on first use). Type
# checkers read the `TYPE_CHECKING` imports above, which list the same names (a test checks).
_LAZY = {
    "NO_ITEM": "jaxsel._src.base",
    "Configurator": "jaxsel._src.base",
    "Encoder": "jaxsel._src.base",
    "Generator": "jaxsel._src.base",
    "Objective": "jaxsel._src.base",
    "Scorer": "jaxsel._src.base",
    "SearchResult": "jaxsel._src.base",
    "Selection": "jaxsel._src.base",
    "cosine_similarity": "jaxsel._src.numerics",
    "nonnegative": "jaxsel._src.numerics",
    "coverage": "jaxsel._src.objectives.dense",
    "facility_location": "jaxsel._src.objectives.dense",
    "saturated_coverage": "jaxsel._src.objectives.dense",
    "facility_location_from_embeddings": "jaxsel._src.objectives.matrix_free",
    "saturated_coverage_from_embeddings": "jaxsel._src.objectives.matrix_free",
    "KnnGraph": "jaxsel._src.objectives.knn",
    "knn_facility_location": "jaxsel._src.objectives.knn",
    "knn_graph": "jaxsel._src.objectives.knn",
    "knn_saturated_coverage": "jaxsel._src.objectives.knn",
    "greedy": "jaxsel._src.greedy",
    "saturation_point": "jaxsel._src.greedy",
    "weighted_sum": "jaxsel._src.scorers.base",
    "link_scorer": "jaxsel._src.scorers.basic",
    "objective_scorer": "jaxsel._src.scorers.basic",
    "pairwise_scorer": "jaxsel._src.scorers.basic",
    "relevance_scorer": "jaxsel._src.scorers.basic",
    "title_links": "jaxsel._src.scorers.basic",
    "cross_encoder_scorer": "jaxsel._src.scorers.model",
    "embedding_scorer": "jaxsel._src.scorers.model",
    "corag_search": "jaxsel._src.search",
    "exhaustive_search": "jaxsel._src.baselines",
    "mmr": "jaxsel._src.baselines",
    "naive_rag": "jaxsel._src.baselines",
    "candidate_sharded_greedy": "jaxsel._src.sharding",
    "shard_batch": "jaxsel._src.sharding",
    "sharded_greedy": "jaxsel._src.sharding",
    "sharded_search": "jaxsel._src.sharding",
    "sharded_vmap": "jaxsel._src.sharding",
    "EncoderConfig": "jaxsel._src.encoders.config",
    "SentenceEncoder": "jaxsel._src.encoders.sentence",
    "TokenEmbeddings": "jaxsel._src.encoders.sentence",
    "load_encoder": "jaxsel._src.encoders.sentence",
    "CrossEncoder": "jaxsel._src.encoders.cross",
    "load_cross_encoder": "jaxsel._src.encoders.cross",
    "TokenCounter": "jaxsel._src.tokens",
    "token_counter": "jaxsel._src.tokens",
    "Passage": "jaxsel._src.text",
    "split_documents": "jaxsel._src.text",
    "split_text": "jaxsel._src.text",
    "token_costs": "jaxsel._src.text",
    "SearchHits": "jaxsel._src.index",
    "VectorIndex": "jaxsel._src.index",
    "Request": "jaxsel._src.methods",
    "PipelineConfig": "jaxsel._src.pipeline.config",
    "Pipeline": "jaxsel._src.pipeline.selection",
    "available_methods": "jaxsel._src.pipeline.selection",
    "available_scorers": "jaxsel._src.pipeline.selection",
    "default_method": "jaxsel._src.pipeline.selection",
    "Answer": "jaxsel._src.pipeline.result",
    "SelectionResult": "jaxsel._src.pipeline.result",
    "EndpointError": "jaxsel._src.generation",
    "OpenAIGenerator": "jaxsel._src.generation",
    "TransformersGenerator": "jaxsel._src.generation",
    "load_generator": "jaxsel._src.generation",
    "answer_scores": "jaxsel._src.answer_metrics",
    "AgentConfig": "jaxsel._src.agent.config",
    "SearchChoice": "jaxsel._src.agent.config",
    "ConfigAgent": "jaxsel._src.agent.model",
    "load_agent": "jaxsel._src.agent.params",
    "save_agent": "jaxsel._src.agent.params",
    "AgentDataset": "jaxsel._src.agent.train",
    "TrainConfig": "jaxsel._src.agent.train",
    "make_dataset": "jaxsel._src.agent.train",
    "split_dataset": "jaxsel._src.agent.train",
    "train_agent": "jaxsel._src.agent.train",
    "files": "jaxsel",
    "hop_scorer": "jaxsel",
    "registry": "jaxsel",
    "testing": "jaxsel",
}


def __getattr__(name: str):
  module = _LAZY.get(name)
  if module is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  if module == __name__:  # a submodule (`jaxsel.testing`)
    value = _importlib.import_module(f"{__name__}.{name}")
  else:
    value = getattr(_importlib.import_module(module), name)
  globals()[name] = value  # later lookups do not come back here
  return value


def __dir__() -> list:
  return sorted(set(__all__) | {n for n in globals() if n != "TYPE_CHECKING"})
