// kronpe C++ core: shared types and error handling. No Python, no torch.
#pragma once
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define KRONPE_HD __host__ __device__ __forceinline__
#else
#define KRONPE_HD inline
#endif

// Hot loops compiled for AVX-512 and AVX2 machines too (x86-64 Linux, the clone picked at load
// time); elsewhere, or with KRONPE_NO_CLONES (CMake's KRONPE_X86_KERNELS=OFF), plain functions.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__) && !defined(KRONPE_NO_CLONES)
#define KRONPE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KRONPE_CLONES
#endif

namespace kronpe {

using index_t = std::int64_t;  // every size or offset that a product of sizes can reach

// Element type tag passed across the C++ API (the bindings map dtype names onto it).
enum class DType { f32, f64 };

inline const char* dtype_name(DType d) { return d == DType::f32 ? "float32" : "float64"; }

// Raised for invalid arguments; the bindings translate it into Python's ValueError.
class ArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Raised when a backend (BLAS, CUDA) is unusable; translated into RuntimeError.
class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void require(bool ok, const std::string& message) {
  if (!ok) throw ArgumentError(message);
}
// (a literal: no std::string made unless it fails, so that checks inside loops cost no allocation)
inline void require(bool ok, const char* message) {
  if (!ok) throw ArgumentError(message);
}

// a * b, or an ArgumentError naming `what` when it overflows index_t.
inline index_t checked_mul(index_t a, index_t b, const char* what) {
  if (a < 0 || b < 0) throw ArgumentError(std::string(what) + ": negative size");
  if (a != 0 && b > std::numeric_limits<index_t>::max() / a)
    throw ArgumentError(std::string(what) + ": size overflows 64-bit indexing");
  return a * b;
}

// a * b for non-negative a, b, or the largest index_t when it overflows: for estimates (work,
// cost) that only compare sizes and must never wrap.
inline index_t saturating_mul(index_t a, index_t b) {
  if (a != 0 && b > std::numeric_limits<index_t>::max() / a)
    return std::numeric_limits<index_t>::max();
  return a * b;
}

// The most threads a kernel accepts (OpenMP runtimes fail, or crash, when asked for far more
// threads than a machine has).
constexpr int kMaxThreads = 1024;

// A caller's thread count: 0 (the default: the backend chooses) or 1..kMaxThreads.
inline int checked_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw ArgumentError("threads must be between 1 and " + std::to_string(kMaxThreads) +
                        " (or 0 for the default), got " + std::to_string(threads));
  return threads;
}

}  // namespace kronpe
