#!/usr/bin/env bash
# Build kronpe's CUDA module for the GPU machine's Python here, into .gpu/pkg/kronpe (carried to a
# device run with carry [".gpu"]; tools/gpu_check.sh uses it when its SOURCE_HASH matches csrc/
# and CMakeLists.txt, else builds there). Needs nvcc of the GPU machine's CUDA major version and
# a Python of its minor version here (default python3.12, with pybind11; the cuBLAS headers come
# from this Python's or the default python's nvidia-cublas wheel).
#   tools/gpu_prebuild.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3.12}
if ! "$py" -c "" 2>/dev/null; then  # e.g. pyenv's shim of a version that is not selected
  py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
  [ -n "$py" ] || { echo "no python3.12 found: pass one (tools/gpu_prebuild.sh PYTHON)" >&2; exit 2; }
fi
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude
cublas=$(for p in "$py" python; do
  "$p" -c "import nvidia.cu13 as m, os; print([r for r in m.__path__ if os.path.isfile(os.path.join(r, 'include', 'cublas_v2.h'))][0])" 2>/dev/null && break
done || true)
[ -n "$cublas" ] || { echo "no nvidia-cublas headers found (pip install nvidia-cublas)" >&2; exit 2; }
rm -rf .gpu/pkg && mkdir -p .gpu/pkg/kronpe
cmake -S . -B build/gpu-carry -G Ninja -DCMAKE_BUILD_TYPE=Release -DKRONPE_CUDA=ON \
  -DPython_EXECUTABLE="$(command -v "$py")" -DPYTHON_EXECUTABLE="$(command -v "$py")" \
  -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" -DKRONPE_CUBLAS_ROOT="$cublas" \
  -DKRONPE_MODULE_DIR="$PWD/.gpu/pkg/kronpe" >/dev/null
cmake --build build/gpu-carry -j"${JOBS:-2}"
tools/gpu_check.sh --hash >.gpu/pkg/kronpe/SOURCE_HASH
echo "built $(ls .gpu/pkg/kronpe/_core*.so) from sources $(cat .gpu/pkg/kronpe/SOURCE_HASH)"
