"""Deprecated: `jaxsel.hop_scorer` moved to `jaxsel.contrib.hop_scorer` (research helpers, a lower bar);
this alias will be removed in jaxsel 0.3."""

import warnings

from jaxsel.contrib import hop_scorer as _moved
from jaxsel.contrib.hop_scorer import *  # noqa: F401,F403

__all__ = list(_moved.__all__)

warnings.warn("`jaxsel.hop_scorer` moved to `jaxsel.contrib.hop_scorer`; the old module will be removed in "
              "jaxsel 0.3.", DeprecationWarning, stacklevel=2)
