// kronpe C++ core: the blending matrix's products on the CPU (kronpe/blend.h) in its three
// storage forms (on the fly, factors, stored rows): the gathers B v, the deterministic scatters
// B^T r slab by slab, their kernels for dense rows, and the stored and factored forms' builds.
// The weight function is in blend_search.cpp, the plans in blend_plan.cpp.
#include "kronpe/blend.h"

#include "blend_internal.h"
#include "kronpe/avx512.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

// The weight loops are KRONPE_CLONES (kronpe/common.h); CMakeLists.txt turns floating-point
// contraction off for this file, so that every clone gives the bits of the baseline one.

namespace kronpe::blend {

using detail::bad_index;
using detail::pick_threads;
using detail::resolve_threads;
using detail::wrapping_add;

namespace {

// A (rows, cols) matrix whose element (r, c) lies at data[r * cols + c].
template <typename M>
bool packed(const M& m) {
  return (m.cols <= 1 || m.stride_c == 1) && (m.rows <= 1 || m.stride_r == m.cols);
}

// Runs body(s, e, n) over the positions [e, e + n) of the plan, slab by slab in two phases (even
// slabs, then odd slabs), each slab in blocks of at most kBlock positions. First, `out` is zeroed:
// an even slab s zeroes the rows [s L, (s + 2) L) that only it writes in the first phase, just
// before it adds to them (the rows are then in cache; the even slabs' ranges cover the grid).
template <typename T, typename Body>
void for_slabs(TransposeLayout lay, const index_t* ptr, int threads, MatrixView<T> out,
               Body body) {
  const int nt = resolve_threads(threads);
  for (index_t phase = 0; phase < 2; ++phase) {
    const index_t count = (lay.slabs - phase + 1) / 2;
    const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
    {
      clock.started();
#pragma omp for schedule(dynamic, 1) nowait
      for (index_t k = 0; k < count; ++k) {
        const index_t s = phase + 2 * k;
        if (phase == 0) {
          const index_t r1 = std::min(out.rows, (s + 2) * lay.slab);
          if (packed(out))
            std::fill(out.data + s * lay.slab * out.cols, out.data + r1 * out.cols, T(0));
          else
            for (index_t r = s * lay.slab; r < r1; ++r)
              for (index_t c = 0; c < out.cols; ++c) out(r, c) = T(0);
        }
        for (index_t e = ptr[s]; e < ptr[s + 1]; e += kBlock)
          body(s, e, std::min(kBlock, ptr[s + 1] - e));
      }
      clock.finished();
    }
  }
}

// out(row(k), c) += weight(k) * values(p, c) for the nnz entries of point p: channel by channel
// (a node's contributions still arrive in point order), the value converted once.
template <typename T, typename Row, typename Weight>
inline void scatter_point(const MatrixView<T>& out, const MatrixView<const T>& values, index_t p,
                          index_t nnz, Row row, Weight weight) {
  for (index_t c = 0; c < out.cols; ++c) {
    const double v = double(values(p, c));
    for (index_t k = 0; k < nnz; ++k) out(row(k), c) += T(weight(k) * v);
  }
}

// Fetches the rows rows[e], e in [from, min(from + kBlock, P)), of m ahead of their use: in plan
// order the values at the points (the P side of a transpose) lie anywhere in memory.
template <typename T>
inline void fetch_rows(const MatrixView<T>& m, const index_t* rows, index_t from, index_t P) {
  for (index_t e = from; e < std::min(from + kBlock, P); ++e) __builtin_prefetch(&m(rows[e], 0));
}
// ---- the packed path: grid values, results and stored rows as dense row-major arrays ----------
//
// The common case (every BlendingMatrix product): C channels of a grid node or a point lie next
// to each other, rows follow each other, and a point has 2, 4 or 8 corners. The kernels below are
// compiled for each corner count and for 1-4 channels (any count otherwise), so that the corner
// and channel loops unroll; they sum in the order of the generic loops (same bits).

// Bytes ahead of a point's last corner that the packed kernels fetch. In plan order the last
// corner (the largest index) never decreases and is the only one not visited a grid row or a
// grid plane earlier: its stream is where the misses are (the others hit the caches), and it runs
// through the grid's memory in order, rows and planes included.
constexpr index_t kAheadBytes = 1024;
// Points ahead whose row on the P side (through rows: anywhere in memory) the kernels fetch.
constexpr index_t kAheadRows = 16;

// Whether one of a point's NC indices ib lies outside [lo, lo + width): the stored kernels check
// each point before they touch its rows (the index loads then overlap the work on the points
// before, where a separate pass over the block waited on their misses).
template <int NC>
inline bool outside_row(const index_t* ib, index_t lo, std::uint64_t width) {
  std::uint64_t top = 0;  // the largest idx - lo, those below lo wrapped around to the top
  for (int k = 0; k < NC; ++k)
    top = std::max(top, static_cast<std::uint64_t>(ib[k]) - static_cast<std::uint64_t>(lo));
  return top >= width;
}

// Where the packed kernels find a point's NC grid rows ib[k] and weights wb[k] (row<NC>(b)), and
// whether one of its rows lies outside [lo, lo + width) (outside<NC>(b, row, lo, width)):
// stored rows: point b's rows idx[b * NC + k] with the weights w[b * NC + k], read in place;
struct StoredRows {
  const index_t* idx;
  const double* w;
  struct Row {
    const index_t* ib;
    const double* wb;
  };
  template <int NC>
  Row row(index_t b) const {
    return {idx + b * NC, w + b * NC};
  }
  template <int NC>
  bool outside(index_t, const Row& r, index_t lo, std::uint64_t width) const {
    return outside_row<NC>(r.ib, lo, width);
  }
};
// factors (compute_factors, packed): point b's rows base[b] + off[c], its weights the products
// of its D = log2(NC) pairs (pairs + 2 D b) formed as corners<D> forms them (the same bits); a
// point's rows lie in [base, base + span].
struct FactorRows {
  const index_t* base;
  const double* pairs;
  index_t off[8];  // the corners' offsets, by value: the kernels keep them in registers
  index_t span;
  FactorRows(const index_t* b, const double* p, const index_t* offsets, int corners, index_t s)
      : base(b), pairs(p), off{}, span(s) {
    for (int c = 0; c < corners && c < 8; ++c) off[c] = offsets[c];
  }
  template <int NC>
  struct Row {
    index_t ib[NC];
    double wb[NC];
  };
  template <int NC>
  Row<NC> row(index_t b) const {
    constexpr int D = NC == 2 ? 1 : (NC == 4 ? 2 : 3);
    static_assert(NC == 1 << D, "FactorRows: 2, 4 or 8 corners");
    Row<NC> r;
    const index_t bi = base[b];
    for (int c = 0; c < NC; ++c) r.ib[c] = wrapping_add(bi, off[c]);  // checked by outside()
    const double* p = pairs + 2 * D * b;
    if constexpr (D == 1) {
      r.wb[0] = p[0];
      r.wb[1] = p[1];
    } else {
      double xy[4];  // corner 2 bx + by of the first two axes: x_bx * y_by
      for (int k = 0; k < 4; ++k) xy[k] = p[k >> 1] * p[2 + (k & 1)];
      if constexpr (D == 2) {
        for (int k = 0; k < 4; ++k) r.wb[k] = xy[k];
      } else {
        for (int k = 0; k < 4; ++k) {
          r.wb[2 * k] = xy[k] * p[4];
          r.wb[2 * k + 1] = xy[k] * p[5];
        }
      }
    }
    return r;
  }
  template <int NC>
  bool outside(index_t b, const Row<NC>&, index_t lo, std::uint64_t width) const {
    // base - lo in [0, width - span): the rows base .. base + span in [lo, lo + width)
    const std::uint64_t rel = static_cast<std::uint64_t>(base[b]) - static_cast<std::uint64_t>(lo);
    return rel >= width || width - rel <= static_cast<std::uint64_t>(span);
  }
};

// n points, rows and weights from src (StoredRows, FactorRows); point b's result goes to row
// rows[b] of out (row b without rows; rows[n, n + ahead) may be read, to fetch them ahead). Each
// channel sums in double, corner 0 first. With Check, false at the first point with a row outside
// [lo, hi) (src.outside), before its rows are read.
// The fetch ahead follows corner NC - 1 (a BlendingMatrix's largest; other orders only lose it).
template <typename T, int NC, int CC, bool Check, typename Src>
KRONPE_CLONES bool gather_packed(const T* grid, index_t C, Src src, index_t n, T* out,
                                 const index_t* rows, index_t ahead, index_t lo, index_t hi) {
  const index_t ch = CC > 0 ? index_t(CC) : C;
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(out + rows[b + kAheadRows] * ch, 1);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, std::uint64_t(hi - lo))) return false;
    const T* g[NC];
    for (int k = 0; k < NC; ++k) g[k] = grid + ib[k] * ch;
    __builtin_prefetch(reinterpret_cast<const char*>(g[NC - 1]) + kAheadBytes);
    T* o = out + (rows ? rows[b] : b) * ch;
    if constexpr (CC > 0) {
      double acc[CC];
      for (int c = 0; c < CC; ++c) acc[c] = 0.0;
      for (int k = 0; k < NC; ++k)
        for (int c = 0; c < CC; ++c) acc[c] += wb[k] * double(g[k][c]);
      for (int c = 0; c < CC; ++c) o[c] = T(acc[c]);
    } else {
      for (index_t c = 0; c < ch; ++c) {
        double acc = 0.0;
        for (int k = 0; k < NC; ++k) acc += wb[k] * double(g[k][c]);
        o[c] = T(acc);
      }
    }
  }
  return true;
}

