// kronpe C++ core: the multigrid solver of the thin-plate smoothing systems
//
//     (diag(m) + lam R) x = b          (kronpe/smooth.h: the operator, the transfers)
//
// on grids of 1 to 3 axes (docs/math/penalties.rst; the decisions are documented in
// kronpe.solvers.multigrid, whose Python loop this is, compiled so that a V-cycle is one call):
//
// - Hierarchy: each coarser grid halves every axis of >= 3 nodes (n -> n / 2 + 1) until at most
//   `coarsest` nodes remain or no axis can be halved; m_c = P^T m, lam_c = lam 2^c / 16 (c the
//   halved axes; in the Laplacian-power form of Grid, lam_c = lam 2^c and the weights of the
//   halved axes / 4); the coarsest grid solved by a dense Cholesky factorisation in double.
// - Smoother: Chebyshev polynomials of degree `degree` in diag(A)^-1 A over [lmax / alpha, lmax],
//   the same before and after the coarse correction (a symmetric V-cycle).
// - fmg: full multigrid from zero (b restricted to the coarsest grid, solved, then on every finer
//   grid the prolonged solution corrected by `cycles` V-cycles).
// - pcg: CG preconditioned by one V-cycle, from x (from_x) or from fmg(b); stops when
//   ||z|| <= tol * scale (scale <= 0: ||x||), z the preconditioned residual; tol <= 0: after
//   exactly maxiter iterations, with no error estimate (its passes skipped). Predicted stop
//   (MultigridOptions::predicted_stop): the estimate shrinks by a steady rate per iteration, so
//   once the last one times that rate (the larger of the last two ratios of estimates, at least
//   kPcgMinRate; kPcgFirstRate after the start) is <= tol, the next update is the last one and
//   its V-cycle, computed only to measure it, is skipped (one V-cycle of 3-6 per solve of the
//   fills); the result's error is then that expectation. Grids of one axis
//   (whose rates jump) always measure.
// Work arrays are owned by the hierarchy: one object serves one thread of calls at a time.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "kronpe/smooth.h"

namespace kronpe::smooth {

struct MultigridOptions {
  int degree = 3;         // Chebyshev steps per smoothing
  double lmax = 4.0;      // Gershgorin's bound of diag(A)^-1 A for this stencil
  double alpha = 8.0;     // the smoother targets [lmax / alpha, lmax]
  index_t coarsest = 64;  // nodes at most on the coarsest grid (solved densely)
  int threads = 0;        // of the kernels (0: OpenMP's default)
  bool predicted_stop = true;  // pcg: the predicted stop (below)
};

struct PcgResult {
  index_t iterations = 0;
  double error = 0.0;  // ||z|| / scale at the end, measured or predicted (NaN with tol <= 0: not estimated)
};

// Work memory of the solvers, kept between fits: a freed block (64 KiB and more) goes to a
// process-wide cache (at most kWorkCacheBytes in all) and the next request of the same size takes
// it back. A new block's pages are faulted in on first touch, ~0.5 us per 4 KiB page here: a
// 512^2 fit's hierarchy (~12 MB) took 3000 faults, 5-10% of the fit, every time; blocks of 2 MiB
// and more are asked for as transparent huge pages where the system allows it.
void* work_allocate(std::size_t bytes);
void work_release(void* p, std::size_t bytes) noexcept;
void work_cache_clear() noexcept;                  // frees every cached block
std::size_t work_cache_bytes() noexcept;           // the bytes cached now

// An allocator that leaves new elements uninitialised (work arrays are written before they are
// read; zero-filling them cost as much as a V-cycle), from the work cache.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(work_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { work_release(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const UninitAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const UninitAllocator<U>&) const noexcept { return false; }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using WorkArray = std::vector<T, UninitAllocator<T>>;

struct MultigridSteps;

template <typename T>
class ThinPlateHierarchy {
 public:
  // m: the finest grid's data term (g.size() values >= 0), copied.
  ThinPlateHierarchy(const Grid& g, const T* m, const MultigridOptions& options);

