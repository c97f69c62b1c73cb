// Cubic B-spline normal equations, values and stencil products (kronpe/spline.h).
#include "kronpe/spline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kronpe/avx512.h"
#include "kronpe/simd.h"
#include "kronpe/threads.h"

// The hot loops are inlined into one function per vector path (generic, AVX2, AVX-512, picked by
// kronpe::simd_level()), each compiled without floating-point contraction: no path fuses a
// multiply and an add, so every path gives the same bits.
#define KRONPE_SPLINE_INLINE inline __attribute__((always_inline))
#define KRONPE_SPLINE_INLINE_LAMBDA __attribute__((always_inline))
#if defined(__clang__)
#pragma clang fp contract(off)
#define KRONPE_SPLINE_NO_CONTRACT
#else
#define KRONPE_SPLINE_NO_CONTRACT __attribute__((optimize("fp-contract=off", "no-trapping-math")))
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kronpe {

index_t SplineGrid::size() const {
  index_t s = 1;
  for (int a = 0; a < ndim; ++a) s = checked_mul(s, coefficients(a), "spline grid size");
  return s;
}

index_t stencil_width(int ndim) { return ndim == 1 ? 7 : ndim == 2 ? 49 : 343; }

namespace {

// x along axis a in units of its intervals, from the grid's start.
inline double in_intervals(const SplineGrid& g, int a, double x) { return (x - g.lo[a]) / g.h[a]; }

// The interval of u = in_intervals(x), as a double.
inline double interval_of(const SplineGrid& g, int a, double u) {
  double f = std::floor(u);
  if (!(f >= 0)) f = 0;  // (NaN too: callers check the points, this keeps an index in range regardless)
  if (f > double(g.nint[a] - 1)) f = double(g.nint[a] - 1);
  return f;
}

// The four weights of a point at t (0 <= t <= 1) in its interval.
KRONPE_SPLINE_INLINE void cubic_weights(double t, double& w0, double& w1, double& w2, double& w3) {
  const double s = 1.0 - t, t2 = t * t, t3 = t2 * t;
  w0 = s * s * s / 6.0;
  w1 = (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0;
  w2 = (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0;
  w3 = t3 / 6.0;
}

// The interval of u = in_intervals(x) along axis a and its four weights.
inline index_t interval_weights(const SplineGrid& g, int a, double u, double w[4]) {
  const double f = interval_of(g, a, u);
  cubic_weights(u - f, w[0], w[1], w[2], w[3]);
  return index_t(f);
}

// The interval of x along axis a and its four weights.
inline index_t cell_weights(const SplineGrid& g, int a, double x, double w[4]) {
  return interval_weights(g, a, in_intervals(g, a, x), w);
}

// A point's 4^D weights and the flat indices of their coefficients.
template <int D>
struct Corners {
  static constexpr int K = D == 1 ? 4 : D == 2 ? 16 : 64;
  double w[K];
  index_t idx[K];
  int off[K];  // each corner's offset code: sum_a local_a 7^(D-1-a) (local 0..3)
};

template <int D>
inline void corners(const SplineGrid& g, const index_t* stride, const double* x, Corners<D>& c) {
  double w[D][4];
  index_t base = 0;
  for (int a = 0; a < D; ++a) base += cell_weights(g, a, x[a], w[a]) * stride[a];
  int k = 0;
  if constexpr (D == 1) {
    for (int i = 0; i < 4; ++i, ++k) c.w[k] = w[0][i], c.idx[k] = base + i, c.off[k] = i;
  } else if constexpr (D == 2) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j, ++k)
        c.w[k] = w[0][i] * w[1][j], c.idx[k] = base + i * stride[0] + j, c.off[k] = i * 7 + j;
  } else {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 4; ++l, ++k)
          c.w[k] = w[0][i] * w[1][j] * w[2][l], c.idx[k] = base + i * stride[0] + j * stride[1] + l,
          c.off[k] = i * 49 + j * 7 + l;
  }
}

template <int D>
void strides_of(const SplineGrid& g, index_t* stride) {
  index_t s = 1;
  for (int a = D - 1; a >= 0; --a) stride[a] = s, s *= g.coefficients(a);
}

// Runs body(level) (a lambda marked KRONPE_SPLINE_INLINE_LAMBDA) inlined into a function compiled
// for the vector path in force: AVX-512, AVX2 or generic; level, a std::integral_constant (2, 1, 0),
// tells the body which, for sizes that depend on the registers (32 of 64 bytes, 16 of 32, 16 of 16).
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_generic(const F& body) {
  body(std::integral_constant<int, 0>());
}
#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx2")
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_avx2(const F& body) {
  body(std::integral_constant<int, 1>());
}
KRONPE_AVX512_END
KRONPE_AVX512_BEGIN("avx512f,avx512vl,avx512dq,avx512bw")
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_avx512(const F& body) {
  body(std::integral_constant<int, 2>());
}
KRONPE_AVX512_END
#endif
template <typename F>
void with_simd(const F& body) {
#if KRONPE_AVX512
  if (simd_level() >= 2) return simd_avx512(body);
  if (simd_level() >= 1) return simd_avx2(body);
#endif
  simd_generic(body);
}

// Vectors of W = 2, 4 or 8 doubles (GCC's and Clang's vector extensions: a register of SSE2, AVX2 or
// AVX-512, or several), loaded from and stored to any address. Written as such where a plain loop
// would leave the compiler unsure that rows N apart do not overlap, or where entries move between
// lanes. (Every function taking or returning one is inlined: no vector crosses a call, whatever
// GCC's warning about the ABI of such calls says; it is off in this file.)
template <int W>
struct VecOf;
template <>
struct VecOf<2> {
  typedef double type __attribute__((vector_size(16)));
};
template <>
struct VecOf<4> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct VecOf<8> {
  typedef double type __attribute__((vector_size(64)));
};
template <int W>
using vec = typename VecOf<W>::type;
using v8 = vec<8>;

template <int W>
KRONPE_SPLINE_INLINE vec<W> loadv(const double* p) {
  vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
KRONPE_SPLINE_INLINE void storev(double* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename V>
KRONPE_SPLINE_INLINE void addv(double* p, const V& v) {
  storev(p, loadv<int(sizeof(V) / 8)>(p) + v);
}
// 8 entries of a stencil of either type, as doubles
KRONPE_SPLINE_INLINE v8 load8(const double* p) { return loadv<8>(p); }
KRONPE_SPLINE_INLINE v8 load8(const float* p) {
  typedef float v8f __attribute__((vector_size(32)));
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, v8);
}

// Lanes of a, each repeated C times, the part u (of C) of those 8 C lanes: the stencil's entries of 8
// rows spread over x's C channels.
template <int... I>
KRONPE_SPLINE_INLINE v8 lanes(const v8& a) {
#if defined(__clang__)
  return __builtin_shufflevector(a, a, I...);
#else
  typedef long long v8i __attribute__((vector_size(64)));
  return __builtin_shuffle(a, v8i{I...});
#endif
}
template <int C>
KRONPE_SPLINE_INLINE v8 spread(const v8& a, int u) {
  if constexpr (C == 2) return u == 0 ? lanes<0, 0, 1, 1, 2, 2, 3, 3>(a) : lanes<4, 4, 5, 5, 6, 6, 7, 7>(a);
  if constexpr (C == 3)
    return u == 0 ? lanes<0, 0, 0, 1, 1, 1, 2, 2>(a) : u == 1 ? lanes<2, 3, 3, 3, 4, 4, 4, 5>(a)
                                                            : lanes<5, 5, 6, 6, 6, 7, 7, 7>(a);
  if constexpr (C == 4)
    return u == 0 ? lanes<0, 0, 0, 0, 1, 1, 1, 1>(a) : u == 1 ? lanes<2, 2, 2, 2, 3, 3, 3, 3>(a)
                   : u == 2 ? lanes<4, 4, 4, 4, 5, 5, 5, 5>(a) : lanes<6, 6, 6, 6, 7, 7, 7, 7>(a);
  return a;
}

// B^T B of a cell's points, in the stencil's terms. A cell's 4^D corners form 4^(D-1) lines along
// the last axis (line L: the corners (i, j, 0..3) in 3-D); a pair of lines (L, L') couples corner
// (L, c) to (L', c + d) at the stencil offset (L' - L, d), d = -3..3, with the sum over the points
// of w_L w_L' w_c w_{c+d}, zero where c + d leaves the line. The pair (L', L) has the same numbers
// (corner (L', c) couples to (L, c + d) at the offset (L - L', d) with w_L' w_L w_c w_{c+d}), so
// the sums are made for the pairs L <= L' and added to the stencil twice.
template <int D>
struct CellLines {
  static constexpr int L = D == 1 ? 1 : D == 2 ? 4 : 16;  // lines
  static constexpr int P = L * (L + 1) / 2;               // pairs L <= L'
  int first[P], second[P];
  index_t row[P];     // where the stencil's row of offset (L' - L, -3) starts
  index_t mirror[P];  // where the stencil's row of offset (L - L', -3) starts
  index_t line[L];    // each line's first corner, flat, relative to the cell's first one
};

template <int D>
void cell_lines(const index_t* stride, index_t N, CellLines<D>& c) {
  constexpr int L = CellLines<D>::L;
  const index_t W = stencil_width(D);
  int axis[L][2] = {};  // the line's corner along the first D - 1 axes
  for (int l = 0; l < L; ++l) {
    axis[l][0] = D == 3 ? l / 4 : l;
    axis[l][1] = D == 3 ? l % 4 : 0;
    c.line[l] = D == 1 ? 0 : axis[l][0] * stride[0] + (D == 3 ? axis[l][1] * stride[1] : 0);
  }
  int k = 0;
  for (int a = 0; a < L; ++a)
    for (int b = a; b < L; ++b, ++k) {
      index_t ob = 0;  // the offset's code over the first D - 1 axes
      if (D == 2) ob = axis[b][0] - axis[a][0] + 3;
      if (D == 3) ob = (axis[b][0] - axis[a][0] + 3) * 7 + axis[b][1] - axis[a][1] + 3;
      c.first[k] = a, c.second[k] = b;
      c.row[k] = 7 * ob * N;
      c.mirror[k] = (W - 7 - 7 * ob) * N;
    }
}

// A stripe's points, sorted by cell (C-order), go in chunks: the points of up to kChunk cells in a
// row along the last axis (at most kBatch of them). The chunk's corners along a line are a window
// of kWindow = 8 coefficients, so that the chunk adds to the stencil one 8-vector per pair of lines
// and offset: the points' sums over the chunk, made in registers, pair by pair. (The stencil is a
// large array, its writes the kernel's main cost: a cell's 4-vectors at a time would write it up to
// kChunk times as often.) The rows a chunk adds to are prefetched kPrefetchChunks chunks earlier.
// (kBatch: one chunk's scratch stays in L2 while the stencil is written once per 256 points of a
// dense cell, not once per 32; the same on every vector path, so that they sum alike.)
constexpr int kChunk = 5, kWindow = kChunk + 3, kBatch = 256;
constexpr index_t kPrefetchChunks = 2;

// A chunk: its first point, its window's first coefficient (flat), and how much of the window lies
// on the line (kWindow, or fewer at the end of a line).
struct Chunk {
  index_t q, window;
  int span;
};

// The chunks of the points [q0, q1) (key[q]: the cell of point q, sorted) and one past the last.
// A window starts at the chunk's first cell; in 2-D and 3-D, where that would run past the line's
// end, earlier: the stripes split the first axis, a line (along the last) is one stripe's alone.
// In 1-D the window ends at the line's end instead (the line is the stripes' axis: it must not
// reach the coefficients of another stripe's cells).
template <int D>
void chunks_of(const SplineGrid& g, const index_t* stride, const index_t* key, index_t q0, index_t q1,
               std::vector<Chunk>& out) {
  out.clear();
  const index_t cells_last = g.nint[D - 1];
  for (index_t q = q0; q < q1;) {
    const index_t l = key[q] % cells_last, l0 = l / kChunk * kChunk;
    const index_t w0 = D == 1 ? l0 : std::max<index_t>(0, std::min(l0, cells_last - kChunk));
    index_t base = 0, rest = key[q];  // the first cell's first coefficient
    for (int a = D - 1; a >= 0; --a) base += rest % g.nint[a] * stride[a], rest /= g.nint[a];
    out.push_back({q, base - (l - w0), int(std::min<index_t>(kWindow, cells_last + 3 - w0))});
    // the chunk's cells: keys from key[q] to (not with) the chunk's end on this line of cells
    const index_t end = key[q] - l + std::min(l0 + kChunk, cells_last);
    index_t q_end = q + 1;
    while (q_end < q1 && q_end - q < kBatch && key[q_end] < end) ++q_end;
    q = q_end;
  }
  out.push_back({q1, 0, 0});
}

// A task's scratch for one chunk's points (kBatch of them: 0.13 MB in 3-D, on the heap).
template <int D>
struct NormalWork {
  static constexpr int L = CellLines<D>::L;
  alignas(64) double dz[kBatch][7][kWindow];  // per offset d + 3: w_c w_{c+d} at the cell's corners c
                                              // in the window, else 0
  alignas(64) double lw[kBatch][L], lwp[kBatch][L];  // the lines' weights, without and with the point's
  alignas(64) double pads[kBatch][24];               // the last axis's 4 weights at 8 .. 11, else 0
  alignas(64) double at[D][kBatch], wt[D][4][kBatch];  // each axis's interval and weights
  int shifts[kBatch];                                // the cell's first corner in the window
};

// stencil and rhs += the chunks' points (units: in_intervals of their coordinates; units, vals and
// weights sorted by cell).
template <int D, int Level>
KRONPE_SPLINE_INLINE void normal_cells(const SplineGrid& g, const index_t* stride, index_t N, const CellLines<D>& cl,
                                       const double* units, const double* vals, index_t C, const double* weights,
                                       const Chunk* chunks, index_t nchunks, double* st, double* rhs,
                                       NormalWork<D>& work, double* zv) {
  constexpr int L = CellLines<D>::L, NP = CellLines<D>::P;
  // vectors of the registers' width: VW doubles (8 x 8 doubles in AVX2's or SSE2's registers spill)
  constexpr int VW = Level == 2 ? 8 : Level == 1 ? 4 : 2, NB = kWindow / VW;
  using V = vec<VW>;
  auto& dz = work.dz;
  auto& lw = work.lw;
  auto& lwp = work.lwp;
  auto& pads = work.pads;
  auto& at = work.at;
  auto& wt = work.wt;
  auto& shifts = work.shifts;
  for (index_t ci = 0; ci < nchunks; ++ci) {
    if (ci + kPrefetchChunks < nchunks) {  // the stencil rows of a chunk further on
      const index_t wn = chunks[ci + kPrefetchChunks].window;
      for (int k = 0; k < NP; ++k) {
        const double* direct = st + cl.row[k] + wn + cl.line[cl.first[k]];
        const double* mirror = st + cl.mirror[k] + wn + cl.line[cl.second[k]];
        for (int m = 0; m < 7; ++m) {
          __builtin_prefetch(direct + m * N, 1, 3);
          __builtin_prefetch(direct + m * N + 7, 1, 3);
          __builtin_prefetch(mirror + m * N, 1, 3);
          __builtin_prefetch(mirror + m * N + 7, 1, 3);
        }
      }
    }
    const index_t q = chunks[ci].q, window = chunks[ci].window;
    const int span = chunks[ci].span;
    const int n = int(chunks[ci + 1].q - q);
    // the points' intervals and weights, axis by axis
    for (int a = 0; a < D; ++a)
      for (int r = 0; r < n; ++r) {
        const double u = units[(q + r) * D + a], f = interval_of(g, a, u);
        at[a][r] = f;
        cubic_weights(u - f, wt[a][0][r], wt[a][1][r], wt[a][2][r], wt[a][3][r]);
      }
    for (int r = 0; r < n; ++r) {
      const index_t p = q + r;
      double w[D][4];
      index_t base = 0;
      for (int a = 0; a < D; ++a) {
        base += index_t(at[a][r]) * stride[a];
        for (int i = 0; i < 4; ++i) w[a][i] = wt[a][i][r];
      }
      const int shift = int(base - window);
      const double pw = weights ? weights[p] : 1.0;
      for (int l = 0; l < L; ++l) {
        lw[r][l] = D == 1 ? 1.0 : D == 2 ? w[0][l] : w[0][l / 4] * w[1][l % 4];
        lwp[r][l] = pw * lw[r][l];
      }
      const double* wz = w[D - 1];
      double* pad = pads[r];
      for (int i = 0; i < 24; i += VW) storev(pad + i, V{});
      for (int c = 0; c < 4; ++c) pad[8 + c] = wz[c];
      shifts[r] = shift;
      // rhs: the 4 C numbers w_c v of each line's corners, contiguous
      const double* v = vals + p * C;
      if (C == 1) {
        const double wv[4] = {wz[0] * v[0], wz[1] * v[0], wz[2] * v[0], wz[3] * v[0]};
        for (int l = 0; l < L; ++l) {
          double* out = rhs + base + cl.line[l];
          const double f = lwp[r][l];
          for (int i = 0; i < 4; ++i) out[i] += f * wv[i];
        }
      } else {
        for (int c = 0; c < 4; ++c)
          for (index_t ch = 0; ch < C; ++ch) zv[c * C + ch] = wz[c] * v[ch];
        for (int l = 0; l < L; ++l) {
          double* out = rhs + (base + cl.line[l]) * C;
          const double f = lwp[r][l];
          for (index_t i = 0; i < 4 * C; ++i) out[i] += f * zv[i];
        }
      }
    }
    // dz, in a loop apart from the stores to pads (loads straight after those would wait for them)
    for (int r = 0; r < n; ++r)
      for (int m = 0; m < 7; ++m)
        for (int b = 0; b < kWindow; b += VW) {
          const double* pad = pads[r] + b - shifts[r];
          storev(dz[r][m] + b, loadv<VW>(pad + 8) * loadv<VW>(pad + 5 + m));
        }
    // the offsets G at a time and the pairs KP at a time: their sums in registers (KP G NB of
    // them: 4 pairs x 7 offsets in AVX-512's 32 registers, 2 x 3 x 2 in AVX2's 16), so that each of
    // the points' dz vectors, loaded once, feeds KP independent accumulations. Each pair's sums run
    // over the points in the same order whatever KP and G, so the bits do not depend on them.
    constexpr int G = Level == 2 ? 7 : Level == 1 ? 3 : 2;
    constexpr int KP = Level == 2 && NP >= 4 ? 4 : Level == 1 && NP >= 2 ? 2 : 1;
    auto pairs = [&](int k, auto kp) KRONPE_SPLINE_INLINE_LAMBDA {
      constexpr int Q = decltype(kp)::value;
      int l1[Q], l2[Q];
      for (int j = 0; j < Q; ++j) l1[j] = cl.first[k + j], l2[j] = cl.second[k + j];
      for (int m0 = 0; m0 < 7; m0 += G) {
        const int g = std::min(G, 7 - m0);
        V sum[Q][G][NB] = {};
        for (int r = 0; r < n; ++r) {
          double sc[Q];
          for (int j = 0; j < Q; ++j) sc[j] = lwp[r][l1[j]] * lw[r][l2[j]];
          for (int m = 0; m < G; ++m)
            if (m < g)
              for (int b = 0; b < NB; ++b) {
                const V d = loadv<VW>(dz[r][m0 + m] + b * VW);
                for (int j = 0; j < Q; ++j) sum[j][m][b] += sc[j] * d;
              }
        }
        for (int j = 0; j < Q; ++j) {
          double* direct = st + cl.row[k + j] + window + cl.line[l1[j]];
          double* mirror = st + cl.mirror[k + j] + window + cl.line[l2[j]];
          for (int m = 0; m < g; ++m) {
            double* row = direct + (m0 + m) * N;
            double* row2 = mirror + (m0 + m) * N;
            if (span == kWindow) {
              for (int b = 0; b < NB; ++b) addv(row + b * VW, sum[j][m][b]);
              if (l1[j] != l2[j])
                for (int b = 0; b < NB; ++b) addv(row2 + b * VW, sum[j][m][b]);
            } else {  // the end of a line
              for (int i = 0; i < span; ++i) row[i] += sum[j][m][i / VW][i % VW];
              if (l1[j] != l2[j])
                for (int i = 0; i < span; ++i) row2[i] += sum[j][m][i / VW][i % VW];
            }
          }
        }
      }
    };
    int k = 0;
    for (; k + KP <= NP; k += KP) pairs(k, std::integral_constant<int, KP>{});
    for (; k < NP; ++k) pairs(k, std::integral_constant<int, 1>{});
  }
}

template <int D>
void normal_impl(const SplineGrid& g, index_t P, const double* pts, const double* vals, index_t C,
                 const double* weights, double* st, double* rhs, int threads) {
  index_t stride[3];
  strides_of<D>(g, stride);
  const index_t N = g.size();
  // the points sorted by cell, C-order (counting sort: the input's order within a cell)
  index_t cstride[3], cells = 1;
  for (int a = D - 1; a >= 0; --a) cstride[a] = cells, cells *= g.nint[a];
  std::vector<index_t> start(static_cast<std::size_t>(cells + 1), 0), key(static_cast<std::size_t>(P));
  std::vector<double> u(static_cast<std::size_t>(P * D));  // the points in units of the intervals
  for (index_t p = 0; p < P; ++p) {
    index_t cell = 0;
    for (int a = 0; a < D; ++a) {
      u[std::size_t(p * D + a)] = in_intervals(g, a, pts[p * D + a]);
      cell += index_t(interval_of(g, a, u[std::size_t(p * D + a)])) * cstride[a];
    }
    key[std::size_t(p)] = cell;
    ++start[std::size_t(cell + 1)];
  }
  for (index_t c = 0; c < cells; ++c) start[std::size_t(c + 1)] += start[std::size_t(c)];
  // (copies of u, the values and the weights in that order: the cells read them in turn)
  std::vector<double> su(static_cast<std::size_t>(P * D)), svals(static_cast<std::size_t>(P * C)),
      sw(weights ? static_cast<std::size_t>(P) : 0);
  {
    std::vector<index_t> fill(start.begin(), start.end() - 1), cell_of(key);
    for (index_t p = 0; p < P; ++p) {
      const index_t q = fill[std::size_t(cell_of[std::size_t(p)])]++;
      key[std::size_t(q)] = cell_of[std::size_t(p)];
      for (int a = 0; a < D; ++a) su[std::size_t(q * D + a)] = u[std::size_t(p * D + a)];
      for (index_t ch = 0; ch < C; ++ch) svals[std::size_t(q * C + ch)] = vals[p * C + ch];
      if (weights) sw[std::size_t(q)] = weights[p];
    }
  }
  CellLines<D> cl;
  cell_lines<D>(stride, N, cl);
  // kStripes stripes of whole cell planes along the first axis, at least 4 planes wide: a cell
  // touches 4 coefficient planes, so stripes two apart share none. (Wide stripes: a stripe's points
  // add to their coefficients' rows of the stencil while those are in cache; those of the planes
  // it shares with the next stripe are read again for that one.) The width depends on the grid
  // alone, so that the sums' order (and bits) do not depend on the thread count.
  constexpr index_t kStripes = 16;
  // (In 1-D whole chunks: a chunk's window spans the coefficients of 8 cells, not 4.)
  index_t width = std::max<index_t>(4, (g.nint[0] + kStripes - 1) / kStripes);
  if (D == 1) width = (width + kChunk - 1) / kChunk * kChunk;
  const index_t stripes = (g.nint[0] + width - 1) / width;
  auto stripe_rows = [&](index_t s, index_t* q0, index_t* q1) {
    *q0 = start[std::size_t(std::min(cells, s * width * cstride[0]))];
    *q1 = start[std::size_t(std::min(cells, (s + 1) * width * cstride[0]))];
  };
  // even stripes, then odd ones, in parallel
  const int nt = threads > 0 ? threads : kernel_threads();
  for (int parity = 0; parity < 2; ++parity) {
    const index_t count = (stripes - parity + 1) / 2;
    run_team(count > 1 ? std::min<index_t>(nt, count) : 1, [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (index_t i = 0; i < count; ++i) {
        index_t q0, q1;
        stripe_rows(2 * i + parity, &q0, &q1);
        const std::unique_ptr<NormalWork<D>> work(new NormalWork<D>);
        std::vector<double> zv(static_cast<std::size_t>(4 * C));
        std::vector<Chunk> chunks;
        chunks_of<D>(g, stride, key.data(), q0, q1, chunks);
        with_simd([&](auto level) KRONPE_SPLINE_INLINE_LAMBDA {
          normal_cells<D, level>(g, stride, N, cl, su.data(), svals.data(), C, weights ? sw.data() : nullptr,
                                 chunks.data(), index_t(chunks.size()) - 1, st, rhs, *work, zv.data());
        });
      }
    });
  }
}

template <int D>
void values_impl(const SplineGrid& g, index_t P, const double* pts, const double* coef, index_t C, double* out,
                 int threads) {
  index_t stride[3];
  strides_of<D>(g, stride);
  const int nt = threads > 0 ? threads : kernel_threads();
  run_team(P > 4096 ? nt : 1, [&](int, int) {
    Corners<D> c;
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t p = 0; p < P; ++p) {
      corners<D>(g, stride, pts + p * D, c);
      double* o = out + p * C;
      for (index_t ch = 0; ch < C; ++ch) o[ch] = 0.0;
      for (int k = 0; k < Corners<D>::K; ++k) {
        const double* v = coef + c.idx[k] * C;
        for (index_t ch = 0; ch < C; ++ch) o[ch] += c.w[k] * v[ch];
      }
    }
  });
}

// Offset-major stencils: entry o of coefficient j at st[o * N + j]. Coefficient j's neighbour at
// offset o is j + shift[o] in the flat (C-order) numbering; where that neighbour lies outside the
// grid the entry is zero, so a flat index that wraps into the next row adds nothing, and only
// the flat range [0, N) has to be respected.
//
// A product walks blocks of rows; in a block it adds the offsets a run of 7 at a time (the 7
// offsets along the last axis: shifts sh0 .. sh0 + 6), each row's sum in registers, so that y is
// read and written once per run, not per offset, and each pass streams 7 stencil rows. Those
// streams are prefetched kApplyAhead entries ahead: the hardware prefetchers lose track of 49 or
// 343 streams (without, a product read its stencil at a quarter of the memory's bandwidth). Every
// row's sum is added in the offsets' order, as one offset at a time would.
constexpr index_t kApplyBlock = 16384;  // rows of y (at C = 1: 128 KiB, L2-resident with x's part)
constexpr index_t kApplyAhead = 128;

// y[i - y0] += sum over the run's 7 offsets k (in order) of st_k[i] x[i + sh0 + k] for i in [lo, hi)
// (rows of C entries; y holds the rows from y0 on), where every offset's neighbour lies in [0, N).
// CC: C when 1 to 4 (then 8 rows at a time: x and y as C vectors of 8, the stencil's 8 entries
// spread over them), 0 for any C.
template <typename S, int CC>
KRONPE_SPLINE_INLINE void run7(const S* const* so, index_t sh0, const double* __restrict x, index_t C,
                               double* __restrict yb, index_t y0, index_t lo, index_t hi) {
  const S* __restrict s0 = so[0];
  const S* __restrict s1 = so[1];
  const S* __restrict s2 = so[2];
  const S* __restrict s3 = so[3];
  const S* __restrict s4 = so[4];
  const S* __restrict s5 = so[5];
  const S* __restrict s6 = so[6];
  if constexpr (CC == 1) {
    const double* __restrict xs = x + sh0;
    auto row = [&](index_t i) KRONPE_SPLINE_INLINE_LAMBDA {
      double acc = yb[i - y0];
      acc += double(s0[i]) * xs[i];
      acc += double(s1[i]) * xs[i + 1];
      acc += double(s2[i]) * xs[i + 2];
      acc += double(s3[i]) * xs[i + 3];
      acc += double(s4[i]) * xs[i + 4];
      acc += double(s5[i]) * xs[i + 5];
      acc += double(s6[i]) * xs[i + 6];
      yb[i - y0] = acc;
    };
    constexpr index_t L = 64 / sizeof(S);  // a cache line of each stencil row per step
    index_t j = lo;
    for (; j + L <= hi; j += L) {
      for (int k = 0; k < 7; ++k) __builtin_prefetch(so[k] + j + kApplyAhead, 0, 3);
#pragma omp simd
      for (index_t i = j; i < j + L; ++i) row(i);
    }
    for (index_t i = j; i < hi; ++i) row(i);
    return;
  }
  if constexpr (CC >= 2) {
    for (; lo + 8 <= hi; lo += 8) {
      for (int k = 0; k < 7; ++k) __builtin_prefetch(so[k] + lo + kApplyAhead, 0, 3);
      v8 acc[CC];
      for (int u = 0; u < CC; ++u) acc[u] = load8(yb + (lo - y0) * CC + 8 * u);
      for (int k = 0; k < 7; ++k) {
        const v8 a = load8(so[k] + lo);
        const double* v = x + (lo + sh0 + k) * CC;
        for (int u = 0; u < CC; ++u) acc[u] += spread<CC>(a, u) * load8(v + 8 * u);
      }
      for (int u = 0; u < CC; ++u) storev(yb + (lo - y0) * CC + 8 * u, acc[u]);
    }
    C = CC;
  }
  for (index_t i = lo; i < hi; ++i) {  // (CC >= 2: the last rows)
    const double* v = x + (i + sh0) * C;
    double* out = yb + (i - y0) * C;
    const double a[7] = {double(s0[i]), double(s1[i]), double(s2[i]), double(s3[i]),
                         double(s4[i]), double(s5[i]), double(s6[i])};
    for (index_t c = 0; c < C; ++c) {
      double acc = out[c];
      for (int k = 0; k < 7; ++k) acc += a[k] * v[k * C + c];
      out[c] = acc;
    }
  }
}

// yb (rows j - j0) = the product's rows j0 .. j1 - 1.
template <typename S, int CC>
KRONPE_SPLINE_INLINE void apply_block(const S* st, index_t N, int W, const index_t* shift, const double* x,
                                      index_t C, double* yb, index_t j0, index_t j1) {
  for (index_t k = 0; k < (j1 - j0) * C; ++k) yb[k] = 0.0;
  for (int o0 = 0; o0 < W; o0 += 7) {
    const index_t sh0 = shift[o0];
    const S* so[7];
    for (int k = 0; k < 7; ++k) so[k] = st + index_t(o0 + k) * N;
    // rows [ulo, uhi) have a neighbour in [0, N) at some offset of the run, [ilo, ihi) at all of them
    const index_t ulo = j0 > -sh0 - 6 ? j0 : -sh0 - 6, uhi = j1 < N - sh0 ? j1 : N - sh0;
    index_t ilo = j0 > -sh0 ? j0 : -sh0, ihi = j1 < N - sh0 - 6 ? j1 : N - sh0 - 6;
    if (ilo > uhi) ilo = uhi;
    if (ihi < ilo) ihi = ilo;
    for (int side = 0; side < 2; ++side) {  // the rows with some neighbours outside, one by one
      const index_t a = side == 0 ? ulo : (ihi > ulo ? ihi : ulo), e = side == 0 ? ilo : uhi;
      for (index_t j = a; j < e; ++j)
        for (int k = 0; k < 7; ++k) {
          const index_t i = j + sh0 + k;
          if (i < 0 || i >= N) continue;
          const double s = double(so[k][j]);
          for (index_t ch = 0; ch < C; ++ch) yb[(j - j0) * C + ch] += s * x[i * C + ch];
        }
    }
    run7<S, CC>(so, sh0, x, C, yb, j0, ilo, ihi);
  }
}

// The product's rows straight into y (y = A x).
struct Store {};

// A thread's block of product rows for a finish other than Store, kept between products (a
// product allocates nothing once its threads have met its block size).
thread_local std::vector<double> t_part;

double* part_buffer(index_t size) {
  if (t_part.size() < static_cast<std::size_t>(size)) t_part.resize(static_cast<std::size_t>(size));
  return t_part.data();
}

// y = A x, or with a finish other than Store: each block of rows' product made apart (yb, rows
// j0 .. j1 - 1) and handed to finish(j0, j1, yb), which may write any array's rows of that block
// (not x's: other blocks read it).
template <int D, typename S, int CC, typename F>
void apply_impl_c(const index_t* n, const S* st, const double* x, index_t C, double* y, const F& finish,
                  int threads) {
  constexpr bool store = std::is_same_v<F, Store>;
  index_t N = 1, stride[3];
  for (int a = D - 1; a >= 0; --a) stride[a] = N, N *= n[a];
  const int W = int(stencil_width(D));
  index_t shift[343];
  for (int o = 0; o < W; ++o) {
    int rest = o;
    index_t s = 0;
    for (int a = D - 1; a >= 0; --a) s += index_t(rest % 7 - 3) * stride[a], rest /= 7;
    shift[o] = s;
  }
  const int nt = threads > 0 ? threads : kernel_threads();
  const bool team = nt > 1 && N * W * C > (1 << 18);
  index_t block = std::max<index_t>(1024, kApplyBlock / C);
  if (team) block = std::min(block, std::max<index_t>(1024, (N + 4 * nt - 1) / (4 * nt)));  // 4 per thread
  const index_t blocks = (N + block - 1) / block;
  run_team(team ? int(std::min<index_t>(nt, blocks)) : 1, [&](int, int) {
    double* const part = store ? nullptr : part_buffer(std::min(block, N) * C);
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t b = 0; b < blocks; ++b) {
      const index_t j0 = b * block, j1 = std::min(N, j0 + block);
      double* yb = store ? y + j0 * C : part;
      with_simd([&](auto) KRONPE_SPLINE_INLINE_LAMBDA { apply_block<S, CC>(st, N, W, shift, x, C, yb, j0, j1); });
      if constexpr (!store) finish(j0, j1, static_cast<const double*>(yb));
    }
  });
}