// The transpose of gather_packed: grid row ib[k] += wb[k] * values row rows[b] (row b without
// rows; rows[n, n + ahead) may be read), point after point, each product rounded to T before it
// is added. With Check, false at the first point with a row outside [lo, hi), before it writes.
template <typename T, int NC, int CC, bool Check, typename Src>
KRONPE_CLONES bool scatter_packed(T* grid, index_t C, Src src, index_t n, const T* values,
                                  const index_t* rows, index_t ahead, index_t lo, index_t hi) {
  const index_t ch = CC > 0 ? index_t(CC) : C;
  const std::uint64_t width = static_cast<std::uint64_t>(hi - lo);
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(values + rows[b + kAheadRows] * ch);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, width)) return false;
    T* g[NC];
    for (int k = 0; k < NC; ++k) g[k] = grid + ib[k] * ch;
    __builtin_prefetch(reinterpret_cast<const char*>(g[NC - 1]) + kAheadBytes, 1);
    const T* v = values + (rows ? rows[b] : b) * ch;
    for (index_t c = 0; c < ch; ++c) {
      const double vc = double(v[c]);
      for (int k = 0; k < NC; ++k) g[k][c] += T(wb[k] * vc);
    }
  }
  return true;
}

#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx512f,avx512dq,avx512vl")
// gather_packed for 2-4 channels with AVX-512: a grid row's channels are the lanes of one vector
// (masked loads and stores: nothing beyond the row is touched), so a corner costs a load, a
// conversion and a multiply-add instead of one of each per channel. Per channel, the same
// operations in the same order (same bits). (The transpose's version was 2x slower: neighbouring
// points add to the same nodes, and a masked store does not forward to the next masked load.)
template <typename T, int CC>
inline __m256d load_row(const T* p) {
  constexpr __mmask8 m = __mmask8((1u << CC) - 1u);
  if constexpr (std::is_same_v<T, float>) return _mm256_cvtps_pd(_mm_maskz_loadu_ps(m, p));
  else return _mm256_maskz_loadu_pd(m, p);
}
template <typename T, int CC>
inline void store_row(T* p, __m256d v) {
  constexpr __mmask8 m = __mmask8((1u << CC) - 1u);
  if constexpr (std::is_same_v<T, float>) _mm_mask_storeu_ps(p, m, _mm256_cvtpd_ps(v));
  else _mm256_mask_storeu_pd(p, m, v);
}

