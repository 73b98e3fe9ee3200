"""Native CPU kernels: C++ XLA FFI handlers in `jaxsel/csrc/`, built on first use.

XLA:CPU runs a few of jaxsel's hot loops poorly: greedy's gain reduction
`Σ_i relu(s_ji − c_i)` is a single-threaded reduce fusion at about 1.8 G elements/s, and each
greedy step is a dozen small XLA ops. For those, a small C++ kernel is compiled with the machine's C++ compiler the first time it is
needed, against the FFI headers of the installed jaxlib, and cached under
`$JAXSEL_CACHE_DIR` (default `~/.cache/jaxsel`), keyed by the source, the compiler
command, jaxlib's version and the CPU's instruction set. The kernels run inside jit-compiled
programs as XLA custom calls, only on the CPU backend.

When no compiler is found or the build fails, jaxsel falls back to its pure-XLA code (same
results up to float rounding) and says why once (`logging`, logger `jaxsel`). Set
`JAXSEL_NATIVE=0` to turn the kernels off, `JAXSEL_CXX` to choose the compiler.
`jaxsel._native.status()` tells what happened.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

import jax

log = logging.getLogger("jaxsel")

_SRC = Path(__file__).parent / "csrc"
_FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp-simd")
_lock = threading.Lock()
_libs: dict[str, Optional[ctypes.CDLL]] = {}
_errors: dict[str, str] = {}
_forced_off = 0  # depth of `disabled()` blocks


def enabled() -> bool:
  """False when `JAXSEL_NATIVE` is set to 0/false/no/off, or inside `disabled()`."""
  if _forced_off:
    return False
  return os.environ.get("JAXSEL_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def disabled():
  """Run with the pure-XLA code paths (for comparisons and tests). Clears JAX's caches on
  entry and exit, since the choice is made when a function is traced."""
  global _forced_off
  jax.clear_caches()
  _forced_off += 1
  try:
    yield
  finally:
    _forced_off -= 1
    jax.clear_caches()


def _cpu_signature() -> str:
  """What `-march=native` compiles for: the CPU's model and flags (a cache shared by
  different machines must not hand one's binary to another)."""
  try:
    text = Path("/proc/cpuinfo").read_text()
    lines = [l for l in text.splitlines() if l.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))
  except OSError:
    return platform.processor() + platform.machine()


def _compiler() -> Optional[list[str]]:
  env = os.environ.get("JAXSEL_CXX")
  if env:
    return shlex.split(env)
  for name in ("c++", "g++", "clang++"):
    path = shutil.which(name)
    if path:
      return [path]
  return None


def _cache_dir() -> Path:
  root = os.environ.get("JAXSEL_CACHE_DIR") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jaxsel")
  return Path(root) / "native"


def _march() -> list[str]:
  return ["-march=native"] if platform.machine() in ("x86_64", "AMD64", "i686") else ["-mcpu=native"]


def _build(name: str) -> ctypes.CDLL:
  src = _SRC / f"{name}.cc"
  cxx = _compiler()
  if cxx is None:
    raise RuntimeError("no C++ compiler found (looked for c++, g++, clang++; set JAXSEL_CXX)")
  include = jax.ffi.include_dir()
  cmd = [*cxx, *_FLAGS, *_march(), f"-I{include}"]
  import jaxlib
  headers = [h.read_text() for h in sorted(_SRC.glob("*.h"))]  # shared by every kernel
  key = hashlib.sha256("\0".join([
      src.read_text(), *headers, " ".join(cmd), jaxlib.__version__, _cpu_signature()]).encode()).hexdigest()[:16]
  out = _cache_dir() / f"{name}-{key}.so"
  if not out.exists():
    try:
      out.parent.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable home: a private folder under the temporary directory
      out = Path(tempfile.gettempdir()) / f"jaxsel-native-{os.getuid()}" / out.name
      out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  if not out.exists():
    # Build into a private temporary file, then rename: concurrent builders never see a
    # half-written library, and the last rename wins with an identical file.
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
      proc = subprocess.run([*cmd, str(src), "-o", tmp], capture_output=True, text=True, timeout=300)
      if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)} {src}` failed:\n{proc.stderr[-4000:]}")
      os.replace(tmp, out)
    finally:
      if os.path.exists(tmp):
        os.unlink(tmp)
  return ctypes.CDLL(str(out))


def load(name: str, targets: dict[str, str]) -> Optional[ctypes.CDLL]:
  """The library built from `csrc/{name}.cc` with its FFI `targets` (`{xla_name: symbol}`)
  registered for the CPU platform, or None (kernels off, no compiler, build failed)."""
  if not enabled():
    return None
  with _lock:
    if name in _libs:
      return _libs[name]
    lib = None
    try:
      lib = _build(name)
      for target, symbol in targets.items():
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    except Exception as e:  # no compiler, a failed build, a missing symbol: use XLA instead
      lib = None
      _errors[name] = f"{type(e).__name__}: {e}"
      log.warning("jaxsel: native kernel %r unavailable, using the XLA path instead (%s)",
                  name, _errors[name].splitlines()[0])
    _libs[name] = lib
    return lib


def status() -> dict[str, str]:
  """`{kernel name: "loaded" | reason it is not}` for the kernels asked for so far."""
  if not enabled():
    return {n: "turned off (JAXSEL_NATIVE or disabled())" for n in sorted(set(_libs) | {"greedy"})}
  return {n: ("loaded" if lib is not None else _errors.get(n, "not loaded")) for n, lib in _libs.items()}
