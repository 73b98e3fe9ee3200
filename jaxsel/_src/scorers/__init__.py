"""Scorers of ordered chunk combinations for the CORAG search and the baselines: `base`
(arithmetic and helpers), `basic` (objective, relevance, pairwise, link scorers), `model`
(encoder and cross-encoder scorers over assembled tokens)."""
