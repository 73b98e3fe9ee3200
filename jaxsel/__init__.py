"""jaxsel: which passages go into an LLM's context window, and in what order.

Shape legend used throughout: B batch, Q queries, N candidates, K picks,
D embedding dimension, L tokens.
"""

from jaxsel.objectives import (
    CoverState,
    FacilityLocation,
    SaturatedCoverage,
    SaturationState,
    cosine_similarity,
    coverage,
    facility_location,
    nonnegative,
    saturated_coverage,
)
from jaxsel.greedy import UNSELECTED, Selection, greedy, saturation_point
from jaxsel.encoders import (
    CrossEncoder,
    EncoderConfig,
    SentenceEncoder,
    TokenEmbeddings,
    load_cross_encoder,
    load_encoder,
)
from jaxsel.scorers import (
    Scorer,
    cross_encoder_scorer,
    embedding_scorer,
    link_scorer,
    objective_scorer,
    pairwise_scorer,
    relevance_scorer,
    title_links,
    weighted_sum,
)
from jaxsel.search import SearchResult, Tree, corag_search
from jaxsel.baselines import exhaustive_search, mmr, naive_rag
from jaxsel.agent import AgentConfig, ConfigAgent, SearchChoice, load_agent, save_agent
from jaxsel.agent_training import TrainConfig, train_agent
from jaxsel.large import (
    EmbeddingFacilityLocation,
    EmbeddingSaturatedCoverage,
    KnnFacilityLocation,
    KnnGraph,
    KnnSaturatedCoverage,
    facility_location_from_embeddings,
    knn_facility_location,
    knn_graph,
    knn_saturated_coverage,
    saturated_coverage_from_embeddings,
)
from jaxsel.sharding import (
    candidate_sharded_greedy,
    shard_batch,
    sharded_greedy,
    sharded_search,
    sharded_vmap,
)
from jaxsel.text import Passage, split_documents, split_text, token_costs
from jaxsel.index import SearchHits, VectorIndex
from jaxsel.pipeline import Pipeline, SelectionResult, available_methods

__version__ = "0.1.0"

__all__ = [
    "CoverState",
    "FacilityLocation",
    "SaturatedCoverage",
    "SaturationState",
    "Selection",
    "UNSELECTED",
    "cosine_similarity",
    "coverage",
    "facility_location",
    "greedy",
    "nonnegative",
    "saturated_coverage",
    "saturation_point",
    "CrossEncoder",
    "EncoderConfig",
    "SentenceEncoder",
    "TokenEmbeddings",
    "load_cross_encoder",
    "load_encoder",
    "Scorer",
    "SearchResult",
    "Tree",
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
    "AgentConfig",
    "ConfigAgent",
    "SearchChoice",
    "TrainConfig",
    "load_agent",
    "save_agent",
    "train_agent",
    "EmbeddingFacilityLocation",
    "EmbeddingSaturatedCoverage",
    "KnnFacilityLocation",
    "KnnGraph",
    "KnnSaturatedCoverage",
    "candidate_sharded_greedy",
    "facility_location_from_embeddings",
    "knn_facility_location",
    "knn_graph",
    "knn_saturated_coverage",
    "saturated_coverage_from_embeddings",
    "shard_batch",
    "sharded_greedy",
    "sharded_search",
    "sharded_vmap",
    "Passage",
    "split_documents",
    "split_text",
    "token_costs",
    "SearchHits",
    "VectorIndex",
    "Pipeline",
    "SelectionResult",
    "available_methods",
]