  void set_lambda(double lam);  // every level's lam and the coarsest factorisation
  // A new data term of the same grid (the coarse ones restricted again; lam kept).
  void set_data_term(const T* m);
  // The penalty's boundary on every level (Grid::reflect; lam kept).
  void set_reflect(bool reflect);
  // The Laplacian-power form's axis weights of the finest grid (the coarse ones follow; lam kept).
  void set_weights(const double w[3]);
  // The smoother's interval [lmax / alpha, lmax] (MultigridOptions; the degree is kept).
  void set_chebyshev(double lmax, double alpha);
  // pcg's predicted stop on or off (MultigridOptions::predicted_stop)
  void set_predicted_stop(bool on) { opt_.predicted_stop = on; }
  double lambda() const { return lam_; }
  int levels() const { return int(levels_.size()); }
  const Grid& grid(int level) const { return levels_.at(level).g; }
  const WorkArray<T>& data_term(int level) const { return levels_.at(level).m; }

  // x = V b (one V-cycle from zero); b and x: finest-grid arrays, not aliased.
  void vcycle(const T* b, T* x);
  // x = the full multigrid approximation of A^-1 b.
  void fmg(const T* b, T* x, int cycles);
  // `count` V-cycles as a stationary iteration for A x = b from x (from_x) or from fmg(b), x in/out:
  // each smooths from x itself, so the residual and the update need no passes of their own (one
  // V-cycle's work per step; PCG's step adds two operator and five vector passes); omega != 1
  // over-relaxes each step, x + omega (V-cycle(x) - x) (two more vector passes). Only for a
  // hierarchy whose finest A is the system's (a diagonal data term).
  void cycles(const T* b, T* x, bool from_x, int count, double omega = 1.0);
  // cycles from `from` into x (not aliased, count >= 1): the same values as copying from into x
  // and cycles(b, x, true, count, omega), without the copy, the first smoother reading its start
  // from `from` (the held-out sweep's steps, each from the fit before it)
  void cycles_from(const T* b, const T* from, T* x, int count, double omega = 1.0);
  // out = A v for the system CG solves, when it is not the hierarchy's finest matrix (a data term
  // B^T B off the nodes: the hierarchy holds its lumped diagonal)
  using Operator = std::function<void(const T* v, T* out)>;
  // PCG for A x = b (module comment); x in/out; A the finest matrix, or *op when given.
  // stop: when it turns true (another thread), PCG returns after the iteration under way.
  PcgResult pcg(const T* b, T* x, bool from_x, double tol, index_t maxiter, double scale,
                const Operator* op = nullptr, const std::atomic<bool>* stop = nullptr);

 private:
  friend struct MultigridSteps;  // (kronpe/multigrid_steps.h: the steps shared with the device's hierarchy)
  struct Level {
    Grid g;
    bool halve[3] = {false, false, false};
    T lam = T(0);
    // m; w = diag(A)^-1 (set with lam); V-cycle: x (result), b (rhs from the finer level), the smoother's r (then the
    // residual), d, d2 (also the transfers' intermediate grids); fmg: fx (iterate)
    WorkArray<T> m, w, x, b, r, d, d2, fx;
    WorkArray<T> rd;  // diag(R) (set with the penalty): w for a new lam in one pass
    std::shared_ptr<SmoothScratch<T>> scratch;  // the smoother's bands and rings (set with the penalty)
  };

