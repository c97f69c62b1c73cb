// The CUDA backend's cache of device memory blocks (internal to csrc/cuda): freed blocks are kept
// for the next request of the same size on the same device (a multigrid fill makes ~200 arrays,
// and cudaFree waits for the device), and DBuf, a device array that takes its memory from there
// and gives it back. kronpe/cuda.h's multigrid_cache_bytes reports and frees what is kept.
#pragma once
#include <cstddef>
#include <utility>

namespace kronpe::cuda::detail {

// A block of `bytes` on the current device: a kept one of that size, else cudaMalloc.
void* block_allocate(std::size_t bytes);
// The block back to the cache (the caller has waited for the work that used it).
void block_release(void* p, std::size_t bytes) noexcept;

template <typename T>
class DBuf {
 public:
  DBuf() = default;
  explicit DBuf(std::size_t n) : n_(n) {
    if (n) p_ = static_cast<T*>(block_allocate(n * sizeof(T)));
  }
  ~DBuf() {
    if (p_) block_release(p_, n_ * sizeof(T));
  }
  DBuf(DBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DBuf& operator=(DBuf&& o) noexcept {
    if (this != &o) {
      if (p_) block_release(p_, n_ * sizeof(T));
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace kronpe::cuda::detail
