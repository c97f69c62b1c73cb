#!/usr/bin/env bash
# Build kronpe._core in place (python/kronpe/_core*.so) for development without installing:
#   tools/dev_build.sh && PYTHONPATH=python python -m pytest
# (KRONPE_CUDA=AUTO|ON|OFF, KRONPE_X86_KERNELS=ON|OFF: CMakeLists.txt; KRONPE_BUILD_DIR, JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KRONPE_BUILD_DIR:-build/dev}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" -DKRONPE_CUDA="${KRONPE_CUDA:-AUTO}" \
  -DKRONPE_X86_KERNELS="${KRONPE_X86_KERNELS:-ON}" >/dev/null
cmake --build "$build" -j"${JOBS:-2}"
