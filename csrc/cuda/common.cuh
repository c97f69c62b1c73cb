// Helpers shared by the CUDA kernel files (internal to csrc/cuda).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "kronpe/common.h"
#include "kronpe/cuda.h"

namespace kronpe::cuda::detail {

// A CUDA error as a BackendError carrying CUDA's name and description of it.
[[noreturn]] inline void fail(cudaError_t e, const char* what) {
  throw BackendError(std::string("kronpe CUDA: ") + what + " failed: " + cudaGetErrorName(e) +
                     ": " + cudaGetErrorString(e));
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

// After a kernel launch: configuration errors and earlier asynchronous faults.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t stream_of(const Context& ctx) {
  return reinterpret_cast<cudaStream_t>(ctx.stream);
}

// Makes ctx.device current for the scope (and restores the previous device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    require(device >= 0, "CUDA device index must be non-negative, got " + std::to_string(device));
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Every piece of scratch memory is aligned to this many bytes.
constexpr std::size_t kAlign = 256;
inline std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Carves scratch arrays out of the caller's workspace; when it is too small, one stream-ordered
// allocation (cudaMallocAsync) holds everything and is freed on the same stream afterwards.
// `need` must be the total of aligned(bytes) over the take() calls.
class Scratch {
 public:
  Scratch(const Context& ctx, std::size_t need) : stream_(stream_of(ctx)) {
    if (need == 0) return;
    if (ctx.workspace != nullptr && ctx.workspace_bytes >= need &&
        reinterpret_cast<std::uintptr_t>(ctx.workspace) % kAlign == 0) {
      base_ = static_cast<unsigned char*>(ctx.workspace);
    } else {
      void* p = nullptr;
      check(cudaMallocAsync(&p, need, stream_), "cudaMallocAsync (scratch)");
      base_ = static_cast<unsigned char*>(p);
      owned_ = true;
    }
    size_ = need;
  }
  ~Scratch() {
    if (owned_) cudaFreeAsync(base_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  template <typename T>
  T* take(std::size_t count) {
    const std::size_t bytes = aligned(count * sizeof(T));
    if (used_ + bytes > size_) throw BackendError("kronpe CUDA: internal error, scratch overrun");
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += bytes;
    return p;
  }

 private:
  cudaStream_t stream_;
  unsigned char* base_ = nullptr;
  std::size_t size_ = 0, used_ = 0;
  bool owned_ = false;
};

// Grid size for a grid-stride loop over n items with `block` threads per block.
inline unsigned blocks_for(index_t n, int block, index_t cap = index_t(1) << 20) {
  const index_t b = (n + block - 1) / block;
  return unsigned(std::max<index_t>(1, std::min<index_t>(b, cap)));
}

// Upload n host values into device memory (stream-ordered; the host copy may be freed on return:
// pageable memory is staged before cudaMemcpyAsync returns).
template <typename T>
void upload(T* device, const T* host, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  check(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (parameters to the device)");
}

}  // namespace kronpe::cuda::detail