template <int D, typename S, typename F>
void apply_impl(const index_t* n, const S* st, const double* x, index_t C, double* y, const F& finish,
                int threads) {
  switch (C) {
    case 1: return apply_impl_c<D, S, 1>(n, st, x, C, y, finish, threads);
    case 2: return apply_impl_c<D, S, 2>(n, st, x, C, y, finish, threads);
    case 3: return apply_impl_c<D, S, 3>(n, st, x, C, y, finish, threads);
    case 4: return apply_impl_c<D, S, 4>(n, st, x, C, y, finish, threads);
    default: return apply_impl_c<D, S, 0>(n, st, x, C, y, finish, threads);
  }
}

void check_grid(const SplineGrid& g) {
  require(g.ndim >= 1 && g.ndim <= 3, "spline grid: 1 to 3 axes");
  for (int a = 0; a < g.ndim; ++a)
    require(g.nint[a] >= 1 && g.h[a] > 0 && std::isfinite(g.h[a]) && std::isfinite(g.lo[a]),
            "spline grid: each axis needs at least one interval of finite positive width");
}

}  // namespace

void spline_normal(const SplineGrid& g, index_t P, const double* points, const double* values, index_t C,
                   const double* weights, double* stencil, double* rhs, int threads) {
  check_grid(g);
  if (P == 0) return;
  switch (g.ndim) {
    case 1: return normal_impl<1>(g, P, points, values, C, weights, stencil, rhs, threads);
    case 2: return normal_impl<2>(g, P, points, values, C, weights, stencil, rhs, threads);
    default: return normal_impl<3>(g, P, points, values, C, weights, stencil, rhs, threads);
  }
}

