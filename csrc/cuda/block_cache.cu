// The CUDA backend's cache of device memory blocks (block_cache.cuh): at most kCacheBytes kept in
// all, the oldest freed first; multigrid_cache_bytes (kronpe/cuda.h).
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "block_cache.cuh"
#include "common.cuh"
#include "kronpe/cuda.h"

namespace kronpe::cuda {

using detail::check;

namespace {

// Freed blocks are kept for the next hierarchy of the same sizes (a fill makes ~200 arrays, and
// cudaFree waits for the device), at most kCacheBytes in all, the oldest freed first.
constexpr std::size_t kCacheBytes = std::size_t(1) << 30;

struct BlockCache {
  std::mutex mutex;
  struct Block {
    int device;
    std::size_t bytes;
    void* p;
  };
  std::vector<Block> blocks;  // most recently freed last
  std::size_t bytes = 0;
};

// cudaFree on the block's device (the current one restored)
void free_block(const BlockCache::Block& b) noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (cudaSetDevice(b.device) == cudaSuccess) cudaFree(b.p);
  if (previous >= 0) cudaSetDevice(previous);
  cudaGetLastError();  // (a failure here is not the next call's)
}

BlockCache& block_cache() {
  static BlockCache* c = new BlockCache();  // never destroyed: blocks may be freed at exit
  return *c;
}

}  // namespace

namespace detail {

void* block_allocate(std::size_t bytes) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  BlockCache& c = block_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (std::size_t i = c.blocks.size(); i-- > 0;)
      if (c.blocks[i].device == device && c.blocks[i].bytes == bytes) {
        void* p = c.blocks[i].p;
        c.blocks.erase(c.blocks.begin() + std::ptrdiff_t(i));
        c.bytes -= bytes;
        return p;
      }
  }
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc (multigrid)");
  return p;
}

// (the caller has waited for the work that used the block)
void block_release(void* p, std::size_t bytes) noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.blocks.push_back({device, bytes, p});
  c.bytes += bytes;
  while (c.bytes > kCacheBytes) {
    c.bytes -= c.blocks.front().bytes;
    free_block(c.blocks.front());
    c.blocks.erase(c.blocks.begin());
  }
}

}  // namespace detail

std::size_t multigrid_cache_bytes(bool release) noexcept {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (release) {
    for (const BlockCache::Block& b : c.blocks) free_block(b);
    c.blocks.clear();
    c.bytes = 0;
  }
  return c.bytes;
}

}  // namespace kronpe::cuda
