"""Random objective instances shared by the objective, greedy and kernel tests."""

import numpy as np

import jaxsel
import reference as ref


def _instance(n, q=2, d=8, seed=0, pad=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  sim = np.asarray(jaxsel.cosine_similarity(x))
  rel = rng.random((q, n)).astype(np.float32)
  valid = np.ones(n, bool)
  if pad:
    valid[rng.choice(n, size=min(pad, n), replace=False)] = False
  return sim, rel, valid


def _make(kind, sim, rel, valid):
  if kind == "coverage":
    return jaxsel.coverage(sim, valid=valid), lambda m: ref.fl_value(sim, None, m, valid)
  if kind == "facility_location":
    return (jaxsel.facility_location(sim, rel, valid=valid),
            lambda m: ref.fl_value(sim, rel, m, valid))
  return (jaxsel.saturated_coverage(sim, rel, valid=valid),
          lambda m: ref.sc_value(sim, rel, m, valid))


KINDS = ["coverage", "facility_location", "saturated_coverage"]