void spline_values(const SplineGrid& g, index_t P, const double* points, const double* coef, index_t C,
                   double* out, int threads) {
  check_grid(g);
  if (P == 0) return;
  switch (g.ndim) {
    case 1: return values_impl<1>(g, P, points, coef, C, out, threads);
    case 2: return values_impl<2>(g, P, points, coef, C, out, threads);
    default: return values_impl<3>(g, P, points, coef, C, out, threads);
  }
}

template <typename S, typename F = Store>
void stencil_apply_any(int ndim, const index_t* n, const S* stencil, const double* x, index_t C, double* y,
                       const F& finish, int threads) {
  require(ndim >= 1 && ndim <= 3, "stencil_apply: 1 to 3 axes");
  for (int a = 0; a < ndim; ++a)
    if (n[a] <= 0) return;
  switch (ndim) {
    case 1: return apply_impl<1>(n, stencil, x, C, y, finish, threads);
    case 2: return apply_impl<2>(n, stencil, x, C, y, finish, threads);
    default: return apply_impl<3>(n, stencil, x, C, y, finish, threads);
  }
}

void stencil_apply(int ndim, const index_t* n, const double* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, Store(), threads);
}

void stencil_apply(int ndim, const index_t* n, const float* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, Store(), threads);
}

namespace {

// y = b - A x, a block at a time (b may be y).
template <typename S>
void residual_any(int ndim, const index_t* n, const S* stencil, const double* b, const double* x, index_t C,
                  double* y, int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y,
                    [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                      for (index_t k = 0; k < (j1 - j0) * C; ++k) y[j0 * C + k] = b[j0 * C + k] - part[k];
                    },
                    threads);
}

}  // namespace

