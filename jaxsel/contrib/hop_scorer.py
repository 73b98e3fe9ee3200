"""The learned second-hop CORAG scorer's parts (registry name ``"learned_hops"``), for code
that trains or sweeps it (`python -m training train-hops`, `python -m training forms`).

    from jaxsel.contrib import hop_scorer
    params = hop_scorer.load_hop_params()             # the shipped weights, SHA-256 checked
    pipe = jaxsel.Pipeline(enc, method="corag",
                           corag_scorer=hop_scorer.learned_hops_builder(params))

Shape legend: N candidate chunks, F features.
"""

from jaxsel._src.methods import learned_hops_builder
from jaxsel._src.scorers.hops import (PAIR_FEATURES, UNARY_FEATURES, WEIGHTS, hop_probabilities,
                                      init_params, load_hop_params, mlp, pair_features,
                                      reformulated_relevance, save_hop_params, unary_features)

__all__ = [
    "PAIR_FEATURES",
    "UNARY_FEATURES",
    "WEIGHTS",
    "hop_probabilities",
    "init_params",
    "learned_hops_builder",
    "load_hop_params",
    "mlp",
    "pair_features",
    "reformulated_relevance",
    "save_hop_params",
    "unary_features",
]
