"""The registry of selection methods, objectives and CORAG scorers, by name: what
`jaxsel.Pipeline(method=..., corag_scorer=...)` resolves, for code that builds a request's
arrays itself (the research scripts in `training/`, a sweep over scorer weights).

    from jaxsel.contrib import registry
    req = registry.request(query_emb, passage_emb, costs=costs)   # [Q, D], [N, D], [N]
    sc = registry.scorer("bridge", req)                           # a CORAG scorer
    jaxsel.corag_search(sc, costs, budget=256.0)

A request as the Pipeline builds it, text signals included (what label sweeps must score):
`pipeline_request(row)` of one padded `Inputs` from `pad_batch`.

Shape legend: Q queries, N candidates, D embedding dimension.
"""

from jaxsel._src.methods import (BRIDGE_WEIGHTS, METHODS, OBJECTIVES, SCORERS, USES_TEXT_SIGNALS,
                                 Request, TextSignals, best_relevance, objective, request, scorer,
                                 signals_of, text_signals)
from jaxsel._src.pipeline.solve import Inputs, pad_batch
from jaxsel._src.pipeline.solve import request as pipeline_request

__all__ = [
    "BRIDGE_WEIGHTS",
    "Inputs",
    "METHODS",
    "OBJECTIVES",
    "SCORERS",
    "USES_TEXT_SIGNALS",
    "Request",
    "TextSignals",
    "best_relevance",
    "objective",
    "pad_batch",
    "pipeline_request",
    "request",
    "scorer",
    "signals_of",
    "text_signals",
]
