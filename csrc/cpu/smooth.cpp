// kronpe C++ core: the thin-plate operator's kernels on the CPU (apply, residual, the Chebyshev
// smoother's steps and its fused wavefront pass, the diagonals; see kronpe/smooth.h), their
// per-grid scratch, and the team rule of the smoothing kernels. The rows of R v are in
// smooth_rows.h, the grid transfers in transfer.cpp, the inner products in reductions.cpp.
#include "kronpe/smooth.h"

#include "kronpe/reductions.h"
#include "kronpe/threads.h"
#include "smooth_rows.h"
#include "smooth_teams.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <type_traits>
#include <vector>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::smooth {

using detail::kMinNodesPerThread;
using detail::pick_threads;

namespace {

// Beyond two threads, a team takes one thread per g_nodes_per_extra_thread nodes at most: the
// wavefront's time steps end in a barrier, which costs more the more threads wait at it, and on
// many-core VMs late threads mark the cores busy (kronpe/threads.h). One thread per 2^16 nodes keeps
// the scattered fit of 25% of a 512^2 photograph flat from 6 to 16 threads on a 16-core Xeon (44 ms;
// one per 2^15 slows to 75 ms at 16 threads). 512^2 takes 4 threads, 256^2 two.
// kronpe._core._tuning.set_nodes_per_extra_thread changes it, for measurements on other machines.
std::atomic<index_t> g_nodes_per_extra_thread{index_t(1) << 16};
// Rows per time step of the smoother's wavefront on one thread (thin_plate_smooth).
constexpr index_t kBlockRows = 8;

}  // namespace

namespace detail {

int pick_threads(int threads, index_t nodes) {
  checked_threads(threads);
#ifdef KRONPE_OPENMP
  const index_t cap = threads > 0 ? threads : kernel_threads();  // fewer while the cores are busy
  const index_t extra = g_nodes_per_extra_thread.load(std::memory_order_relaxed);
  const index_t by_work = std::min(nodes / kMinNodesPerThread, std::max<index_t>(2, nodes / extra));
  return int(std::max<index_t>(1, std::min<index_t>(cap, by_work)));
#else
  return 1;
#endif
}

}  // namespace detail

template <typename T>
class SmoothScratch {
 public:
  explicit SmoothScratch(const Grid& grid) : g(grid), bands(grid) {}
  bool serves(const Grid& h) const {
    bool same = g.reflect == h.reflect && g.order == h.order && g.weighted == h.weighted && g.top == h.top &&
                g.tail == h.tail;
    for (int a = 0; a < 3; ++a) same = same && g.n[a] == h.n[a] && g.w[a] == h.w[a];
    return same;
  }
  struct Thread {
    std::vector<T> acc, dg;          // scratch rows
    std::vector<RowsOf<T>> stencil;  // one ring per stage (for_rows: the first)
  };
  // thread t's scratch for `stages` stages, reset (made before a team starts: threads is not
  // resized inside one)
  void prepare(int nt, int stages) {
    if (int(threads.size()) < nt) threads.resize(static_cast<std::size_t>(nt));
    for (int t = 0; t < nt; ++t) {
      Thread& th = threads[std::size_t(t)];
      th.acc.resize(static_cast<std::size_t>(g.n[2]));
      th.dg.resize(static_cast<std::size_t>(g.n[2]));
      while (int(th.stencil.size()) < stages) th.stencil.emplace_back(g);
      for (RowsOf<T>& rows : th.stencil) rows.reset();
    }
  }
  Grid g;
  Bands<T> bands;
  std::vector<Thread> threads;
};

template <typename T>
std::shared_ptr<SmoothScratch<T>> smooth_scratch(const Grid& g) {
  check_grid(g);
  return std::make_shared<SmoothScratch<T>>(g);
}

// The scratch of grid g: `given` when it serves g, else a new one held by `own`.
template <typename T>
SmoothScratch<T>* scratch_for(const Grid& g, SmoothScratch<T>* given, std::shared_ptr<SmoothScratch<T>>& own) {
  if (given && given->serves(g)) return given;
  own = std::make_shared<SmoothScratch<T>>(g);
  return own.get();
}