void stencil_residual(int ndim, const index_t* n, const double* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads) {
  residual_any(ndim, n, stencil, b, x, C, y, threads);
}

void stencil_residual(int ndim, const index_t* n, const float* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads) {
  residual_any(ndim, n, stencil, b, x, C, y, threads);
}

void spline_chebyshev(int ndim, const index_t* n, const float* stencil, const double* dinv, const double* b,
                      index_t C, int degree, double theta, double delta, bool zero_start, bool residual, double* x,
                      double* res, double* work, int threads) {
  require(ndim >= 1 && ndim <= 3, "spline_chebyshev: 1 to 3 axes");
  require(degree >= 1, "spline_chebyshev: degree >= 1");
  index_t N = 1;
  for (int a = 0; a < ndim; ++a) N *= n[a] > 0 ? n[a] : 0;
  const index_t M = N * C;
  if (M == 0) return;
  // Each step's elementwise updates ride on its product's pass, a block of rows at a time: the
  // direction d is read by the product (its neighbours' rows too), so the next one goes to the
  // other half of work.
  double* d = work;
  double* next = work + M;
  // res = b - A x (or b), d = D^-1 res / theta
  if (zero_start) {
    for (index_t i = 0; i < N; ++i)
      for (index_t c = 0; c < C; ++c) {
        res[i * C + c] = b[i * C + c];
        d[i * C + c] = dinv[i] * res[i * C + c] / theta;
        x[i * C + c] = 0.0;
      }
  } else {
    stencil_apply_any(ndim, n, stencil, x, C, res,
                      [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                        for (index_t i = j0; i < j1; ++i)
                          for (index_t c = 0; c < C; ++c) {
                            const index_t k = i * C + c;
                            res[k] = b[k] - part[k - j0 * C];
                            d[k] = dinv[i] * res[k] / theta;
                          }
                      },
                      threads);
  }
  const double sigma = theta / delta;
  double rho = 1.0 / sigma;
  for (int k = 0; k < degree; ++k) {
    const bool last = k == degree - 1;
    if (last && !residual) {  // x += d
      for (index_t i = 0; i < M; ++i) x[i] = x[i] + d[i];
      break;
    }
    const double rho_new = 1.0 / (2 * sigma - rho), keep = rho_new * rho, step = 2 * rho_new / delta;
    // x += d; res -= A d; and but for the last step, the next direction keep d + step D^-1 res
    stencil_apply_any(ndim, n, stencil, d, C, res,
                      [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                        double* __restrict xs = x + j0 * C;
                        double* __restrict rs = res + j0 * C;
                        double* __restrict ns = next + j0 * C;
                        const double* __restrict ds = d + j0 * C;
                        const double* __restrict ps = part;
                        const index_t m = (j1 - j0) * C;
                        for (index_t q = 0; q < m; ++q) {
                          xs[q] = xs[q] + ds[q];
                          rs[q] = rs[q] - ps[q];
                        }
                        if (last) return;
                        if (C == 1) {
                          const double* __restrict di = dinv + j0;
                          for (index_t q = 0; q < m; ++q) ns[q] = keep * ds[q] + step * (di[q] * rs[q]);
                        } else {
                          for (index_t i = 0; i < j1 - j0; ++i)
                            for (index_t c = 0; c < C; ++c)
                              ns[i * C + c] = keep * ds[i * C + c] + step * (dinv[j0 + i] * rs[i * C + c]);
                        }
                      },
                      threads);
    if (last) break;
    std::swap(d, next);
    rho = rho_new;
  }
}

