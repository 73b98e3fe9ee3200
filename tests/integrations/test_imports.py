"""`jaxsel.integrations` imports no framework; an adapter whose framework is missing says which
extra to install."""

import importlib
import subprocess
import sys

import pytest

# (adapter module, the framework module it checks for, the extra)
ADAPTERS = [("llama_index", "llama_index.core", "llama-index"),
            ("langchain", "langchain_core", "langchain"), ("haystack", "haystack", "haystack")]


def test_the_package_imports_no_framework():
  code = ("import sys, jaxsel, jaxsel.integrations; "
          "print([m for m in sys.modules if m.split('.')[0] in "
          "('llama_index', 'langchain_core', 'langchain_classic', 'haystack')])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("adapter, framework, extra", ADAPTERS)
def test_a_missing_framework_names_the_extra(adapter, framework, extra, monkeypatch):
  monkeypatch.setitem(sys.modules, framework, None)  # as if not installed (even when imported)
  monkeypatch.delitem(sys.modules, f"jaxsel.integrations.{adapter}", raising=False)
  with pytest.raises(ImportError, match=f'pip install "jaxsel\\[{extra}\\]"'):
    importlib.import_module(f"jaxsel.integrations.{adapter}")
  monkeypatch.delitem(sys.modules, f"jaxsel.integrations.{adapter}", raising=False)