namespace {

// Runs row(i0, i1, acc, dg, offset, stencil) over every row of the grid, rows split among threads
// in contiguous blocks, in increasing order; acc and dg are per-thread scratch rows, stencil the
// thread's RowsOf (R v of a row).
template <typename T, typename Row>
void for_rows(const Grid& g, int threads, Row&& row, SmoothScratch<T>* scratch = nullptr) {
  check_grid(g);
  const index_t rows = g.n[0] * g.n[1], n2 = g.n[2];
  if (g.size() == 0) return;
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const int nt = pick_threads(threads, g.size());
  scratch->prepare(nt, 1);
  run_team(nt, [&](int t, int) {
    auto& th = scratch->threads[std::size_t(t)];
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (index_t r = 0; r < rows; ++r) row(r / g.n[1], r % g.n[1], th.acc.data(), th.dg.data(), r * n2, th.stencil[0]);
  });
}

// 1 / a, or 0 for a node whose row of A is zero (no data, no penalty: it is left as it is).
template <typename T>
inline T inverse(T a) {
  return a > T(0) ? T(1) / a : T(0);
}

// The per-row epilogues, with every pointer restrict-qualified so that they vectorise. acc is
// (R x) of the row, w diag(A)^-1 of the row (0 where the row of A is zero).

// dg = diag(R) of a row -> diag(A)^-1 = inverse(m + lam dg), in place.
template <typename T>
KRONPE_CLONES void invert_row(index_t n, const T* __restrict m, T lam, T* __restrict dg) {
  for (index_t i = 0; i < n; ++i) dg[i] = inverse(m[i] + lam * dg[i]);
}
// w = inverse(m + lam rd): invert_row into another array.
template <typename T>
KRONPE_CLONES void invert_row_from(index_t n, const T* __restrict m, T lam, const T* __restrict rd,
                                   T* __restrict w) {
  for (index_t i = 0; i < n; ++i) w[i] = inverse(m[i] + lam * rd[i]);
}
template <typename T>
KRONPE_CLONES void apply_row(index_t n, const T* __restrict x, const T* __restrict m, T lam,
                             const T* __restrict acc, T* __restrict out) {
  for (index_t i = 0; i < n; ++i) out[i] = m[i] * x[i] + lam * acc[i];
}

template <typename T>
KRONPE_CLONES void residual_row(index_t n, const T* __restrict x, const T* __restrict b,
                                const T* __restrict m, T lam, const T* __restrict acc,
                                T* __restrict out) {
  for (index_t i = 0; i < n; ++i) out[i] = b[i] - (m[i] * x[i] + lam * acc[i]);
}

template <typename T>
KRONPE_CLONES void start_row(index_t n, const T* __restrict x, const T* __restrict b,
                             const T* __restrict m, T lam, T inv_theta, const T* __restrict acc,
                             const T* __restrict w, T* __restrict r, T* __restrict d) {
  if (x) {
    for (index_t i = 0; i < n; ++i) {
      const T res = (b[i] - (m[i] * x[i] + lam * acc[i])) * w[i];
      r[i] = res;
      d[i] = res * inv_theta;
    }
  } else {
    for (index_t i = 0; i < n; ++i) {
      const T res = b[i] * w[i];
      r[i] = res;
      d[i] = res * inv_theta;
    }
  }
}

// Where a smoother step reads the iterate's old values: x itself (in place), `start` (x only
// written: the smoother's start in another array), or zero (x only written, 0 + d: the bits of
// filling x with zeros first, without that pass).
enum class Old { X, Start, Zero };

template <Old S, typename T>
inline T old_value(const T* __restrict x, const T* __restrict start, index_t i) {
  if constexpr (S == Old::X) return x[i];
  else if constexpr (S == Old::Start) return start[i];
  else return T(0);
}

// One Chebyshev step over a row; x = old + d (start: Old::Start's array, else unused).
template <Old S, typename T>
KRONPE_CLONES void step_row(index_t n, const T* __restrict d, T* __restrict r, const T* __restrict start,
                            T* __restrict x, const T* __restrict m, T lam, T c1, T c2, const T* __restrict acc,
                            const T* __restrict w, T* __restrict d_out) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    r[i] = ri;
    x[i] = old_value<S>(x, start, i) + di;
    d_out[i] = c1 * di + c2 * ri;
  }
}

}  // namespace

template <typename T>
void thin_plate_apply(const Grid& g, const T* x, const T* m, T lam, T* out, int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T*, index_t o, RowsOf<T>& rows) {
    rows.row(B, x, i0, i1, acc);
    apply_row(g.n[2], x + o, m + o, lam, acc, out + o);
  }, scratch);
}