template <typename T, int NC, int CC, bool Check, typename Src>
bool gather_rows_avx512(const T* grid, index_t, Src src, index_t n, T* out, const index_t* rows,
                        index_t ahead, index_t lo, index_t hi) {
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(out + rows[b + kAheadRows] * CC, 1);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, std::uint64_t(hi - lo))) return false;
    __builtin_prefetch(reinterpret_cast<const char*>(grid + ib[NC - 1] * CC) + kAheadBytes);
    __m256d acc = _mm256_setzero_pd();
    for (int k = 0; k < NC; ++k)
      acc = _mm256_add_pd(acc, _mm256_mul_pd(_mm256_set1_pd(wb[k]), load_row<T, CC>(grid + ib[k] * CC)));
    store_row<T, CC>(out + (rows ? rows[b] : b) * CC, acc);
  }
  return true;
}

KRONPE_AVX512_END
#endif

template <typename T, typename Src>
using GatherFn = bool (*)(const T*, index_t, Src, index_t, T*, const index_t*, index_t, index_t,
                          index_t);
template <typename T, typename Src>
using ScatterFn = bool (*)(T*, index_t, Src, index_t, const T*, const index_t*, index_t, index_t,
                           index_t);

// Calls f(NC, CC) (std::integral_constant) for nc corners and C channels; false when nc has no
// compiled kernel (then the generic loops run).
template <typename F>
bool with_sizes(index_t nc, index_t C, F&& f) {
  auto channels = [&](auto NC) {
    switch (C) {
      case 1: f(NC, std::integral_constant<int, 1>{}); break;
      case 2: f(NC, std::integral_constant<int, 2>{}); break;
      case 3: f(NC, std::integral_constant<int, 3>{}); break;
      case 4: f(NC, std::integral_constant<int, 4>{}); break;
      default: f(NC, std::integral_constant<int, 0>{}); break;
    }
    return true;
  };
  switch (nc) {
    case 2: return channels(std::integral_constant<int, 2>{});
    case 4: return channels(std::integral_constant<int, 4>{});
    case 8: return channels(std::integral_constant<int, 8>{});
    default: return false;
  }
}

