#!/usr/bin/env bash
# cibuildwheel's before-all on manylinux_2_28 x86_64 (pyproject.toml [tool.cibuildwheel]): the CUDA
# compiler and the cuBLAS headers from NVIDIA's RHEL 8 repository, so the Linux x86_64 wheel
# carries the CUDA kernels. Nothing CUDA ends up in the wheel but kronpe's own code: the CUDA
# runtime is linked statically and cuBLAS is loaded at run time (README.md, "Building with CUDA").
set -euo pipefail
major=${KRONPE_CIBW_CUDA_MAJOR:-13}
minor=${KRONPE_CIBW_CUDA_MINOR:-0}
dnf install -y dnf-plugins-core
dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
dnf install -y "cuda-nvcc-${major}-${minor}" "cuda-cudart-devel-${major}-${minor}" "libcublas-devel-${major}-${minor}"
ln -sfn "/usr/local/cuda-${major}.${minor}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
