#!/usr/bin/env bash
# CI: compile the CUDA backend (no GPU needed) and check that the CUDA-built module imports and
# reports itself on this machine, GPU or not. Builds with KRONPE_CUDA=ON into its own directory
# (default build/ci-cuda; the module goes into a copy of the package there, never into
# python/kronpe), for sm_80 and sm_90 (+ PTX), with JOBS parallel jobs (default 2).
# KRONPE_X86_KERNELS=OFF builds its CPU part without the x86 kernels, as aarch64 and macOS get it
# (CMakeLists.txt): .ci/run compiles and tests that portable code in this same build.
#   tools/ci_cuda_build.sh            # the module as releases build it
#   KRONPE_X86_KERNELS=OFF tools/ci_cuda_build.sh   # from .ci/run
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KRONPE_CUDA_BUILD_DIR:-build/ci-cuda}
command -v nvcc >/dev/null || export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
# cuBLAS headers: the nvidia-cublas wheel of the toolkit's major version (kronpe dlopens the
# library at run time; only the headers are needed to compile).
if ! python - "$major" <<'PY'
import os, sys
name = "nvidia.cu%s" % sys.argv[1]
try:
    roots = list(__import__(name, fromlist=["_"]).__path__)
except Exception:
    roots = []
sys.exit(0 if any(os.path.isfile(os.path.join(r, "include", "cublas_v2.h")) for r in roots) else 1)
PY
then
  python -m pip install -q "nvidia-cublas>=${major},<$((major + 1))"
fi
start=$(date +%s)
rm -rf "$build/pkg"
mkdir -p "$build/pkg"
tar --exclude='*.so' --exclude='__pycache__' -C python -cf - kronpe | tar -C "$build/pkg" -xf -
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKRONPE_CUDA=ON \
  -DKRONPE_X86_KERNELS="${KRONPE_X86_KERNELS:-ON}" \
  -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" -DKRONPE_MODULE_DIR="$PWD/$build/pkg/kronpe" >/dev/null
cmake --build "$build" -j"${JOBS:-2}"
echo "kronpe: CUDA build took $(( $(date +%s) - start )) s"
# The CUDA-built module must import and describe itself without a GPU; tests/test_cuda.py then
# checks the build report, runs the GPU tests when a device is present and skips them otherwise.
PYTHONPATH="$build/pkg" python - <<'PY'
import kronpe
info = kronpe.build_info()
assert info["cuda"], info
print("kronpe build_info:", {k: info[k] for k in ("cuda", "cuda_compiler", "cuda_architectures", "cublas", "cuda_devices", "simd", "chain_gemm")})
PY
PYTHONPATH="$build/pkg" python -m pytest -q -p no:cacheprovider tests/test_cuda.py
