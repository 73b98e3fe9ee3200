"""Start-up cost: `import jaxsel` loads none of the heavy libraries (each public name is
imported on first use), every name of `__all__` still resolves, and the `jaxsel` command
reports a bad command line or a missing input before it loads JAX.

Each check runs in a fresh interpreter: this test process has long imported everything."""

import ast
import json
import pathlib
import subprocess
import sys

import jaxsel

ROOT = pathlib.Path(jaxsel.__file__).parent
# What `import jaxsel` and the command's checks must leave unloaded: seconds of imports.
HEAVY = ("jax", "flax", "transformers", "rouge_score", "nltk", "orbax", "matplotlib", "optax")


def _fresh(code: str) -> dict:
  """Runs `code` in a new interpreter; it prints one JSON line, returned here."""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                     cwd=ROOT.parent)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


_LOADED = "sorted({m.split('.')[0] for m in sys.modules} & set(%r))" % (HEAVY,)


def test_import_jaxsel_loads_no_heavy_library_and_every_name_resolves():
  """In one fresh interpreter, in order: `import jaxsel` (nothing heavy), what `jaxsel select`
  needs (the Pipeline and the encoder: neither ROUGE/NLTK nor matplotlib nor Orbax), then
  every name of `__all__`."""
  got = _fresh(f"""import json, sys
import jaxsel
bare = {_LOADED}
from jaxsel import Pipeline, load_encoder
select = {_LOADED}
kinds = {{n: type(getattr(jaxsel, n)).__name__ for n in jaxsel.__all__}}
from jaxsel import greedy, testing
print(json.dumps({{'bare': bare, 'select': select, 'kinds': kinds, 'dir': dir(jaxsel),
                  'same': Pipeline is jaxsel.Pipeline and greedy is jaxsel.greedy,
                  'unknown': hasattr(jaxsel, 'no_such_name')}}))""")
  assert got["bare"] == [], f"`import jaxsel` loads {got['bare']}"
  assert not set(got["select"]) & {"rouge_score", "nltk", "orbax", "matplotlib"}, got["select"]
  assert sorted(got["kinds"]) == sorted(jaxsel.__all__)
  assert got["kinds"]["greedy"] == "function"
  assert got["same"] and not got["unknown"]
  assert set(jaxsel.__all__) <= set(got["dir"])


def test_the_lazy_names_are_exactly_all():
  """The one mapping of jaxsel/__init__.py (module -> names, what `__getattr__` reads) names
  every entry of `__all__` and nothing else, and nothing public is imported eagerly (it would be
  loaded by `import jaxsel`)."""
  names = [n for names in jaxsel._PUBLIC.values() for n in names]
  assert sorted(names) == sorted(jaxsel.__all__)
  tree = ast.parse((ROOT / "__init__.py").read_text("utf-8"))
  eager = [a.name for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
           for a in node.names]
  assert all(name in ("importlib", "warnings") for name in eager), eager


def _command(argv: list) -> dict:
  """`jaxsel.cli.main(argv)` in a fresh interpreter: exit status, stderr, heavy modules loaded."""
  return _fresh("import contextlib, io, json, sys\nfrom jaxsel import cli\nerr = io.StringIO()\n"
                f"with contextlib.redirect_stderr(err):\n  rc = cli.main({argv!r})\n"
                f"print(json.dumps({{'rc': rc, 'err': err.getvalue(), 'loaded': {_LOADED}}}))")


def test_missing_input_is_reported_before_jax_loads(tmp_path):
  got = _command(["select", str(tmp_path / "missing.txt"), "-q", "x", "--budget", "64"])
  assert got["rc"] == 1 and got["loaded"] == []
  assert got["err"].count("\n") == 1 and "no such file or folder" in got["err"]
  (tmp_path / "empty").mkdir()
  got = _command(["index", "build", str(tmp_path / "empty"), "--out", str(tmp_path / "ix")])
  assert got["rc"] == 1 and got["loaded"] == [] and "holds no text files" in got["err"]


def test_bad_command_line_is_reported_before_jax_loads(tmp_path):
  doc = tmp_path / "doc.txt"
  doc.write_text("One sentence. Another one.", "utf-8")
  for argv in (["select", str(doc), "--budget", "-3"], ["select", str(doc), "--frobnicate"],
               ["select", str(doc), "-q", "  "], ["ask", "", str(doc)]):
    got = _command(argv)
    assert got["rc"] == 2 and got["loaded"] == [], (argv, got)
    assert got["err"].strip(), argv
  got = _command(["select", str(doc), "--plot", str(tmp_path / "curve.xyz")])
  assert got["rc"] == 2 and "jax" not in got["loaded"] and "matplotlib writes no" in got["err"]


def test_the_command_reports_a_missing_file_in_one_line(tmp_path):
  """The installed entry point as a user runs it: one line on stderr, nothing on stdout."""
  r = subprocess.run([sys.executable, "-m", "jaxsel.cli", "select", str(tmp_path / "no.md")],
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 1 and r.stdout == ""
  assert r.stderr == f"jaxsel: error: no such file or folder: {str(tmp_path / 'no.md')!r}.\n"


def _selection(gains, count, xp):
  g = xp.asarray(gains, xp.float32)
  zeros = xp.zeros(g.shape[:-1], xp.float32)
  return jaxsel.Selection(indices=xp.zeros(g.shape, xp.int32), gains=g, values=g,
                          count=xp.asarray(count, xp.int32), cost=zeros, bound=zeros,
                          certified=zeros)


def test_saturation_of_numpy_picks_equals_jax_and_runs_no_program():
  """A result's table counted its saturation point with 14 eager JAX programs, each traced,
  lowered and read from the compilation cache in every new process (0.1-0.2 s of a second
  `jaxsel select`). NumPy picks are now answered in NumPy: the same count as the JAX
  answer (ties at the threshold, zero and negative gains, unused slots, batches, K = 0),
  and in a fresh interpreter no XLA program is compiled."""
  import jax.numpy as jnp
  import numpy as np
  rng = np.random.default_rng(0)
  cases = [([], 0), ([1.0], 1), ([2.0, 0.1, 0.1], 3), ([1.0, 0.05, 0.0], 3), ([1.0, 0.5], 1),
           ([0.0, 0.0], 2), ([-1.0, 0.5], 2), (np.zeros((3, 0)), [0, 0, 0])]
  cases += [(rng.exponential(size=(4, 7)) * (rng.random((4, 7)) > 0.2), rng.integers(0, 8, 4))
            for _ in range(20)]
  for gains, count in cases:
    for rel in (0.05, 0.5):
      ours = jaxsel.saturation_point(_selection(gains, count, np), rel_gain=rel)
      ref = jaxsel.saturation_point(_selection(gains, count, jnp), rel_gain=rel)
      assert isinstance(ours, np.ndarray) and ours.dtype == np.int32
      np.testing.assert_array_equal(ours, np.asarray(ref))
  got = _fresh("""import json, jax, numpy as np
import jaxsel
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
g = np.asarray([3.0, 1.0, 0.1, 0.0], np.float32)
z = np.zeros((), np.float32)
sel = jaxsel.Selection(np.arange(4, dtype=np.int32), g, np.cumsum(g), np.asarray(3, np.int32),
                       z, z, z)
print(json.dumps({'point': int(jaxsel.saturation_point(sel)), 'compiles': len(compiles)}))""")
  assert got == {"point": 2, "compiles": 0}
