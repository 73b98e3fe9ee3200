#!/usr/bin/env bash
# jaxsel on an accelerator, in one script: install the CUDA jaxlib where JAX sees no GPU, run
# the tests that apply on an accelerator (the XLA path: greedy, objectives, matrix-free, search)
# and the greedy / search / encoder / scale benchmarks, then print one table. Sized for under
# 8 minutes on one H200 (the steps' limits add up to about that); every step has its own time
# limit, and a failed step is a row of the table, not the end of the run.
#
#   bash bench/gpu.sh              # on the GPU machine (python3 there must hold JAX)
#   bash bench/gpu.sh --dry-run    # anywhere: the same steps on the CPU, tiny sizes (a check
#                                  # of this script, not a measurement)
#
# On the GPU the XLA path is the only path (the C++ kernels are CPU-only): the greedy bench
# reports its dense greedy against the device's own bandwidth floor, and its picks must be the
# CPU's (the tests compare against NumPy references). Peers (apricot, submodlib) are CPU
# libraries and are left out here; bench/RESULTS.md holds their CPU tables.
#
# Environment: PYTHON (default python3), OUT (where logs and the report go; default
# /tmp/jaxsel-gpu-out). Python packages jaxsel needs that the machine lacks can travel as wheels in
# .whl/ (installed with --no-index into a private folder).
set -u -o pipefail
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
# The dry run checks that every step works, not how fast: on a CPU shared with other jobs its
# steps get five times the limits written below.
LIMIT_FACTOR=1
[ $DRY = 1 ] && LIMIT_FACTOR=5
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/jaxsel-gpu-out}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
STEPS="$OUT_DIR/steps.tsv"
: > "$STEPS"

# step NAME LIMIT_S COMMAND...: runs COMMAND with a time limit, logs to $OUT_DIR/NAME.log and
# records name, exit status and seconds.
step() {
  local name=$1 limit=$(( $2 * LIMIT_FACTOR ))
  shift 2
  local t0=$(date +%s)
  echo "== $name (limit ${limit}s): $*"
  timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$STEPS"
  tail -n 3 "$OUT_DIR/$name.log"
}

# 1. Packages: carried wheels first, then the CUDA jaxlib if JAX sees no GPU (needs a network).
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/jaxsel-site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/jaxsel-site"
fi
if [ $DRY = 1 ]; then
  export JAX_PLATFORMS=cpu
elif ! "$PY" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2> /dev/null; then
  step install-cuda-jaxlib 240 "$PY" -m pip install -q "jax[cuda12]>=0.10,<0.13"
fi
step environment 120 "$PY" -c "
import jax, numpy, jaxsel
print('jax', jax.__version__, 'backend', jax.default_backend(), jax.devices(), 'numpy', numpy.__version__)"

# 2. Tests that apply on an accelerator (test_cover_kernel.py and test_attention_kernel.py are
#    the CPU kernels: not here).
if [ $DRY = 1 ]; then
  TESTS=(tests/objectives/test_dense.py -k "inside_jit or from_embeddings")
else
  TESTS=(tests/test_greedy.py tests/objectives/test_dense.py tests/objectives/test_large.py tests/test_search.py)
fi
step tests 180 "$PY" -m pytest -q -x -p no:cacheprovider "${TESTS[@]}"

# 3. Benchmarks.
if [ $DRY = 1 ]; then
  step greedy 300 "$PY" bench/greedy.py --sizes 300 --k 20 --repeats 2 --batch 16 --peers \
    --budget-s 5 --out "$OUT_DIR/greedy.md"
  step search 120 "$PY" bench/search.py --batch 8 --repeats 2 --rounds 1
  step scale 120 "$PY" bench/scale.py --sizes 2000 --devices 1 --out "$OUT_DIR/scale.json"
  step encoders 120 "$PY" bench/encoders.py --n 8 --repeats 1
else
  step greedy 150 "$PY" bench/greedy.py --sizes 4000 10000 --repeats 5 --budget-s 10 --peers \
    --out "$OUT_DIR/greedy.md"
  step search 45 "$PY" bench/search.py --repeats 20 --rounds 2
  step scale 60 "$PY" bench/scale.py --sizes 10000,100000 --devices 1 --out "$OUT_DIR/scale.json"
  step encoders 45 "$PY" bench/encoders.py --n 256 --repeats 2
fi

# 4. One table: every step, then the greedy rows (XLA path against the device's floor).
"$PY" - "$OUT_DIR" "$(( $(date +%s) - START ))" <<'EOF'
import pathlib, sys
out, total = pathlib.Path(sys.argv[1]), sys.argv[2]
rows = ["| step | status | seconds | result |", "|---|---|---:|---|"]
for line in (out / "steps.tsv").read_text().splitlines():
  name, rc, secs = line.split("\t")
  log = (out / f"{name}.log").read_text(errors="replace").strip().splitlines() if (out / f"{name}.log").exists() else []
  last = next((l for l in reversed(log) if l.strip() and not l.startswith("  ")), "")
  status = "ok" if rc == "0" else ("time limit" if rc in ("124", "137") else f"failed ({rc})")
  rows.append(f"| {name} | {status} | {secs} | {last.replace('|', '/')[:150]} |")
greedy = out / "greedy.md"
if greedy.exists():
  for line in greedy.read_text().splitlines():
    if line.startswith(("### ", "| lazy", "| dense", "| construction", "dense floor", "read bandwidth")):
      cells = [c.strip() for c in line.strip("|").split("|")]
      if line.startswith("|") and len(cells) >= 6:
        rows.append(f"| greedy: {cells[0]} | {cells[1]} s | | same picks {cells[3]}; vs floor {cells[5] or '-'} |")
      elif line.startswith("### "):
        rows.append(f"| **{line[4:]}** | | | |")
      else:
        rows.append(f"| | | | {line[:200]} |")
table = "\n".join(rows)
print(f"\njaxsel on the accelerator: {total} s in all\n\n{table}")
(out / "report.md").write_text(table + "\n")
EOF