template <typename T>
void thin_plate_residual(const Grid& g, const T* x, const T* b, const T* m, T lam, T* out,
                         int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T*, index_t o, RowsOf<T>& rows) {
    rows.row(B, x, i0, i1, acc);
    residual_row(g.n[2], x + o, b + o, m + o, lam, acc, out + o);
  }, scratch);
}

template <typename T>
void thin_plate_cheb_start(const Grid& g, const T* x, const T* b, const T* m, T lam, T theta,
                           T* r, T* d, int threads) {
  const Bands<T> B(g);
  const T inv_theta = T(1) / theta;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T* dg, index_t o, RowsOf<T>& rows) {
    if (x) rows.row(B, x, i0, i1, acc);
    r_diag_row(B, i0, i1, dg);
    invert_row(g.n[2], m + o, lam, dg);
    start_row(g.n[2], x ? x + o : nullptr, b + o, m + o, lam, inv_theta, acc, dg, r + o, d + o);
  });
}

template <typename T>
void thin_plate_cheb_step(const Grid& g, const T* d, T* r, T* x, const T* m, T lam, T c1, T c2,
                          T* d_out, int threads) {
  const Bands<T> B(g);
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T* dg, index_t o, RowsOf<T>& rows) {
    rows.row(B, d, i0, i1, acc);
    r_diag_row(B, i0, i1, dg);
    invert_row(g.n[2], m + o, lam, dg);
    step_row<Old::X>(g.n[2], d + o, r + o, static_cast<const T*>(nullptr), x + o, m + o, lam, c1, c2, acc, dg,
                     d_out + o);
  });
}

namespace {

// The last Chebyshev step with the smoother's final x += d_out folded in (d_out not stored):
// the same operations as step_row followed by x += d_out.
template <Old S, typename T>
KRONPE_CLONES void last_step_row(index_t n, const T* __restrict d, const T* __restrict r,
                                 const T* __restrict start, T* __restrict x, const T* __restrict m, T lam, T c1,
                                 T c2, const T* __restrict acc, const T* __restrict w) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    const T xi = old_value<S>(x, start, i) + di;
    x[i] = xi + (c1 * di + c2 * ri);
  }
}

// last_step_row with the result over-relaxed from `from`: x = from + omega (x_s - from).
template <typename T>
KRONPE_CLONES void last_step_relaxed_row(index_t n, const T* __restrict d, const T* __restrict r,
                                         T* __restrict x, const T* __restrict m, T lam, T c1, T c2,
                                         const T* __restrict acc, const T* __restrict w,
                                         const T* __restrict from, T omega) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    const T xi = x[i] + di;
    const T xs = xi + (c1 * di + c2 * ri);
    x[i] = from[i] + omega * (xs - from[i]);
  }
}

// x = from + omega ((x + d) - from) over a row (degree 1, over-relaxed).
template <typename T>
KRONPE_CLONES void add_relaxed_row(index_t n, const T* __restrict d, T* __restrict x, const T* __restrict from,
                                   T omega) {
  for (index_t i = 0; i < n; ++i) x[i] = from[i] + omega * ((x[i] + d[i]) - from[i]);
}

// x = old + d over a row (the smoother of degree 1: its start is its only step).
template <Old S, typename T>
KRONPE_CLONES void add_row(index_t n, const T* __restrict d, const T* __restrict start, T* __restrict x) {
  for (index_t i = 0; i < n; ++i) x[i] = old_value<S>(x, start, i) + d[i];
}

}  // namespace