// The packed kernels for nc corners and C channels, or null.
// (check: the kernels that check every point's indices)
template <typename T, typename Src>
GatherFn<T, Src> gather_kernel(index_t nc, index_t C, bool check) {
  GatherFn<T, Src> f = nullptr;
  with_sizes(nc, C, [&](auto NC, auto CC) {
    f = check ? &gather_packed<T, NC(), CC(), true, Src> : &gather_packed<T, NC(), CC(), false, Src>;
#if KRONPE_AVX512
    if constexpr (CC() >= 2)
      if (detail::simd_path() >= 2)
        f = check ? &gather_rows_avx512<T, NC(), CC(), true, Src>
                  : &gather_rows_avx512<T, NC(), CC(), false, Src>;
#endif
  });
  return f;
}
template <typename T, typename Src>
ScatterFn<T, Src> scatter_kernel(index_t nc, index_t C, bool check) {
  ScatterFn<T, Src> f = nullptr;
  with_sizes(nc, C, [&](auto NC, auto CC) {
    f = check ? &scatter_packed<T, NC(), CC(), true, Src>
              : &scatter_packed<T, NC(), CC(), false, Src>;
  });
  return f;
}

// Scratch of one thread: the bases and corner weights of a block of points.
struct BlockScratch {
  explicit BlockScratch(index_t corners)
      : base(static_cast<size_t>(kBlock)), w(static_cast<size_t>(kBlock * corners)),
        idx(static_cast<size_t>(kBlock * corners)) {}
  std::vector<index_t> base;
  std::vector<double> w;
  std::vector<index_t> idx;  // the packed kernels' grid rows (n, corners)
};

// Runs fill(p0, n, base, w, idx) then body(p0, n, base, w, idx) for every block of kBlock
// consecutive positions [p0, p0 + n) of [0, P), in parallel: fill gives the block's bases, corner
// weights and corner indices (from the points, or from factors). Blocks are handed out
// dynamically (on a shared machine a thread that loses its core does not hold the others up);
// the results never depend on who computes a point.
template <typename Fill, typename Body>
void for_blocks(index_t nc, index_t P, int threads, Fill fill, Body body) {
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  const int nt = resolve_threads(threads);
  const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
  {
    clock.started();
    BlockScratch sc(nc);
#pragma omp for schedule(dynamic, 16) nowait
    for (index_t blk = 0; blk < nblocks; ++blk) {
      const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
      fill(p0, n, sc.base.data(), sc.w.data(), sc.idx.data());
      body(p0, n, sc.base.data(), sc.w.data(), sc.idx.data());
    }
    clock.finished();
  }
}

// Whether corner indices base + [0, span] of n bases lie in [lo, hi).
inline bool bases_outside(const index_t* base, index_t n, index_t span, index_t lo, index_t hi) {
  bool out = false;
  for (index_t b = 0; b < n; ++b) out |= base[b] < lo || base[b] > hi - 1 - span;
  return out;
}