  // the smoother from x (zero: from 0); res: b - A x after it (null: not computed); save, from,
  // omega: thin_plate_smooth's fused over-relaxation
  void smooth(Level& L, T* x, const T* b, bool zero, T* res = nullptr, T* save = nullptr,
              const T* from = nullptr, T omega = T(1), const T* start = nullptr);
  // result in out (null: levels_[level].x); from zero, or (zero false) from out itself; with
  // `old` (not from zero, a level with a coarser one below) the result over-relaxed by omega from
  // the start, which old receives (cycles)
  // `start` (the finest level, old null): the start read from there, not from out
  // (thin_plate_smooth's start), and over-relaxed from there
  void vcycle_at(int level, const T* b, T* out = nullptr, bool zero = true, T* old = nullptr, T omega = T(1),
                 const T* start = nullptr);
  void restrict_down(int level, const T* f, T* c);
  void prolong_up(int level, const T* c, T* f, bool add);
  void coarsest_solve(const T* b, T* x);
  // MultigridSteps' view of the levels and kernels
  const bool* halve(int l) const { return levels_[l].halve; }
  T* x_of(int l) { return levels_[l].x.data(); }
  T* r_of(int l) { return levels_[l].r.data(); }
  T* b_of(int l) { return levels_[l].b.data(); }
  T* fx_of(int l) { return levels_[l].fx.data(); }
  T* d_of(int l) { return levels_[l].d.data(); }
  T* d2_of(int l) { return levels_[l].d2.data(); }
  void smooth_at(int l, T* x, const T* b, bool zero, T* res, T* save, const T* from, T omega, const T* start) {
    smooth(levels_[l], x, b, zero, res, save, from, omega, start);
  }
  void restrict_axis_pass(index_t outer, index_t n, index_t inner, const T* f, T* c);
  void prolong_axis_pass(index_t outer, index_t n, index_t inner, const T* c, T* f, bool add);
  void top_vcycle(const T* b, T* out, bool zero, T* old, T omega, const T* start) {
    vcycle_at(0, b, out, zero, old, omega, start);
  }
  T* z_vector();
  void copy_n(const T* from, T* to);
  void relax_n(T omega, const T* old, T* x);
  void check_data_term(const T* m) const;
  static void coarse_weights(const Level& L, Level& C);
  void coarsest_penalty();
  void penalty_changed();  // every level's rd and the coarsest R