// The stages (start, steps, residual) run as a wavefront over the rows: stage s works on row
// t - s * lag at time t, lag = the rows a stencil reaches (2 on a plane, two planes in 3-D), so
// every row a stage reads was finished by the stage before it, and a row of d is overwritten (two
// stages later) only once no stage reads it any more. The rows touched at one time lie within
// (stages x lag) rows: the smoother's work arrays stay in cache instead of streaming through
// memory once per stage. Threads take contiguous blocks of rows; each leaves out the rows within
// s * lag of a block boundary in stage s (they need the neighbour's rows), which one thread then
// finishes stage by stage. Every node gets the same operations as from the separate kernels.
template <typename T>
void thin_plate_smooth(const Grid& g, T* x, const T* b, const T* m, const T* w, T lam, T theta,
                       bool zero, int nsteps, const T* c1, const T* c2, T* r, T* d, T* d2, T* res,
                       int threads, SmoothScratch<T>* scratch, T* save, const T* from, T omega,
                       const T* start) {
  check_grid(g);
  require(nsteps >= 0, "thin_plate_smooth: nsteps must be >= 0");
  require(!(save && zero) && !(from && (res || zero)), "thin_plate_smooth: save needs a start x; from, no res");
  require(!(start && (zero || save || from)), "thin_plate_smooth: start excludes zero, save and from");
  if (g.size() == 0) return;
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  const index_t rows = g.n[0] * g.n[1], n2 = g.n[2];
  const index_t lag = g.power() ? PowerRows<T>::lag(g) : (g.n[0] > 1 ? std::max<index_t>(2, 2 * g.n[1]) : 2);
  // degree 1 (no steps): x += d is a stage of its own, a lag behind the start, whose stencil reads
  // x around its row (added in the start's stage, x changed under the next rows' stencils)
  const int adds = nsteps == 0 ? 1 : 0;
  const int stages = 1 + nsteps + adds + (res ? 1 : 0);
  const T inv_theta = T(1) / theta;
  int nt = pick_threads(threads, g.size());
  // each block boundary leaves a gap of 2 lag s rows in stage s, finished by one thread: blocks
  // must be at least the widest gap (a 32 x 64 x 64 volume: lag 128 rows, 19% of the row-stages
  // in the gaps; still 1.7x on two threads)
  if (rows < index_t(nt) * 2 * lag * std::max(1, stages - 1)) nt = 1;
  // stage s on rows [q0, q1): the stencil's R v row by row into acc (one row after another), then
  // the stage's epilogue over the rows at once (contiguous: each node gets the same operations as
  // from a row's call); acc: the calling thread's scratch, (q1 - q0) rows
  const bool plane = g.n[0] == 1;
  auto run = [&](int s, index_t q0, index_t q1, T* acc, std::vector<RowsOf<T>>& stencil) {
    const index_t o = q0 * n2, len = (q1 - q0) * n2;
    auto rows_of = [&](int k, const T* v) {
      for (index_t q = q0; q < q1; ++q)  // (a plane's rows need no division)
        stencil[k].row(B, v, plane ? 0 : q / g.n[1], plane ? q : q % g.n[1], acc + (q - q0) * n2);
    };
    if (s == 0) {
      // (stage 0 reads the start: with `start`, from there; in place, these rows of x still hold it)
      const T* x0 = start ? start : x;
      if (!zero) rows_of(0, x0);
      if (save) std::copy(x + o, x + o + len, save + o);
      start_row(len, zero ? nullptr : x0 + o, b + o, m + o, lam, inv_theta, acc, w + o, r + o, d + o);
    } else if (s <= nsteps + adds) {
      // the first step writes x from the start: x itself (in place), `start`, or zero (0 + d, x
      // not read: no pass filling it with zeros first); later steps update x in place
      const Old old = s > 1 || !(start || zero) ? Old::X : (start ? Old::Start : Old::Zero);
      const T* x0 = start ? start + o : nullptr;
      auto by_old = [&](auto&& f) {
        if (old == Old::Start) f(std::integral_constant<Old, Old::Start>());
        else if (old == Old::Zero) f(std::integral_constant<Old, Old::Zero>());
        else f(std::integral_constant<Old, Old::X>());
      };
      if (adds) {  // degree 1: x = old + d
        if (from) add_relaxed_row(len, d + o, x + o, from + o, omega);
        else by_old([&](auto S) { add_row<decltype(S)::value>(len, d + o, x0, x + o); });
        return;
      }
      const T* din = (s % 2 == 1 ? d : d2);
      T* dout = (s % 2 == 1 ? d2 : d);
      rows_of(s, din);
      const T c1s = c1[s - 1], c2s = c2[s - 1];
      if (s < nsteps) {
        by_old([&](auto S) {
          step_row<decltype(S)::value>(len, din + o, r + o, x0, x + o, m + o, lam, c1s, c2s, acc, w + o, dout + o);
        });
      } else if (from) {
        last_step_relaxed_row(len, din + o, r + o, x + o, m + o, lam, c1s, c2s, acc, w + o, from + o, omega);
      } else {
        by_old([&](auto S) {
          last_step_row<decltype(S)::value>(len, din + o, r + o, x0, x + o, m + o, lam, c1s, c2s, acc, w + o);
        });
      }
    } else {
      rows_of(s, x);
      residual_row(len, x + o, b + o, m + o, lam, acc, res + o);
    }
  };
  scratch->prepare(nt, stages);
  // on one thread the time steps take kBlockRows rows of every stage at once: the same wavefront
  // (every row a stage reads was finished by the stage before it in this step or an earlier one),
  // a kBlockRows-th of the epilogue calls (the rows' fixed costs were 31% of a 128^2 V-cycle)
  const index_t block = nt == 1 ? std::min<index_t>(kBlockRows, rows) : 1;
  if (block > 1) scratch->threads[0].acc.resize(static_cast<std::size_t>(block * n2));
  run_team(nt, [&](int t, int count) {
    std::vector<T>& acc = scratch->threads[std::size_t(t)].acc;
    std::vector<RowsOf<T>>& stencil = scratch->threads[std::size_t(t)].stencil;
    const index_t lo = rows * t / count, hi = rows * (t + 1) / count;
    for (index_t time = lo; time < hi + lag * (stages - 1); time += block)
      for (int s = 0; s < stages; ++s) {
        const index_t first = t > 0 ? lo + lag * s : lo, last = t + 1 < count ? hi - lag * s : hi;
        const index_t q0 = std::max(time - lag * s, first), q1 = std::min(time + block - lag * s, last);
        if (q0 < q1) run(s, q0, q1, acc.data(), stencil);
      }
    if (count == 1) return;
#ifdef KRONPE_OPENMP
#pragma omp barrier
#pragma omp single
#endif
    for (int s = 1; s < stages; ++s)  // the rows around each block boundary, stage by stage
      for (int k = 1; k < count; ++k) {
        const index_t edge = rows * k / count;
        for (index_t q = edge - lag * s; q < edge + lag * s; ++q) run(s, q, q + 1, acc.data(), stencil);
      }
  });
}