// out (P, C) = B grid: the blocks' weights from fill(p, rows_or_null, start, n, base, w, idx)
// (block positions [start, start + n)), point p0 + b of them giving row rows[p0 + b] of out (row
// p0 + b without rows). With check, every corner must lie in [0, G) (else false).
template <typename T, typename Fill>
bool gather_blocks(const WeightFunction& wf, index_t P, Fill fill, MatrixView<const T> grid,
                   MatrixView<T> out, int threads, const index_t* rows, bool check) {
  const index_t C = grid.cols, nc = wf.corners(), G = grid.rows, span = wf.span();
  const index_t* off = wf.corner_offsets().data();
  const GatherFn<T, StoredRows> fast =
      packed(grid) && packed(out) ? gather_kernel<T, StoredRows>(nc, C, check) : nullptr;
  int bad = 0;
  for_blocks(nc, P, threads, fill, [&](index_t p0, index_t n, const index_t* base,
                                       const double* w, const index_t* idx) {
    if (check && !fast && bases_outside(base, n, span, 0, G)) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    // points in their own order (a first product; factors come in a plan's order): their
    // corners lie anywhere, fetch them ahead
    if (!rows && !check)
      for (index_t b = 0; b < n * nc; ++b) __builtin_prefetch(&grid(idx[b], 0));
    if (fast) {
      if (!fast(grid.data, C, StoredRows{idx, w}, n, rows ? out.data : out.data + p0 * C,
                rows ? rows + p0 : nullptr, P - p0 - n, 0, G)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const double* wb = w + b * nc;
      const index_t p = rows ? rows[p0 + b] : p0 + b;
      for (index_t c = 0; c < C; ++c) {
        double acc = 0.0;
        for (index_t k = 0; k < nc; ++k) acc += wb[k] * double(grid(base[b] + off[k], c));
        out(p, c) = T(acc);
      }
    }
  });
  return !bad;
}

// out (G, C) = B^T values: the plan's positions [e, e + n) get their weights from
// fill(rows_or_null, e, n, base, w, idx) (rows: perm + e unless sorted), their values from the
// rows perm[e + b] of values. With check, every corner must lie in its slab's range (else false).
template <typename T, typename Fill>
bool scatter_blocks(const WeightFunction& wf, index_t P, Fill fill, MatrixView<const T> values,
                    MatrixView<T> out, int threads, TransposeLayout lay, const index_t* perm,
                    const index_t* ptr, bool sorted, bool check) {
  const index_t C = values.cols, nc = wf.corners(), G = out.rows, span = wf.span();
  const index_t* off = wf.corner_offsets().data();
  const int nt = resolve_threads(threads);
  // per-thread scratch, indexed by the OpenMP thread number
  std::vector<BlockScratch> scratch(static_cast<size_t>(nt), BlockScratch(nc));
  const ScatterFn<T, StoredRows> fast =
      packed(values) && packed(out) ? scatter_kernel<T, StoredRows>(nc, C, check) : nullptr;
  int bad = 0;
  for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
    if (!fast) fetch_rows(values, perm, e + kBlock, P);  // the next block's
#ifdef KRONPE_OPENMP
    BlockScratch& sc = scratch[size_t(omp_get_thread_num())];
#else
    BlockScratch& sc = scratch[0];
#endif
    fill(sorted ? nullptr : perm + e, e, n, sc.base.data(), sc.w.data(),
         fast ? sc.idx.data() : nullptr);
    const index_t lo = s * lay.slab, hi = std::min(G, (s + 2) * lay.slab);
    if (fast) {
      if (!fast(out.data, C, StoredRows{sc.idx.data(), sc.w.data()}, n, values.data, perm + e,
                P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    if (check && bases_outside(sc.base.data(), n, span, lo, hi)) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const index_t base = sc.base[size_t(b)];
      const double* wb = sc.w.data() + b * nc;
      scatter_point(out, values, perm[e + b], nc, [&](index_t k) { return base + off[k]; },
                    [&](index_t k) { return wb[k]; });
    }
  });
  return !bad;
}

// out (P, C) = B grid with a packed kernel: the block [p0, p0 + n) of rows from src_at(p0), its
// results to rows rows[p0 + b] of out (p0 + b without rows). False when a row lies outside [0, G).
template <typename T, typename Src, typename SrcAt>
bool gather_rows_parallel(GatherFn<T, Src> fast, SrcAt src_at, index_t P, int threads,
                          const T* grid, index_t C, index_t G, T* out, const index_t* rows) {
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  int bad = 0;
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(dynamic, 16) \
    reduction(| : bad)
  for (index_t blk = 0; blk < nblocks; ++blk) {
    const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
    if (!fast(grid, C, src_at(p0), n, rows ? out : out + p0 * C, rows ? rows + p0 : nullptr,
              P - p0 - n, 0, G))
      bad = 1;
  }
  return !bad;
}

// The transpose's plan: the given one, or one computed into own_perm / own_ptr by plan(perm, ptr).
template <typename Plan>
void transpose_plan(index_t P, TransposeLayout lay, const index_t*& perm, const index_t*& ptr,
                    bool sorted, std::vector<index_t>& own_perm, std::vector<index_t>& own_ptr,
                    Plan plan) {
  if (perm != nullptr && ptr != nullptr) {  // the slabs' offsets must cut [0, P) in order
    bool ok = ptr[0] == 0 && ptr[lay.slabs] == P;
    for (index_t s = 0; s < lay.slabs; ++s) ok &= ptr[s] <= ptr[s + 1];
    require(ok, "blend_transpose: the plan's slab offsets must rise from 0 to the point count");
    return;
  }
  require(!sorted, "blend_transpose: points in plan order need their plan");
  own_perm.resize(size_t(P));
  own_ptr.resize(size_t(lay.slabs + 1));
  plan(own_perm.data(), own_ptr.data());
  perm = own_perm.data();
  ptr = own_ptr.data();
}

void require_factors(const WeightFunction& wf, const MatrixView<const index_t>& base,
                     const MatrixView<const double>& pairs, const char* what) {
  require_shape(base.rows, base.cols, what, pairs.rows, 1);
  require_shape(pairs.rows, pairs.cols, what, base.rows, 2 * index_t(wf.dims()));
}
}  // namespace