  MultigridOptions opt_;
  std::vector<Level> levels_;
  double lam_ = 0.0;
  double theta_ = 0.0;
  std::vector<T> c1_, c2_;  // (c1, c2) of each later Chebyshev step
  std::vector<double> penalty_;         // R on the coarsest grid, dense (n, n)
  std::vector<double> chol_;            // Cholesky factor of the coarsest A, lower, (n, n)
  std::vector<double> cb_;              // the coarsest solve's vector
  WorkArray<T> r_, z_, p_, ap_;         // pcg's vectors (allocated on first use)
};


// The held-out sweep over lambda of kronpe.solvers.smooth (its _sweep with a diagonal data term and
// the thin-plate penalty, and sweep_ridges under it), compiled: the Python loop's per-step calls
// took a fifth of a 128^2 fill. On h (the training data term, the natural boundary), for each
// lambda of `lams` (largest first) `count` over-relaxed V-cycles (ThinPlateHierarchy::cycles,
// omega) from the last fit (the first fit: full multigrid alone), each fit's held-out error the
// mean of (x[hold[i]] - y_hold[i])^2 (float32 differences, summed by dot); it stops once the error rose
// twice in a row, or fell by less than `flat` of itself twice in a row; one parabolic step in log
// lambda through the best and its neighbours (at most half a step, `ratio` between neighbours) is
// kept if it measures better. Then the boundary: the best fit's step mirrored (from the fit it
// started from, at its lambda) wins unless the natural one's error is lower by more than
// boundary_margin; h is left with the boundary chosen. Then, with higher > 0, interpolating (the
// best the smallest lambda tried), mirrored and a start there: the step x + omega V (b - A_h x)
// of the higher-order system (R + higher L^3, the power form) from that start, its held-out error
// taken against the mirrored one with higher_margin. Every value as the Python loop's.
struct SweepSettings {
  std::vector<double> lams;
  double ratio = 1.0;
  double flat = 0.0;  // <= 0: no flat test
  int count = 1;
  double omega = 1.0;
  double boundary_margin = 0.0;
  double higher = 0.0;
  double higher_margin = 0.0;
};

struct SweepOutcome {
  std::vector<double> tried, errs;  // the lambdas tried (the parabolic one last) and their errors
  double best = 0.0;                // the lambda chosen (the smallest tried: interpolating)
  bool interpolating = false;
  double boundary_errs[2] = {0.0, 0.0};  // natural (the best), mirrored
  bool reflect = false;
  bool higher_tested = false;
  double higher_errs[2] = {0.0, 0.0};  // mirrored, higher-order
  bool higher = false;
};

// x_best (h's finest grid): the best fit (the mirrored one when that boundary won).
template <typename T>
SweepOutcome held_out_sweep(ThinPlateHierarchy<T>& h, const T* b, index_t nhold, const index_t* hold,
                            const T* y_hold, const SweepSettings& s, T* x_best);

// The leading component of a fill at the interpolation limit, solved ahead of the held-out sweep
// that decides whether it is wanted (kronpe.solvers.smooth, "Speculation"): on a hierarchy of its
// own of diag(m) + lam R, R the mirrored thin-plate penalty (the options' smoother and threads),
// stage 1 is PCG from full multigrid to tol (the error estimate against the solution's own
// norm); stage 2 (higher > 0) PCG for diag(m) + lam (R + higher L^3) (the power form: order 3,
// top higher, tail 1), preconditioned by the same hierarchy's V-cycle, from stage 1's solution.
// start() runs both stages on a thread of its own, beside the caller's sweep; finish(stages)
// stops the stages after the first `stages` at their next iteration, waits for the thread, and
// runs what is still missing of those stages (all of them when not started) on the calling
// thread: the same operations either way. cancel() stops every stage at its next iteration (the
// results are then not to be used); the destructor cancels and waits.
template <typename T>
class LeadSolve {
 public:
  // g: the finest grid (its penalty fields are set here); m, b: its data term and right-hand side,
  // not copied (the caller keeps them, unchanged, while the solve lives: copying them took the
  // calling thread 15 us of a 128^2 fill)
  LeadSolve(const Grid& g, const T* m, const T* b, double lam, const MultigridOptions& options, double tol,
            index_t maxiter, double higher);
  ~LeadSolve();
  LeadSolve(const LeadSolve&) = delete;
  LeadSolve& operator=(const LeadSolve&) = delete;

  void start();
  // main() on the calling thread while both stages run on a second thread of the OpenMP team
  // (libgomp's worker: a thread of our own had to share its core with that worker, spinning after
  // the last parallel region); main returns the stages wanted, the others are then stopped and
  // beside returns once the wanted ones are done. Without a second thread (no OpenMP, a team
  // of one), main() then the wanted stages, on the calling thread. Rethrows what either threw.
  void beside(const std::function<int()>& main);
  void finish(int stages);  // rethrows what the thread threw
  void cancel();
  int stages_done() const { return done_; }
  const Grid& grid() const { return g_; }
  // the hierarchy (built by the first stage; null before)
  const std::shared_ptr<ThinPlateHierarchy<T>>& hierarchy() const { return h_; }
  const WorkArray<T>& x(int stage) const { return x_[stage == 2 ? 1 : 0]; }
  PcgResult result(int stage) const { return res_[stage == 2 ? 1 : 0]; }

 private:
  void run(int stages);

  Grid g_;
  const T *m_, *b_;
  double lam_, tol_, higher_;
  index_t maxiter_;
  MultigridOptions opt_;
  std::shared_ptr<ThinPlateHierarchy<T>> h_;
  WorkArray<T> x_[2];
  PcgResult res_[2];
  int done_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_[2] = {false, false};  // stage 1's, stage 2's
  bool cancelled_ = false;
  std::exception_ptr error_;
};

}  // namespace kronpe::smooth
