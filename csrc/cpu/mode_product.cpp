// Mode-n products on the CPU: the shared executor (kronpe/mode_product_exec.h) with kronpe::gemm
// (the BLAS SciPy loaded), a cache-blocked strided copy and a per-thread workspace.
#include "kronpe/mode_product.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kronpe/blas.h"
#include "kronpe/mode_product_exec.h"

namespace kronpe {
namespace {

// ---- workspace -------------------------------------------------------------------------
// The scratch of a chain (work buffers, matrix copies), one per thread, kept between calls
// (released when very large).
struct Workspace {
  std::unique_ptr<unsigned char[]> data;
  size_t bytes = 0;
  unsigned char* get(size_t need) {
    if (need > bytes) {
      data.reset();
      data.reset(new unsigned char[need]);
      bytes = need;
    }
    return data.get();
  }
  void trim(size_t keep) {
    if (bytes > keep) {
      data.reset();
      bytes = 0;
    }
  }
};

thread_local Workspace t_workspace;
constexpr size_t kKeepWorkspace = size_t(64) << 20;

// Copy `len` contiguous elements (len is small and often 1 or the number of channels).
template <typename T>
inline void copy_run(const T* s, T* d, index_t len) {
  if (len == 1) {
    *d = *s;
  } else if (len >= 32) {
    std::memcpy(d, s, size_t(len) * sizeof(T));
  } else {
    for (index_t k = 0; k < len; ++k) d[k] = s[k];
  }
}

}  // namespace

template <typename T>
void strided_copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                  T* dst, const index_t* dst_strides) {
  using Dim = CopyDim;
  std::vector<Dim> dims;
  if (!copy_dims(ndim, shape, src_strides, dst_strides, dims)) return;
  // A trailing axis contiguous in both arrays is copied as runs of `run` elements.
  index_t run = 1;
  if (!dims.empty() && dims.back().s == 1 && dims.back().d == 1) {
    run = dims.back().n;
    dims.pop_back();
  }
  if (dims.empty()) {
    copy_run(src, dst, run);
    return;
  }
  const int nd = int(dims.size());
  const int a = nd - 1;  // fastest for the destination
  int b = a;             // fastest for the source
  for (int i = 0; i < nd; ++i)
    if (std::llabs(dims[i].s) < std::llabs(dims[b].s)) b = i;
  const bool tiled = b != a && std::llabs(dims[b].s) == run;
  std::vector<Dim> outer;
  for (int i = 0; i < nd; ++i)
    if (i != a && !(tiled && i == b)) outer.push_back(dims[i]);
  const int no = int(outer.size());
  const Dim da = dims[a];
  const Dim db = tiled ? dims[b] : Dim{1, 0, 0};
  // tile so that one tile of both arrays stays in L1
  const index_t tile = std::max<index_t>(4, 64 / std::max<index_t>(1, run * index_t(sizeof(T)) / 4));
  std::vector<index_t> idx(no, 0);
  index_t so = 0, dof = 0;
  for (;;) {
    const T* s0 = src + so;
    T* d0 = dst + dof;
    if (!tiled) {
      for (index_t i = 0; i < da.n; ++i) copy_run(s0 + i * da.s, d0 + i * da.d, run);
    } else {
      for (index_t j0 = 0; j0 < db.n; j0 += tile) {
        const index_t j1 = std::min(db.n, j0 + tile);
        for (index_t i0 = 0; i0 < da.n; i0 += tile) {
          const index_t i1 = std::min(da.n, i0 + tile);
          for (index_t j = j0; j < j1; ++j) {
            const T* sp = s0 + j * db.s;
            T* dp = d0 + j * db.d;
            if (run == 1) {
              for (index_t i = i0; i < i1; ++i) dp[i * da.d] = sp[i * da.s];
            } else {
              for (index_t i = i0; i < i1; ++i) copy_run(sp + i * da.s, dp + i * da.d, run);
            }
          }
        }
      }
    }
    // odometer over the outer axes
    int k = no - 1;
    for (; k >= 0; --k) {
      so += outer[k].s;
      dof += outer[k].d;
      if (++idx[k] < outer[k].n) break;
      so -= outer[k].s * outer[k].n;
      dof -= outer[k].d * outer[k].n;
      idx[k] = 0;
    }
    if (k < 0) break;
  }
}

namespace {

template <typename T>
struct CpuBackend {
  const ModeCostModel& model() const { return cpu_cost_model(); }
  void start() {}
  void zero(T* dst, index_t n) { std::fill(dst, dst + n, T(0)); }
  unsigned char* scratch(std::size_t bytes) {
    unsigned char* base = t_workspace.get(bytes + kChainAlign);
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(base);
    return base + (kChainAlign - a % kChainAlign) % kChainAlign;
  }
  void copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides, T* dst,
            const index_t* dst_strides) {
    strided_copy<T>(ndim, shape, src, src_strides, dst, dst_strides);
  }
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, const T* a, index_t lda,
            index_t stride_a, const T* b, index_t ldb, index_t stride_b, T* c, index_t ldc,
            index_t stride_c, index_t batch) {
    for (index_t i = 0; i < batch; ++i)
      kronpe::gemm<T>(ta, tb, M, N, K, T(1), a + i * stride_a, lda, b + i * stride_b, ldb, T(0),
                      c + i * stride_c, ldc);
  }
};

}  // namespace

template <typename T>
void multi_mode_product(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                        int nmodes, const int* modes, const MatrixRef<T>* mats, T* dst,
                        int* out_order) {
  CpuBackend<T> backend;
  run_mode_chain<T>(backend, ndim, shape, src, src_strides, nmodes, modes, mats, dst, out_order);
  t_workspace.trim(kKeepWorkspace);
}

template void multi_mode_product<float>(int, const index_t*, const float*, const index_t*, int,
                                        const int*, const MatrixRef<float>*, float*, int*);
template void multi_mode_product<double>(int, const index_t*, const double*, const index_t*, int,
                                         const int*, const MatrixRef<double>*, double*, int*);
template void strided_copy<float>(int, const index_t*, const float*, const index_t*, float*,
                                  const index_t*);
template void strided_copy<double>(int, const index_t*, const double*, const index_t*, double*,
                                   const index_t*);

}  // namespace kronpe
