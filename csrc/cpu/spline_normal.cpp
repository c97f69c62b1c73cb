// Cubic B-spline normal equations B^T B and B^T v of scattered points, in stencil form
// (kronpe/spline.h).
#include <memory>
#include <vector>

#include "kronpe/spline.h"
#include "kronpe/threads.h"
#include "spline_simd.h"

namespace kronpe {

namespace {

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

// A thread's scratch for one chunk's points (kBatch of them: 0.26 MB in 3-D, on the heap).
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
      // one scratch per thread, not per stripe (it is 0.26 MB in 3-D: fresh pages per stripe)
      const std::unique_ptr<NormalWork<D>> work(new NormalWork<D>);
      std::vector<double> zv(static_cast<std::size_t>(4 * C));
      std::vector<Chunk> chunks;
#ifdef KRONPE_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (index_t i = 0; i < count; ++i) {
        index_t q0, q1;
        stripe_rows(2 * i + parity, &q0, &q1);
        chunks_of<D>(g, stride, key.data(), q0, q1, chunks);
        with_simd([&](auto level) KRONPE_SPLINE_INLINE_LAMBDA {
          normal_cells<D, level>(g, stride, N, cl, su.data(), svals.data(), C, weights ? sw.data() : nullptr,
                                 chunks.data(), index_t(chunks.size()) - 1, st, rhs, *work, zv.data());
        });
      }
    });
  }
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

}  // namespace kronpe