template <typename Q>
void compute_weights(const WeightFunction& wf, MatrixView<const Q> points,
                     MatrixView<index_t> indices, MatrixView<double> weights, int threads) {
  const index_t P = points.rows, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(indices.rows, indices.cols, "blend: indices", P, nc);
  require_shape(weights.rows, weights.cols, "blend: weights", P, nc);
  for_blocks(
      nc, P, threads,
      [&](index_t p0, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, nullptr, p0, n, base, w, idx);
      },
      [&](index_t p0, index_t n, const index_t*, const double* w, const index_t* idx) {
        for (index_t b = 0; b < n; ++b)
          for (index_t k = 0; k < nc; ++k) {
            indices(p0 + b, k) = idx[b * nc + k];
            weights(p0 + b, k) = w[b * nc + k];
          }
      });
}

template <typename Q>
void compute_factors(const WeightFunction& wf, MatrixView<const Q> points, const index_t* rows,
                     MatrixView<index_t> base, MatrixView<double> pairs, int threads) {
  const index_t P = points.rows;
  const int D = wf.dims();
  threads = pick_threads(threads, saturating_mul(P, 4 * index_t(D)));
  require(points.cols == D, "blend: points must have one column per grid axis");
  require_shape(base.rows, base.cols, "blend: factor bases", P, 1);
  require_shape(pairs.rows, pairs.cols, "blend: factor pairs", P, 2 * index_t(D));
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  const int nt = resolve_threads(threads);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
  for (index_t blk = 0; blk < nblocks; ++blk) {
    const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
    index_t j[kBlock];
    double a0[kBlock], a1[kBlock];
    for (index_t b = 0; b < n; ++b) base(p0 + b, 0) = 0;
    for (int i = 0; i < D; ++i) {
      wf.axis_block<Q>(i, points, rows ? rows + p0 : nullptr, p0, n, j, a0, a1);
      const index_t st = wf.strides()[size_t(i)];
      for (index_t b = 0; b < n; ++b) {
        base(p0 + b, 0) += j[b] * st;
        pairs(p0 + b, 2 * i) = a0[b];
        pairs(p0 + b, 2 * i + 1) = a1[b];
      }
    }
  }
}

template <typename T, typename Q>
void blend_fly(const WeightFunction& wf, MatrixView<const Q> points, MatrixView<const T> grid,
               MatrixView<T> out, int threads, const index_t* rows) {
  const index_t P = points.rows, C = grid.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  gather_blocks<T>(
      wf, P,
      [&](index_t p0, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, nullptr, p0, n, base, w, idx);
      },
      grid, out, threads, rows, false);
}

template <typename T>
void blend_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                    MatrixView<const double> pairs, MatrixView<const T> grid, MatrixView<T> out,
                    int threads, const index_t* rows) {
  const index_t P = base.rows, C = grid.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + 1));
  require_factors(wf, base, pairs, "blend: factors");
  require_shape(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  const GatherFn<T, FactorRows> fused =
      packed(base) && packed(pairs) && packed(grid) && packed(out)
          ? gather_kernel<T, FactorRows>(nc, C, true)
          : nullptr;
  if (fused) {  // the corner weights formed in registers, nothing written between
    const index_t D2 = 2 * index_t(wf.dims()), span = wf.span();
    const index_t* off = wf.corner_offsets().data();
    const auto at = [&](index_t p0) {
      return FactorRows(base.data + p0, pairs.data + p0 * D2, off, int(nc), span);
    };
    require(gather_rows_parallel<T, FactorRows>(fused, at, P, threads, grid.data, C,
                                                wf.grid_size(), out.data, rows),
            "blend: a factor's corner lies outside the grid");
    return;
  }
  const bool ok = gather_blocks<T>(
      wf, P,
      [&](index_t p0, index_t n, index_t* b, double* w, index_t* idx) {
        wf.block_factored(base, pairs, nullptr, p0, n, b, w, idx);
      },
      grid, out, threads, rows, true);
  require(ok, "blend: a factor's corner lies outside the grid");
}

template <typename T, typename Q>
void blend_transpose_fly(const WeightFunction& wf, MatrixView<const Q> points,
                         MatrixView<const T> values, MatrixView<T> out, int threads,
                         const index_t* perm, const index_t* ptr, bool sorted) {
  const index_t P = points.rows, C = values.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require_shape(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  const TransposeLayout lay = transpose_layout(wf.grid_size(), wf.span());
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr,
                 [&](index_t* pp, index_t* sp) { plan_fly(wf, points, lay, pp, sp, threads); });
  scatter_blocks<T>(
      wf, P,
      [&](const index_t* rows, index_t e, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, rows, e, n, base, w, idx);
      },
      values, out, threads, lay, perm, ptr, sorted, false);
}

