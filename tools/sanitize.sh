#!/usr/bin/env bash
# Run tests/test_cuda.py (not the slow ones) under compute-sanitizer: memcheck, racecheck and
# synccheck. Needs a GPU, a CUDA-built kronpe on PYTHONPATH and the CUDA toolkit's
# compute-sanitizer (on PATH or in $CUDA_HOME/bin).
#   tools/ci_cuda_build.sh                                   # builds build/ci-cuda/pkg
#   PYTHONPATH=build/ci-cuda/pkg tools/sanitize.sh [extra pytest args]
# The array libraries' caching allocators are turned off (PYTORCH_NO_CUDA_MEMORY_CACHING=1,
# KRONPE_TEST_NO_POOL=1 for CuPy, read by tests/test_cuda.py) so that an out-of-bounds access
# lands outside every allocation instead of inside a pooled block.
set -euo pipefail
cd "$(dirname "$0")/.."
cs=$(command -v compute-sanitizer || true)
[ -n "$cs" ] || cs="${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"
if [ ! -x "$cs" ]; then
  echo "compute-sanitizer not found (install the CUDA toolkit's sanitizer, or set CUDA_HOME)" >&2
  exit 2
fi
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 KRONPE_TEST_NO_POOL=1
status=0
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer --tool $tool"
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no --check-device-heap yes)
  "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 --target-processes all \
    python -m pytest -q -p no:cacheprovider -m "not slow" tests/test_cuda.py "$@" || status=$?
done
exit "$status"
