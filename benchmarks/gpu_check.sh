#!/usr/bin/env bash
# One prepared check for a lent GPU machine (an H200 with CUDA): the evaluation-feed and training figures of
# benchmarks/gpu_check.py as ONE JSON object on stdout (progress on stderr; also $OUT/gpu_check.json when $OUT
# is set).
#
#   bash benchmarks/gpu_check.sh              # on the GPU machine, from the repository root or anywhere
#   bash benchmarks/gpu_check.sh --dry-run    # the same steps on the CPU with tiny sizes (checks the script)
#   bash benchmarks/gpu_check.sh --prepare-wheels   # HERE, where pip reaches an index: fetch the wheels the
#                                                   # GPU machine lacks into .whl/ (carry it there)
#   bash benchmarks/gpu_check.sh --sweeps [--dry-run]  # instead of the check: the MADMAN data-property sweeps at
#                                                   # the larger model and batch (benchmarks/madman_sweeps.py
#                                                   # --scale gpu) for the time limit; new point records go to
#                                                   # benchmarks/results/madman_sweeps_gpu/ and, with $OUT, to
#                                                   # $OUT/madman_sweeps_gpu/ (commit them: a rerun skips them)
#
# The repository arrives without its virtual environment, and the GPU machine reaches no package index. So no
# venv is made: the script takes the first Python that imports torch (with CUDA unless --dry-run) - $PYTHON,
# python3, /opt/torch/.venv/bin/python3 - checks the modules bindscope needs, and installs only the missing ones
# into /tmp/bindscope-site from .whl/ (wheels carried along; --prepare-wheels makes them; $GPU_CHECK_WHEELS names
# another prepared folder) or, where an index is reachable, from it - each under a time limit. The ComCO render
# step runs with $BLENDER_PYTHON when set (bpy 5.0.1 needs Python 3.11), else with the same Python. The
# text-to-image step (benchmarks/t2i_check.py: stabilityai/sd-turbo, google/owlv2-base-patch16-ensemble,
# facebook/sam-vit-base) runs when diffusers and transformers import and those weights are in the Hugging Face
# cache ($HF_HOME, carried along: nothing is downloaded); else the report says it was skipped and why. The whole check runs under $GPU_CHECK_LIMIT seconds (default
# 560, inside one 10-minute device command; 0: no time limit, for tests of the script).
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.whl}
MODE=""
SWEEPS=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) MODE=dry ;;
    --prepare-wheels) MODE=wheels ;;
    --sweeps) SWEEPS=1 ;;
    *) echo "usage: bash benchmarks/gpu_check.sh [--sweeps] [--dry-run] | --prepare-wheels" >&2; exit 2 ;;
  esac
done
# module to import -> distribution to install (pinned where the project pins it)
MODULES="numpy:numpy h5py:h5py scipy:scipy skimage:scikit-image PIL:Pillow click:click jsonschema:jsonschema
yaml:PyYAML joblib:joblib tqdm:tqdm matplotlib:matplotlib mlxtend:mlxtend numba:numba ftfy:ftfy
open_clip:open_clip_torch==3.3.0"

if [ "$MODE" = wheels ]; then
  # Wheels for the GPU machine's Python 3.12 (x86-64, manylinux): what its image lacks (see the device notes).
  mkdir -p .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  for spec in open_clip_torch==3.3.0 ftfy wcwidth mlxtend jsonschema jsonschema-specifications referencing \
              rpds-py diffusers==0.42.1; do
    timeout 120 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl "$spec" || echo "could not fetch $spec" >&2
  done
  ls .whl >&2
  exit 0
fi

pick_python() {
  for cand in "${PYTHON:-}" python3 /opt/torch/.venv/bin/python3 python; do
    [ -n "$cand" ] || continue
    command -v "$cand" >/dev/null 2>&1 || continue
    if [ "$MODE" = dry ]; then
      "$cand" -c "import torch" >/dev/null 2>&1 && { echo "$cand"; return 0; }
    else
      "$cand" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 \
        && { echo "$cand"; return 0; }
    fi
  done
  return 1
}

PY=$(pick_python) || { echo '{"errors": {"setup": "no Python with torch (and CUDA) found"}}'; exit 1; }
echo "[gpu_check.sh] python: $PY ($($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'))" >&2

# one interpreter tries every import and names the distributions of those that fail
# shellcheck disable=SC2086
missing=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" - $MODULES 2>/dev/null <<'EOF'
import importlib, sys
for pair in sys.argv[1:]:
    module, dist = pair.split(":", 1)
    try:
        importlib.import_module(module)
    except Exception:
        print(dist, end=" ")
EOF
)
if [ -n "$missing" ]; then
  SITE=/tmp/bindscope-site
  mkdir -p "$SITE"
  echo "[gpu_check.sh] installing into $SITE:$missing" >&2
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    timeout 180 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl >&2 || echo "[gpu_check.sh] wheel install failed" >&2
  else
    # shellcheck disable=SC2086
    timeout 240 "$PY" -m pip install -q --no-cache-dir --target "$SITE" $missing >&2 \
      || echo "[gpu_check.sh] pip install failed (no index reachable? run --prepare-wheels where one is)" >&2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1

LIMIT=${GPU_CHECK_LIMIT:-560}
if [ -n "$SWEEPS" ]; then
  # the sweeps at the gpu scale, as many points as the time limit holds (a started point runs to its end, so the
  # budget keeps 20 s spare and starts no point the slowest one so far would carry past it); a dry run is the
  # script's --quick on the CPU
  RESULTS=benchmarks/results/madman_sweeps_gpu
  SARGS=(--scale gpu --work "${GPU_CHECK_WORK:-/tmp/bindscope-gpu-check}/sweeps" --jobs 2)
  if [ "$MODE" = dry ]; then
    RESULTS=${GPU_CHECK_WORK:-/tmp/bindscope-gpu-check}/sweeps-results
    SARGS+=(--quick --plots "${GPU_CHECK_WORK:-/tmp/bindscope-gpu-check}/sweeps-plots")
  elif [ -n "${OUT:-}" ]; then
    SARGS+=(--plots "$OUT/plots")
  fi
  SARGS+=(--results "$RESULTS")
  [ -n "${OUT:-}" ] && SARGS+=(--json "$OUT/madman_sweeps_gpu.json")
  [ "$LIMIT" = 0 ] || SARGS+=(--budget $(( LIMIT - 40 )))
  if [ "$LIMIT" = 0 ]; then
    "$PY" benchmarks/madman_sweeps.py "${SARGS[@]}"
  else
    timeout "$LIMIT" "$PY" benchmarks/madman_sweeps.py "${SARGS[@]}"
  fi
  status=$?
  [ -n "${OUT:-}" ] && [ -d "$RESULTS" ] && cp -r "$RESULTS" "$OUT/madman_sweeps_gpu"
  exit $status
fi

ARGS=(--work "${GPU_CHECK_WORK:-/tmp/bindscope-gpu-check}")
[ "$MODE" = dry ] && ARGS+=(--dry-run)
[ -n "${OUT:-}" ] && ARGS+=(--out "$OUT/gpu_check.json")
if [ "$LIMIT" = 0 ]; then  # no time limits (a test of the script): every step runs to its end
  "$PY" benchmarks/gpu_check.py "${ARGS[@]}" --budget 0
else
  timeout "$LIMIT" "$PY" benchmarks/gpu_check.py "${ARGS[@]}" --budget $(( LIMIT - 20 ))
fi
status=$?
[ $status -eq 124 ] && echo '{"errors": {"setup": "the whole check ran past GPU_CHECK_LIMIT"}}'
exit $status