namespace {

// The cubic B-spline's subdivision along the middle axis of (outer, n, inner) arrays: fine row 2k
// = (c_k + c_(k+1)) / 2 with weights 4/8, 4/8 (from c_(k+1) first), row 2k + 1 = (c_(k+2) + 6 c_(k+1)
// + c_k) / 8 (that order: the taps 1 4 6 4 1 / 8 added coarse row by coarse row, as the reference).
KRONPE_SPLINE_NO_CONTRACT void subdivide_impl(index_t outer, index_t n, index_t inner, const double* coarse,
                                              double* fine) {
  constexpr double w0 = 1.0 / 8, w1 = 4.0 / 8, w2 = 6.0 / 8;
  const index_t nf = 2 * n - 3;
  for (index_t o = 0; o < outer; ++o) {
    const double* c = coarse + o * n * inner;
    double* f = fine + o * nf * inner;
    for (index_t i = 0; i < nf; ++i) {
      const index_t k = i / 2;
      double* out = f + i * inner;
      if (i % 2 == 0) {
        const double *a = c + (k + 1) * inner, *b = c + k * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = w1 * a[j] + w1 * b[j];
      } else {
        const double *a = c + (k + 2) * inner, *b = c + (k + 1) * inner, *e = c + k * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = w0 * a[j] + w2 * b[j] + w0 * e[j];
      }
    }
  }
}

// Its transpose: coarse row J = the sum over the taps m = 0..4 (in that order) of w_m f_(2J + m - 3),
// the fine rows in [0, 2 n - 3) only.
KRONPE_SPLINE_NO_CONTRACT void restrict_impl(index_t outer, index_t n, index_t inner, const double* fine,
                                             double* coarse) {
  constexpr double w[5] = {1.0 / 8, 4.0 / 8, 6.0 / 8, 4.0 / 8, 1.0 / 8};
  const index_t nf = 2 * n - 3;
  for (index_t o = 0; o < outer; ++o) {
    const double* f = fine + o * nf * inner;
    double* c = coarse + o * n * inner;
    for (index_t J = 0; J < n; ++J) {
      double* out = c + J * inner;
      const index_t m0 = std::max<index_t>(0, 3 - 2 * J), m1 = std::min<index_t>(4, nf + 2 - 2 * J);
      if (m0 > m1) {
        for (index_t j = 0; j < inner; ++j) out[j] = 0.0;
        continue;
      }
      const double* r = f + (2 * J + m0 - 3) * inner;
      for (index_t j = 0; j < inner; ++j) out[j] = w[m0] * r[j];
      for (index_t m = m0 + 1; m <= m1; ++m) {
        const double* q = f + (2 * J + m - 3) * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = out[j] + w[m] * q[j];
      }
    }
  }
}

}  // namespace

void spline_subdivide(index_t outer, index_t n, index_t inner, const double* coarse, double* fine) {
  require(n >= 2 && outer >= 0 && inner >= 0, "spline_subdivide: at least 2 coefficients along the axis");
  subdivide_impl(outer, n, inner, coarse, fine);
}

void spline_restrict(index_t outer, index_t n, index_t inner, const double* fine, double* coarse) {
  require(n >= 2 && outer >= 0 && inner >= 0, "spline_restrict: at least 2 coefficients along the axis");
  restrict_impl(outer, n, inner, fine, coarse);
}

}  // namespace kronpe
