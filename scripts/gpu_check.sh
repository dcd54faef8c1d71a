#!/usr/bin/env bash
# One-command check of gmpo-plugins on a CUDA machine that has torch and triton installed
# and no network. Usage:
#
#   scripts/gpu_check.sh [--dry-run] [--wheels DIR] OUTDIR
#
# Steps (each with a time limit, so that the whole check ends within 5 minutes):
#   1. environment: python, torch (>= 2.4), CUDA, triton; versions into OUTDIR/environment.txt
#   2. test dependencies (scripts/gpu-check-requirements.txt): used as installed when they all
#      import, else installed offline from the wheel folder (default ./wheels) into a
#      temporary directory put on PYTHONPATH (nothing is installed into the machine's python)
#   3. the CUDA tests: Triton kernels compiled for the GPU (TRITON_INTERPRET unset) and their
#      self-check against the torch backend (what impl="auto" runs first), every
#      loss on CUDA against the eager oracle, the no-sync test under
#      torch.cuda.set_sync_debug_mode("error") in bf16, torch.compile with the Triton custom
#      operators and inductor; a test that needs what this torch/triton lacks skips with its
#      reason (pytest -rs, in OUTDIR/pytest.log); warnings are reported there, not errors,
#      since the machine's torch and triton are not the pinned ones
#   4. gmpo-plugins bench --device cuda: OUTDIR/bench-cuda.json and OUTDIR/bench-cuda.md
#   5. its fused-linear section at H = 4096 (V = 32K and 152K, 4 x 1024 positions: log-probs and
#      the loss from hidden states and the lm_head by the unfused path, fused_linear_loss at its
#      default chunk, and TRL's, verl's and Liger-Kernel's fused paths where importable; peak
#      extra memory from torch.cuda.max_memory_allocated):
#      OUTDIR/bench-fused-linear.json and OUTDIR/bench-fused-linear.md
#   6. OUTDIR/summary.txt: each step, its status and its time
#
# Fill the wheel folder beforehand, on a machine with network (add --python-version X.Y
# for the GPU machine's python if it differs):
#   python3 -m pip download --only-binary=:all: -d wheels -r scripts/gpu-check-requirements.txt
#
# OUTDIR must not exist or be empty (nothing is overwritten). PYTHON selects the
# interpreter (default python3). --dry-run checks the arguments and the environment, prints
# what would run and writes nothing. Exit status: 0 all steps passed, 1 a step failed,
# 2 bad arguments, 3 this machine cannot run the check (no CUDA, no torch, missing wheels).

set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$REPO/scripts/gpu-check-requirements.txt"
PYTHON="${PYTHON:-python3}"
WHEELS="$REPO/wheels"
DRY_RUN=0
OUTDIR=""
# seconds per step: together under 5 minutes
LIMIT_ENV=30
LIMIT_DEPS=30
LIMIT_TESTS=150
LIMIT_BENCH=60
LIMIT_FUSED=300
TEST_FILES=(tests/core/test_kernels.py tests/core/test_triton_verify.py tests/core/test_no_sync.py tests/core/test_compile.py)
TEST_SELECTION="cuda or triton"
BENCH_ARGS=(bench --device cuda --repeats 20)
FUSED_ARGS=(bench --fused-linear 32768x4096,151936x4096 --fused-tokens 4x1024 --device cuda --repeats 5)

usage() {
    sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

fail_usage() {
    echo "gpu_check.sh: error: $1 (--help for usage)" >&2
    exit 2
}

refuse() {
    echo "gpu_check.sh: cannot run the check here: $1" >&2
    exit 3
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --wheels)
            [[ $# -ge 2 && -n "$2" ]] || fail_usage "--wheels needs a directory"
            WHEELS="$(cd "$2" 2>/dev/null && pwd)" || fail_usage "--wheels: directory '$2' does not exist"
            shift 2 ;;
        --wheels=*)
            value="${1#--wheels=}"
            WHEELS="$(cd "$value" 2>/dev/null && pwd)" || fail_usage "--wheels: directory '$value' does not exist"
            shift ;;
        -*) fail_usage "unknown option '$1'" ;;
        *)
            [[ -z "$OUTDIR" ]] || fail_usage "one OUTDIR expected, got '$OUTDIR' and '$1'"
            OUTDIR="$1"; shift ;;
    esac
