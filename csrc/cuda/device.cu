// CUDA backend: runtime queries. The kernels of each family live beside this file.
#include <cuda_runtime.h>

#include "kronpe/cuda.h"

namespace kronpe::cuda {
bool built() { return true; }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}
}  // namespace kronpe::cuda