template <typename T>
void blend_transpose_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                              MatrixView<const double> pairs, MatrixView<const T> values,
                              MatrixView<T> out, int threads, const index_t* perm,
                              const index_t* ptr, bool sorted) {
  const index_t P = base.rows, C = values.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + 1));
  require_factors(wf, base, pairs, "blend_transpose: factors");
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require_shape(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  const TransposeLayout lay = transpose_layout(wf.grid_size(), wf.span());
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr, [&](index_t* pp, index_t* sp) {
    detail::plan_bases(base, lay, pp, sp, pick_threads(threads, P));
  });
  const ScatterFn<T, FactorRows> fused =
      sorted && packed(base) && packed(pairs) && packed(values) && packed(out)
          ? scatter_kernel<T, FactorRows>(nc, C, true)
          : nullptr;
  bool ok = true;
  if (fused) {  // factors in plan order: read as streams, the corner weights in registers
    const index_t D2 = 2 * index_t(wf.dims()), span = wf.span(), G = out.rows;
    const index_t* off = wf.corner_offsets().data();
    int bad = 0;
    for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
      const index_t lo = s * lay.slab, hi = std::min(G, (s + 2) * lay.slab);
      if (!fused(out.data, C, FactorRows(base.data + e, pairs.data + e * D2, off, int(nc), span), n,
                 values.data, perm + e, P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
    });
    ok = !bad;
  } else {
    ok = scatter_blocks<T>(
        wf, P,
        [&](const index_t* rows, index_t e, index_t n, index_t* b, double* w, index_t* idx) {
          wf.block_factored(base, pairs, rows, e, n, b, w, idx);
        },
        values, out, threads, lay, perm, ptr, sorted, true);
  }
  require(ok, "blend_transpose: a factor's corner lies outside the grid or its slab");
}

template <typename T>
void blend_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                  MatrixView<const T> grid, MatrixView<T> out, int threads, const index_t* rows) {
  const index_t P = indices.rows, nnz = indices.cols, C = grid.cols, G = grid.rows;
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nnz), C));
  require_shape(weights.rows, weights.cols, "blend: weights", P, nnz);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  const int nt = resolve_threads(threads);
  int bad = 0;
  const GatherFn<T, StoredRows> fast =
      packed(indices) && packed(weights) && packed(grid) && packed(out)
          ? gather_kernel<T, StoredRows>(nnz, C, true)
          : nullptr;
  if (fast) {
    const auto at = [&](index_t p0) {
      return StoredRows{indices.data + p0 * nnz, weights.data + p0 * nnz};
    };
    require(gather_rows_parallel<T, StoredRows>(fast, at, P, threads, grid.data, C, G, out.data, rows),
            "blend: an index lies outside the grid");
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(dynamic, kBlock * 16) reduction(| : bad)
  for (index_t p = 0; p < P; ++p) {
    for (index_t k = 0; k < nnz; ++k) bad |= bad_index(indices(p, k), G) ? 1 : 0;
    if (bad) continue;
    const index_t o = rows ? rows[p] : p;
    for (index_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (index_t k = 0; k < nnz; ++k) acc += weights(p, k) * double(grid(indices(p, k), c));
      out(o, c) = T(acc);
    }
  }
  require(!bad, "blend: an index lies outside the grid");
}

template <typename T>
void blend_transpose_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                            MatrixView<const T> values, MatrixView<T> out, index_t span,
                            int threads, const index_t* perm, const index_t* ptr, bool sorted) {
  const index_t P = indices.rows, nnz = indices.cols, C = values.cols, G = out.rows;
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nnz), C));
  require_shape(weights.rows, weights.cols, "blend_transpose: weights", P, nnz);
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require(out.cols == C, "blend_transpose: output must have as many channels as values");
  const TransposeLayout lay = transpose_layout(G, span);
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr,
                 [&](index_t* pp, index_t* sp) { plan_stored(indices, lay, pp, sp, threads); });
  const index_t L = lay.slab;
  int bad = 0;
  const ScatterFn<T, StoredRows> fast =
      packed(indices) && packed(weights) && packed(values) && packed(out)
          ? scatter_kernel<T, StoredRows>(nnz, C, true)
          : nullptr;
  const int nt = resolve_threads(threads);
  // rows of indices and weights gathered into plan order (packed path, points not sorted)
  std::vector<BlockScratch> scratch(static_cast<size_t>(fast && !sorted ? nt : 0),
                                    BlockScratch(nnz));
  // a row whose entries leave [s L, (s + 2) L) would race with the neighbouring slab: refused
  for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
    if (!fast) fetch_rows(values, perm, e + kBlock, P);  // the next block's
    const index_t lo = s * L, hi = std::min(G, (s + 2) * L);
    const index_t d0 = sorted ? e : 0;
    const index_t* rows = sorted ? nullptr : perm + e;  // indices rows, else d0 + b
    if (fast) {
      const index_t* idx = indices.data + d0 * nnz;
      const double* w = weights.data + d0 * nnz;
      if (rows) {
#ifdef KRONPE_OPENMP
        BlockScratch& sc = scratch[size_t(omp_get_thread_num())];
#else
        BlockScratch& sc = scratch[0];
#endif
        for (index_t b = 0; b < n; ++b)
          for (index_t k = 0; k < nnz; ++k) {
            sc.idx[size_t(b * nnz + k)] = indices(rows[b], k);
            sc.w[size_t(b * nnz + k)] = weights(rows[b], k);
          }
        idx = sc.idx.data();
        w = sc.w.data();
      }
      if (!fast(out.data, C, StoredRows{idx, w}, n, values.data, perm + e, P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    bool outside = false;
    for (index_t b = 0; b < n; ++b)
      for (index_t k = 0; k < nnz; ++k) {
        const index_t row = indices(rows ? rows[b] : d0 + b, k);
        outside |= row < lo || row >= hi;
      }
    if (outside) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const index_t d = rows ? rows[b] : d0 + b;
      scatter_point(out, values, perm[e + b], nnz, [&](index_t k) { return indices(d, k); },
                    [&](index_t k) { return weights(d, k); });
    }
  });
  require(!bad, "blend_transpose: an index lies outside the grid or beyond the declared span");
}

