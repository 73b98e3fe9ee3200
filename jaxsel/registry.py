"""Deprecated: `jaxsel.registry` moved to `jaxsel.contrib.registry` (research helpers, a lower bar);
this alias will be removed in jaxsel 0.3."""

import warnings

from jaxsel.contrib import registry as _moved
from jaxsel.contrib.registry import *  # noqa: F401,F403

__all__ = list(_moved.__all__)

warnings.warn("`jaxsel.registry` moved to `jaxsel.contrib.registry`; the old module will be removed in "
              "jaxsel 0.3.", DeprecationWarning, stacklevel=2)