done
[[ -n "$OUTDIR" ]] || fail_usage "OUTDIR is required (the folder for the logs, bench JSON and Markdown)"
if [[ -e "$OUTDIR" && ! -d "$OUTDIR" ]]; then
    fail_usage "OUTDIR '$OUTDIR' exists and is not a directory"
fi
if [[ -d "$OUTDIR" && -n "$(ls -A "$OUTDIR")" ]]; then
    fail_usage "OUTDIR '$OUTDIR' is not empty; give a new or empty folder (nothing is overwritten)"
fi
command -v "$PYTHON" >/dev/null 2>&1 || refuse "no python interpreter '$PYTHON' (set PYTHON)"

# -- 1. environment ----------------------------------------------------------------------
ENV_REPORT="$(timeout "$LIMIT_ENV" "$PYTHON" - <<'EOF' 2>&1
import importlib.util
import platform
import sys

print(f"python {platform.python_version()} ({sys.executable})")
try:
    import torch
except Exception as exc:  # any failure: the check cannot run
    print(f"torch: cannot import ({exc!r})")
    sys.exit(10)
print(f"torch {torch.__version__} (CUDA build {torch.version.cuda})")
version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
if version < (2, 4):
    print("torch: gmpo-plugins needs torch >= 2.4")
    sys.exit(11)
if importlib.util.find_spec("triton") is None:
    print("triton: not installed (the Triton tests will skip)")
else:
    try:
        import triton
        print(f"triton {triton.__version__}")
    except Exception as exc:  # a broken triton: the loss falls back to torch, the tests skip
        print(f"triton: installed but does not import ({exc!r}; the Triton tests will skip)")
if not torch.cuda.is_available():
    print("CUDA: not available (torch.cuda.is_available() is False)")
    sys.exit(12)
for index in range(torch.cuda.device_count()):
    name = torch.cuda.get_device_name(index)
    major, minor = torch.cuda.get_device_capability(index)
    print(f"CUDA device {index}: {name} (compute capability {major}.{minor})")
EOF
)"
ENV_STATUS=$?
echo "$ENV_REPORT"
case "$ENV_STATUS" in
    0) ;;
    10) refuse "torch does not import with $PYTHON" ;;
    11) refuse "torch is older than 2.4" ;;
    12)
        if [[ "$DRY_RUN" -eq 0 ]]; then
            refuse "no CUDA device (torch.cuda.is_available() is False); this script is for a GPU machine"
        fi
        echo "(dry run: a real run would stop here, exit status 3)" ;;
    124) refuse "importing torch took more than ${LIMIT_ENV}s" ;;
    *) refuse "the environment check failed (exit status $ENV_STATUS)" ;;
esac

# -- 2. test dependencies ------------------------------------------------------------------
MISSING="$("$PYTHON" - <<'EOF'
import importlib.util

modules = {"pluggy": "pluggy", "pytest": "pytest", "pytest-timeout": "pytest_timeout",
           "hypothesis": "hypothesis", "rich": "rich"}
print(" ".join(name for name, module in modules.items() if importlib.util.find_spec(module) is None))
EOF
)"
DEPS_DIR=""
INSTALL=()
if [[ -n "$MISSING" ]]; then
    if ! compgen -G "$WHEELS/*.whl" >/dev/null; then
        refuse "missing test dependencies ($MISSING) and no wheels in '$WHEELS'; fill it on a machine with network:
    $PYTHON -m pip download --only-binary=:all: -d wheels -r scripts/gpu-check-requirements.txt"
    fi
    INSTALL=("$PYTHON" -m pip install --no-index --find-links "$WHEELS" --no-warn-script-location --quiet
             --target "<temporary directory>" -r "$REQUIREMENTS")
fi