void require_shape(index_t rows, index_t cols, const char* what, index_t want_rows,
                   index_t want_cols) {
  require(rows == want_rows && cols == want_cols,
          std::string(what) + ": expected shape (" + std::to_string(want_rows) + ", " +
              std::to_string(want_cols) + "), got (" + std::to_string(rows) + ", " +
              std::to_string(cols) + ")");
}

template <typename T>
void blend_normal_add(MatrixView<const index_t> indices, MatrixView<const double> weights,
                      const T* v, T* out, index_t G, const T* keep) {
  const index_t P = indices.rows, nnz = indices.cols;
  require_shape(weights.rows, weights.cols, "blend_normal_add: weights", P, nnz);
  int bad = 0;
  for (index_t p = 0; p < P && !bad; ++p) {
    for (index_t k = 0; k < nnz; ++k) bad |= bad_index(indices(p, k), G) ? 1 : 0;
    if (bad) break;
    double acc = 0.0;
    for (index_t k = 0; k < nnz; ++k) acc += weights(p, k) * double(v[indices(p, k)]);
    T s = T(acc);
    if (keep) s *= keep[p];
    for (index_t k = 0; k < nnz; ++k) out[indices(p, k)] += T(weights(p, k) * double(s));
  }
  require(!bad, "blend_normal_add: an index lies outside the grid");
}

#define KRONPE_BLEND_Q(Q)                                                                      \
  template void compute_weights<Q>(const WeightFunction&, MatrixView<const Q>,                 \
                                   MatrixView<index_t>, MatrixView<double>, int);          \
  template void compute_factors<Q>(const WeightFunction&, MatrixView<const Q>, const index_t*, \
                                   MatrixView<index_t>, MatrixView<double>, int);
#define KRONPE_BLEND_TQ(T, Q)                                                                  \
  template void blend_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,                    \
                                MatrixView<const T>, MatrixView<T>, int, const index_t*);      \
  template void blend_transpose_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,          \
                                          MatrixView<const T>, MatrixView<T>, int,             \
                                          const index_t*, const index_t*, bool);
#define KRONPE_BLEND_T(T)                                                                      \
  template void blend_stored<T>(MatrixView<const index_t>, MatrixView<const double>,           \
                                MatrixView<const T>, MatrixView<T>, int, const index_t*);      \
  template void blend_transpose_stored<T>(MatrixView<const index_t>, MatrixView<const double>, \
                                          MatrixView<const T>, MatrixView<T>, index_t, int,    \
                                          const index_t*, const index_t*, bool);             \
  template void blend_factored<T>(const WeightFunction&, MatrixView<const index_t>,            \
                                  MatrixView<const double>, MatrixView<const T>, MatrixView<T>, \
                                  int, const index_t*);                                        \
  template void blend_transpose_factored<T>(const WeightFunction&, MatrixView<const index_t>,  \
                                            MatrixView<const double>, MatrixView<const T>,     \
                                            MatrixView<T>, int, const index_t*,                \
                                            const index_t*, bool);                             \
  template void blend_normal_add<T>(MatrixView<const index_t>, MatrixView<const double>, const T*, T*, \
                                    index_t, const T*);
KRONPE_BLEND_Q(float)
KRONPE_BLEND_Q(double)
KRONPE_BLEND_TQ(float, float)
KRONPE_BLEND_TQ(float, double)
KRONPE_BLEND_TQ(double, float)
KRONPE_BLEND_TQ(double, double)
KRONPE_BLEND_T(float)
KRONPE_BLEND_T(double)

}  // namespace kronpe::blend