template <typename T>
void thin_plate_diag(const Grid& g, const T* m, T lam, T* out, int threads, bool inverted) {
  const Bands<T> B(g);
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T*, T* dg, index_t o, RowsOf<T>&) {
    r_diag_row(B, i0, i1, dg);
    if (inverted) {
      invert_row_from(g.n[2], m + o, lam, dg, out + o);
    } else {
      for (index_t i = 0; i < g.n[2]; ++i) out[o + i] = m[o + i] + lam * dg[i];
    }
  });
}

template <typename T>
void penalty_diag(const Grid& g, T* out, int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T*, T*, index_t o, RowsOf<T>&) { r_diag_row(B, i0, i1, out + o); },
              scratch);
}

template <typename T>
void inverse_diag(index_t n, const T* m, T lam, const T* rd, T* w, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { invert_row_from(hi - lo, m + lo, lam, rd + lo, w + lo); });
}

index_t set_nodes_per_extra_thread(index_t nodes) {
  require(nodes >= kMinNodesPerThread, "set_nodes_per_extra_thread: nodes must be at least 8192");
  return g_nodes_per_extra_thread.exchange(nodes);
}

#define KRONPE_SMOOTH_INSTANTIATE(T)                                                            \
  template void thin_plate_apply<T>(const Grid&, const T*, const T*, T, T*, int, SmoothScratch<T>*); \
  template void thin_plate_residual<T>(const Grid&, const T*, const T*, const T*, T, T*, int,        \
                                       SmoothScratch<T>*);                                           \
  template void thin_plate_cheb_start<T>(const Grid&, const T*, const T*, const T*, T, T, T*,  \
                                         T*, int);                                              \
  template void thin_plate_cheb_step<T>(const Grid&, const T*, T*, T*, const T*, T, T, T, T*,  \
                                        int);                                                   \
  template void thin_plate_diag<T>(const Grid&, const T*, T, T*, int, bool);                         \
  template void penalty_diag<T>(const Grid&, T*, int, SmoothScratch<T>*);                                          \
  template void inverse_diag<T>(index_t, const T*, T, const T*, T*, int);                       \
  template void thin_plate_smooth<T>(const Grid&, T*, const T*, const T*, const T*, T, T, bool, \
                                     int, const T*, const T*, T*, T*, T*, T*, int,               \
                                     SmoothScratch<T>*, T*, const T*, T, const T*);               \
  template std::shared_ptr<SmoothScratch<T>> smooth_scratch<T>(const Grid&);

KRONPE_SMOOTH_INSTANTIATE(float)
KRONPE_SMOOTH_INSTANTIATE(double)

}  // namespace kronpe::smooth
