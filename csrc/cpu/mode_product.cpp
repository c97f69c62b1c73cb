// Mode-n products on the CPU: the shared executor (kronpe/mode_product_exec.h) with
// kronpe::chain_gemm (the packed AVX-512 or AVX2 GEMM, or the BLAS NumPy/SciPy loaded), a cache-blocked
// strided copy and a per-thread workspace.
#include "kronpe/mode_product.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <vector>
#include <cstring>
#include <memory>
#include <new>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "kronpe/blas.h"
#include "kronpe/mode_product_exec.h"
#include "kronpe/packed_gemm.h"
#include "kronpe/threads.h"

namespace kronpe {
namespace {

// ---- workspace -------------------------------------------------------------------------
// The scratch of a chain (work buffers, matrix copies), one per thread, kept between calls
// (released when very large). Large ones are asked for transparent huge pages (Linux): a chain
// step reads and writes tens of rows far apart, and 4 KiB pages cost a TLB miss per row.
struct Workspace {
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data;
  size_t bytes = 0;
  unsigned char* get(size_t need) {
    if (need > bytes) {
      data.reset();
      constexpr size_t kHuge = size_t(2) << 20;
      const bool huge = need >= 2 * kHuge;
      const size_t align = huge ? kHuge : 64;
      need = (need + align - 1) / align * align;
      data.reset(static_cast<unsigned char*>(std::aligned_alloc(align, need)));
      if (!data) throw std::bad_alloc();
#ifdef __linux__
      if (huge) madvise(data.get(), need, MADV_HUGEPAGE);  // a hint: failure changes nothing
#endif
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
// 64 MiB of work buffers, plus the alignment and matrix copies that come with them
constexpr size_t kKeepWorkspace = (size_t(64) << 20) + (size_t(4) << 20);

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

// Channels: C planes (plane stride `plane`) <-> n interleaved groups of C contiguous elements.
// With C a constant the compiler turns the grouped accesses into vector permutes: the copies
// that move a few channels to or from the front of a tensor run at memory speed.
template <int C, typename T>
KRONPE_CLONES void deinterleave(index_t n, const T* __restrict s, T* __restrict d, index_t plane) {
  constexpr index_t kBlock = 512;  // groups per block: a block of every plane stays in L1
  for (index_t i0 = 0; i0 < n; i0 += kBlock) {
    const index_t m = std::min(kBlock, n - i0);
    const T* __restrict sb = s + i0 * C;
    T* planes[C];
    for (int c = 0; c < C; ++c) planes[c] = d + c * plane + i0;
    for (index_t i = 0; i < m; ++i)
      for (int c = 0; c < C; ++c) planes[c][i] = sb[i * C + c];
  }
}

template <int C, typename T>
KRONPE_CLONES void interleave(index_t n, const T* __restrict s, index_t plane, T* __restrict d) {
  constexpr index_t kBlock = 512;
  for (index_t i0 = 0; i0 < n; i0 += kBlock) {
    const index_t m = std::min(kBlock, n - i0);
    T* __restrict db = d + i0 * C;
    const T* planes[C];
    for (int c = 0; c < C; ++c) planes[c] = s + c * plane + i0;
    for (index_t i = 0; i < m; ++i)
      for (int c = 0; c < C; ++c) db[i * C + c] = planes[c][i];
  }
}

// One (de-)interleaving copy of `c` channels (2..8) by a kernel with C = c; false for other c.
template <typename T>
bool channel_copy(bool to_planes, int c, index_t n, const T* s, T* d, index_t plane) {
  switch (c) {
#define KRONPE_CHANNELS(C)                                         \
  case C:                                                          \
    if (to_planes) deinterleave<C, T>(n, s, d, plane);             \
    else interleave<C, T>(n, s, plane, d);                         \
    return true;
    KRONPE_CHANNELS(2)
    KRONPE_CHANNELS(3)
    KRONPE_CHANNELS(4)
    KRONPE_CHANNELS(5)
    KRONPE_CHANNELS(6)
    KRONPE_CHANNELS(7)
    KRONPE_CHANNELS(8)
#undef KRONPE_CHANNELS
    default:
      return false;
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
  // a few channels gathered into planes (de-interleave: the source's fastest axis holds the
  // channels, packed tightly) or spread from planes (interleave: the destination's does)
  const bool planar = tiled && run == 1 && db.s == 1 && da.d == 1;
  const bool to_planes = planar && da.s == db.n && db.n <= 8;
  const bool from_planes = planar && !to_planes && db.d == da.n && da.n <= 8;
  const int channels = int(to_planes ? db.n : from_planes ? da.n : 0);
  // tile so that one tile of both arrays stays in L1
  const index_t tile = std::max<index_t>(4, 64 / std::max<index_t>(1, run * index_t(sizeof(T)) / 4));
  std::vector<index_t> idx(no, 0);
  index_t so = 0, dof = 0;
  for (;;) {
    const T* s0 = src + so;
    T* d0 = dst + dof;
    if (channels >= 2 &&
        channel_copy(to_planes, channels, to_planes ? da.n : db.n, s0, d0, to_planes ? db.d : da.s)) {
    } else if (!tiled) {
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

// ---- measured GEMM layouts -------------------------------------------------------------
// Which of the four GEMM layouts of a step is fastest depends on the machine, the BLAS and its
// kernels, and the shape (on the 2-core EPYC with OpenBLAS's Haswell kernels X A^T leads by 15%
// at 4096 x 64 and trails by 2x at 16384 x 128). So the CPU cost model asks this table: one
// short measurement per shape class (extents rounded to powers of two, float32 or float64), all
// four layouts timed interleaved, fastest of three rounds each, kept for the process. Plans are
// deterministic for a given table.
namespace {

struct LayoutEntry {
  std::array<int, 5> key;       // log2 buckets of m, k, rest; element size; packed GEMM or not
  std::array<double, 4> factor;  // FrontKeep, FrontRotate, BackKeep, BackRotate: time / best
};

std::mutex g_layout_mutex;
std::vector<LayoutEntry> g_layouts;
constexpr double kMeasureFlops = double(1 << 24);  // per timed GEMM: ~0.1-0.3 ms

int bucket(index_t x) {
  int b = 0;
  while ((index_t(1) << (b + 1)) <= x && b < 40) ++b;
  // round to the nearer power of two
  if (b < 40 && double(x) > 1.5 * double(index_t(1) << b)) ++b;
  return b;
}

template <typename T>
std::array<double, 4> measure_layouts(index_t m, index_t k, index_t rest) {
  m = std::min<index_t>(m, 2048);
  k = std::min<index_t>(k, 2048);
  rest = std::max<index_t>(1, std::min<index_t>(rest, index_t(kMeasureFlops / (2.0 * double(m) * double(k)))));
  std::vector<T> a(size_t(m * k), T(1) / T(k)), x(size_t(k * rest), T(0.5)), c(size_t(m * rest));
  const T* A = a.data();
  const T* X = x.data();
  T* C = c.data();
  auto run = [&](int layout) {
    switch (layout) {
      case 0: chain_gemm<T>(false, false, m, rest, k, A, k, X, rest, C, rest); break;  // A X
      case 1: chain_gemm<T>(true, true, rest, m, k, X, rest, A, k, C, m); break;  // X^T A^T
      case 2: chain_gemm<T>(false, true, rest, m, k, X, k, A, k, C, m); break;  // X A^T
      default: chain_gemm<T>(false, true, m, rest, k, A, k, X, k, C, rest); break;  // A X^T
    }
  };
  std::array<double, 4> best;
  best.fill(std::numeric_limits<double>::infinity());
  for (int l = 0; l < 4; ++l) run(l);  // warm-up
  for (int round = 0; round < 3; ++round)
    for (int l = 0; l < 4; ++l) {
      const auto t0 = std::chrono::steady_clock::now();
      run(l);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[l] = std::min(best[l], dt);
    }
  const double fastest = std::max(*std::min_element(best.begin(), best.end()), 1e-9);
  for (double& b : best) b = std::max(1.0, b / fastest);
  return best;
}

double measured_factor(StepKind kind, index_t m, index_t k, index_t rest, int elem_size) {
  const std::array<int, 5> key = {bucket(m), bucket(k), bucket(rest), elem_size,
                                  int(chain_uses_packed_gemm())};
  const int layout = kind == StepKind::Batched ? 0 : int(kind);
  std::lock_guard<std::mutex> lock(g_layout_mutex);
  for (const LayoutEntry& e : g_layouts)
    if (e.key == key) return e.factor[size_t(layout)];
  LayoutEntry e{key, elem_size == 4 ? measure_layouts<float>(m, k, rest)
                                    : measure_layouts<double>(m, k, rest)};
  g_layouts.push_back(e);
  return e.factor[size_t(layout)];
}

}  // namespace

const ModeCostModel& chain_cost_model() {
  return chain_uses_packed_gemm() ? packed_cpu_cost_model(packed_gemm_isa() == 1) : cpu_cost_model();
}

void set_mode_layout_measured(bool on) {
  set_mode_layout_factor(on ? &measured_factor : nullptr);
}

std::vector<std::array<double, 8>> mode_layout_table() {
  std::lock_guard<std::mutex> lock(g_layout_mutex);
  std::vector<std::array<double, 8>> out;
  for (const LayoutEntry& e : g_layouts)
    out.push_back({double(index_t(1) << e.key[0]), double(index_t(1) << e.key[1]),
                   double(index_t(1) << e.key[2]), double(e.key[3]), e.factor[0], e.factor[1],
                   e.factor[2], e.factor[3]});
  return out;
}

void clear_mode_layout_table() {
  {
    std::lock_guard<std::mutex> lock(g_layout_mutex);
    g_layouts.clear();
  }
  if (cpu_cost_model().layout_factor) set_mode_layout_factor(&measured_factor);  // replan
}

namespace {

// One team for a whole chain of small steps. A step below 2 kPackedFlopsPerThread runs on one
// thread (packed_gemm_impl: a team per step costs more than it saves there), so a chain of such
// steps ran on one core: D = 3 32 -> 32, three steps of 2.1 MFLOP, 69 us in a loop (~90 GFLOP/s,
// 43% of the two-core GEMM rate), 79-82 us in `kronpe bench` (timed after its settle). A chain of
// at least kTeamChainFlops whose steps are all that small runs every step on one team instead,
// each thread on its share of every step's rows, columns or batches, with a barrier between
// steps: one fork and join for the chain (a team per step took it 65 us by median in a loop, and
// 134 us on the second call after a pause). That chain: 44-48 us in a loop, 56-61 us in the bench
// (three runs alternating with one thread's; benches/README.md). Each element of C gets the same
// operations as on one thread, so the bits do not depend on the thread count.
constexpr double kTeamChainFlops = 4e6;

template <typename T>
struct CpuBackend {
  int part = 0, parts = 1;  // in a team: this thread's share of every step (part of parts)

  const ModeCostModel& model() const { return chain_cost_model(); }
  void start() {}
  void zero(T* dst, index_t n) { std::fill(dst, dst + n, T(0)); }
  unsigned char* scratch(std::size_t bytes) {
    unsigned char* base = t_workspace.get(bytes + kChainAlign);
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(base);
    return base + (kChainAlign - a % kChainAlign) % kChainAlign;
  }
  void copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides, T* dst,
            const index_t* dst_strides) {
    if (part == 0) strided_copy<T>(ndim, shape, src, src_strides, dst, dst_strides);
  }
  // [lo, hi) of n for this part, the cuts on multiples of `align`
  void share(index_t n, index_t align, index_t& lo, index_t& hi) const {
    const index_t units = (n + align - 1) / align;
    lo = std::min(n, units * part / parts * align);
    hi = std::min(n, units * (part + 1) / parts * align);
  }
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, const T* a, index_t lda,
            index_t stride_a, const T* b, index_t ldb, index_t stride_b, T* c, index_t ldc,
            index_t stride_c, index_t batch) {
    if (parts == 1) {
      for (index_t i = 0; i < batch; ++i)
        chain_gemm<T>(ta, tb, M, N, K, a + i * stride_a, lda, b + i * stride_b, ldb,
                      c + i * stride_c, ldc);
      return;
    }
    index_t lo, hi;
    if (batch >= 2 * parts) {  // whole products of the batch
      share(batch, 1, lo, hi);
      for (index_t i = lo; i < hi; ++i)
        packed_gemm<T>(ta, tb, M, N, K, a + i * stride_a, lda, b + i * stride_b, ldb,
                       c + i * stride_c, ldc, 1);
      return;
    }
    // rows of C (and of op(A)), or columns (of op(B)) where C is wider than tall; whole slivers
    const bool rows = M >= N;
    share(rows ? M : N, 48, lo, hi);
    if (lo >= hi) return;
    for (index_t i = 0; i < batch; ++i) {
      const T* ai = a + i * stride_a;
      const T* bi = b + i * stride_b;
      T* ci = c + i * stride_c;
      if (rows)
        packed_gemm<T>(ta, tb, hi - lo, N, K, ai + (ta ? lo : lo * lda), lda, bi, ldb, ci + lo * ldc,
                       ldc, 1);
      else
        packed_gemm<T>(ta, tb, M, hi - lo, K, ai, lda, bi + (tb ? lo * ldb : lo), ldb, ci + lo, ldc,
                       1);
    }
  }
  // The threads of a chain's team (module comment above kTeamChainFlops): 1 unless the packed
  // GEMM runs every step and every step is too small for a team of its own.
  static int team_threads(const ChainProgram& prog) {
    if (!chain_uses_packed_gemm()) return 1;
    double total = 0.0, largest = 0.0;
    for (const ChainOp& op : prog.ops) {
      if (op.kind != ChainOp::gemm) continue;
      const double f = 2.0 * double(op.M) * double(op.N) * double(op.K);
      largest = std::max(largest, f);
      total += f * double(op.batch);
    }
    if (total < kTeamChainFlops || largest >= 2 * kPackedFlopsPerThread) return 1;
    return int(std::min<double>(kernel_threads(), std::floor(total / (kTeamChainFlops / 2))));
  }
  template <typename F>
  void run_ops(const ChainProgram& prog, F&& step) {
    const int nt = team_threads(prog);
    if (nt <= 1) {
      for (const ChainOp& op : prog.ops) step(*this, op);
      return;
    }
    run_team(nt, [&](int t, int count) {
      CpuBackend<T> mine{t, count};
      const std::size_t last = prog.ops.size() - 1;
      for (std::size_t i = 0; i <= last; ++i) {
        step(mine, prog.ops[i]);
        if (i == last) break;  // the region's end joins the team
#ifdef KRONPE_OPENMP
#pragma omp barrier
#endif
      }
    });
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
