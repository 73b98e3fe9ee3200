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
]