if [[ "$DRY_RUN" -eq 1 ]]; then
    echo "dry run: nothing is installed, run or written. A real run would:"
    if [[ -n "$MISSING" ]]; then
        echo "  install (missing: $MISSING): ${INSTALL[*]}"
    else
        echo "  use the installed test dependencies (all import)"
    fi
    echo "  create $OUTDIR"
    echo "  run (at most ${LIMIT_TESTS}s): $PYTHON -m pytest -q -rs -p no:cacheprovider -W default ${TEST_FILES[*]}" \
         "-k '$TEST_SELECTION' (TRITON_INTERPRET unset) > $OUTDIR/pytest.log"
    echo "  run (at most ${LIMIT_BENCH}s): $PYTHON -m gmpo_plugins.cli.main ${BENCH_ARGS[*]}" \
         "--json $OUTDIR/bench-cuda.json --markdown > $OUTDIR/bench-cuda.md"
    echo "  run (at most ${LIMIT_FUSED}s): $PYTHON -m gmpo_plugins.cli.main ${FUSED_ARGS[*]}" \
         "--json $OUTDIR/bench-fused-linear.json > $OUTDIR/bench-fused-linear.md"
    echo "  write $OUTDIR/environment.txt and $OUTDIR/summary.txt"
    exit 0
fi

mkdir -p "$OUTDIR" || fail_usage "cannot create OUTDIR '$OUTDIR'"
OUTDIR="$(cd "$OUTDIR" && pwd)"
echo "$ENV_REPORT" >"$OUTDIR/environment.txt"
SUMMARY="$OUTDIR/summary.txt"
FAILED=0

record() {  # step, exit status, seconds, what the status means
    local step="$1" status="$2" seconds="$3" detail="$4" verdict="passed"
    [[ "$status" -eq 0 ]] || { verdict="FAILED"; FAILED=1; }
    [[ "$status" -eq 124 ]] && verdict="FAILED (time limit)"
    printf '%-6s %-20s %4ss  %s\n' "$step" "$verdict" "$seconds" "$detail" | tee -a "$SUMMARY"
}

if [[ -n "$MISSING" ]]; then
    DEPS_DIR="$(mktemp -d)"
    trap 'rm -rf "$DEPS_DIR"' EXIT
    start=$SECONDS
    timeout "$LIMIT_DEPS" "$PYTHON" -m pip install --no-index --find-links "$WHEELS" --no-warn-script-location \
        --quiet --target "$DEPS_DIR" -r "$REQUIREMENTS" >"$OUTDIR/install.log" 2>&1
    status=$?
    record deps "$status" $((SECONDS - start)) "offline install of: $MISSING (install.log)"
    [[ "$status" -eq 0 ]] || { echo "gpu_check.sh: the offline install failed, see $OUTDIR/install.log" >&2; exit 1; }
fi
export PYTHONPATH="$REPO${DEPS_DIR:+:$DEPS_DIR}${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
cd "$REPO" || exit 1

# -- 3. CUDA tests -------------------------------------------------------------------------
start=$SECONDS
timeout "$LIMIT_TESTS" "$PYTHON" -m pytest -q -rs -p no:cacheprovider -W default "${TEST_FILES[@]}" \
    -k "$TEST_SELECTION" >"$OUTDIR/pytest.log" 2>&1
status=$?
record tests "$status" $((SECONDS - start)) "$(tail -n 1 "$OUTDIR/pytest.log") (pytest.log)"

# -- 4. bench ------------------------------------------------------------------------------
start=$SECONDS
timeout "$LIMIT_BENCH" "$PYTHON" -m gmpo_plugins.cli.main "${BENCH_ARGS[@]}" --json "$OUTDIR/bench-cuda.json" \
    --markdown >"$OUTDIR/bench-cuda.md" 2>"$OUTDIR/bench.log"
status=$?
record bench "$status" $((SECONDS - start)) "$(grep -m 1 -o 'Targets ([^)]*)' "$OUTDIR/bench-cuda.md") (bench-cuda.md)"

# -- 5. fused-linear bench -----------------------------------------------------------------
start=$SECONDS
timeout "$LIMIT_FUSED" "$PYTHON" -m gmpo_plugins.cli.main "${FUSED_ARGS[@]}" \
    --json "$OUTDIR/bench-fused-linear.json" >"$OUTDIR/bench-fused-linear.md" 2>"$OUTDIR/bench-fused-linear.log"
status=$?
record fused "$status" $((SECONDS - start)) "$(grep -c 'fused_linear_loss .*| yes |$' "$OUTDIR/bench-fused-linear.md") targets met (bench-fused-linear.md)"

echo "results in $OUTDIR"
exit "$FAILED"
