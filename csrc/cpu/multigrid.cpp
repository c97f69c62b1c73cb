// kronpe C++ core: the multigrid solver of the thin-plate systems (kronpe/multigrid.h).
#include "kronpe/multigrid.h"
#include "kronpe/multigrid_steps.h"
#include "kronpe/reductions.h"
#include "kronpe/sweep.h"
#include "kronpe/threads.h"

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

#if defined(__has_include)
#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#endif
#endif

#include <algorithm>
#include <cmath>
#include <mutex>
#include <limits>
#include <new>
#include <functional>
#include <string>

namespace kronpe::smooth {

// ---- the work cache (multigrid.h) ----------------------------------------------------------
namespace {

constexpr std::size_t kWorkCacheMin = std::size_t(64) << 10;   // smaller blocks: operator new
constexpr std::size_t kWorkCacheBytes = std::size_t(256) << 20;
constexpr std::size_t kHugePage = std::size_t(2) << 20;

std::align_val_t alignment_of(std::size_t bytes) {
  return std::align_val_t(bytes >= kHugePage ? kHugePage : std::size_t(64));
}

struct WorkCache {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, void*>> blocks;  // most recently freed last
  std::size_t bytes = 0;
};

WorkCache& work_cache() {
  static WorkCache* cache = new WorkCache();  // never destroyed: blocks may be freed at exit
  return *cache;
}

}  // namespace

void* work_allocate(std::size_t bytes) {
  if (bytes < kWorkCacheMin) return ::operator new(bytes);
  WorkCache& c = work_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (std::size_t i = c.blocks.size(); i-- > 0;)
      if (c.blocks[i].first == bytes) {
        void* p = c.blocks[i].second;
        c.blocks.erase(c.blocks.begin() + std::ptrdiff_t(i));
        c.bytes -= bytes;
        return p;
      }
  }
  void* p = ::operator new(bytes, alignment_of(bytes));
#ifdef MADV_HUGEPAGE
  if (bytes >= kHugePage) madvise(p, bytes - bytes % kHugePage, MADV_HUGEPAGE);  // advice only
#endif
  return p;
}

void work_release(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kWorkCacheMin) {
    ::operator delete(p);
    return;
  }
  WorkCache& c = work_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.blocks.emplace_back(bytes, p);
  c.bytes += bytes;
  while (c.bytes > kWorkCacheBytes) {  // the oldest go first
    const auto [n, q] = c.blocks.front();
    c.bytes -= n;
    ::operator delete(q, alignment_of(n));
    c.blocks.erase(c.blocks.begin());
  }
}

void work_cache_clear() noexcept {
  WorkCache& c = work_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [n, p] : c.blocks) ::operator delete(p, alignment_of(n));
  c.blocks.clear();
  c.bytes = 0;
}

std::size_t work_cache_bytes() noexcept {
  WorkCache& c = work_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.bytes;
}

namespace {

// x += a p, r -= a q (CG's update of the iterate and the residual)
template <typename T>
KRONPE_CLONES void cg_update_range(index_t lo, index_t hi, T a, const T* __restrict p, const T* __restrict q,
                                   T* __restrict x, T* __restrict r) {
  for (index_t i = lo; i < hi; ++i) {
    x[i] += a * p[i];
    r[i] -= a * q[i];
  }
}

// p = z + beta p
template <typename T>
KRONPE_CLONES void cg_direction_range(index_t lo, index_t hi, T beta, const T* __restrict z, T* __restrict p) {
  for (index_t i = lo; i < hi; ++i) p[i] = z[i] + beta * p[i];
}

// r = b - r
template <typename T>
KRONPE_CLONES void subtract_from_range(index_t lo, index_t hi, const T* __restrict b, T* __restrict r) {
  for (index_t i = lo; i < hi; ++i) r[i] = b[i] - r[i];
}

// x = old + omega (x - old) (an over-relaxed step)
template <typename T>
KRONPE_CLONES void relax_range(index_t lo, index_t hi, T omega, const T* __restrict old, T* __restrict x) {
  for (index_t i = lo; i < hi; ++i) x[i] = old[i] + omega * (x[i] - old[i]);
}

// the same, split among threads
template <typename T>
void cg_update(index_t n, T a, const T* p, const T* q, T* x, T* r, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { cg_update_range(lo, hi, a, p, q, x, r); });
}

template <typename T>
void cg_direction(index_t n, T beta, const T* z, T* p, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { cg_direction_range(lo, hi, beta, z, p); });
}

template <typename T>
void subtract_from(index_t n, const T* b, T* r, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { subtract_from_range(lo, hi, b, r); });
}

template <typename T>
void relax(index_t n, T omega, const T* old, T* x, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { relax_range(lo, hi, omega, old, x); });
}

// Every m[i] in [0, max] (NaN fails both tests): blocks of 256 or-ed without branches, both
// tests evaluated (no short-circuit &&), so that the loop vectorises. (Counting `!(x >= 0 && x <=
// max)` per value in blocks of 64 compiled to a scalar compare and branch per value: 74 us at 451
// x 300, 10.4 us this way, g++ -O3 for x86-64-v4; a check runs in every hierarchy's build and
// set_data_term.)
template <typename T>
KRONPE_CLONES bool all_finite_nonnegative(index_t n, const T* __restrict m) {
  constexpr index_t kBlock = 256;
  const T top = std::numeric_limits<T>::max();
  index_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    int bad = 0;
    for (index_t k = 0; k < kBlock; ++k) {
      const T x = m[i + k];
      bad |= int(!(x >= T(0))) | int(!(x <= top));
    }
    if (bad) return false;
  }
  for (; i < n; ++i)
    if (!(m[i] >= T(0) && m[i] <= top)) return false;
  return true;
}

}  // namespace

template <typename T>
void ThinPlateHierarchy<T>::check_data_term(const T* m) const {
  const index_t size = levels_.empty() ? 0 : levels_[0].g.size();
  require(all_finite_nonnegative(size, m), "multigrid: m must be finite and >= 0");
}

template <typename T>
ThinPlateHierarchy<T>::ThinPlateHierarchy(const Grid& g, const T* m, const MultigridOptions& options)
    : opt_(options) {
  require(opt_.degree >= 1 && opt_.degree <= 16, "multigrid: degree must be 1 to 16");
  require(opt_.lmax > 0 && opt_.alpha > 1, "multigrid: need lmax > 0 and alpha > 1");
  require(opt_.coarsest >= 1 && opt_.coarsest <= 4096, "multigrid: coarsest must be 1 to 4096 nodes");
  checked_threads(opt_.threads);
  for (int a = 0; a < 3; ++a) require(g.n[a] >= 0, "multigrid: negative grid size");
  const index_t size = checked_mul(checked_mul(g.n[0], g.n[1], "multigrid: grid"), g.n[2], "multigrid: grid");
  require(size >= 1, "multigrid: the grid has no nodes");
  for (const LevelShape& shape : level_shapes(g, opt_.coarsest)) {
    Level L;
    L.g = shape.g;
    for (int a = 0; a < 3; ++a) L.halve[a] = shape.halve[a];
    levels_.push_back(std::move(L));
  }
  levels_[0].m.assign(m, m + size);
  check_data_term(m);
  for (std::size_t l = 0; l + 1 < levels_.size(); ++l) {
    Level& L = levels_[l];
    Level& C = levels_[l + 1];
    coarse_weights(L, C);
    C.m.resize(static_cast<std::size_t>(C.g.size()));
    L.d.resize(static_cast<std::size_t>(L.g.size()));
    L.d2.resize(L.d.size());
    restrict_down(int(l), L.m.data(), C.m.data());
  }
  for (Level& L : levels_) {
    const std::size_t n = L.m.size();
    for (auto* v : {&L.w, &L.x, &L.b, &L.r, &L.d, &L.d2, &L.rd}) v->resize(n);
  }
  for (std::size_t l = 1; l < levels_.size(); ++l) levels_[l].fx.resize(levels_[l].m.size());

  set_chebyshev(opt_.lmax, opt_.alpha);
  penalty_changed();
}

// The smoother's coefficients over [lmax / alpha, lmax].
template <typename T>
void ThinPlateHierarchy<T>::set_chebyshev(double lmax, double alpha) {
  require(std::isfinite(lmax) && lmax > 0 && std::isfinite(alpha) && alpha > 1, "multigrid: need lmax > 0 and alpha > 1");
  opt_.lmax = lmax;
  opt_.alpha = alpha;
  chebyshev_coefficients<T>(lmax, alpha, opt_.degree, theta_, c1_, c2_);
}

template <typename T>
void ThinPlateHierarchy<T>::penalty_changed() {
  for (Level& L : levels_) {
    L.scratch = smooth_scratch<T>(L.g);
    penalty_diag<T>(L.g, L.rd.data(), opt_.threads, L.scratch.get());
  }
  coarsest_penalty();
}

// R on the coarsest grid, column by column (the same kernel in double).
template <typename T>
void ThinPlateHierarchy<T>::coarsest_penalty() {
  const Level& last = levels_.back();
  const index_t n = last.g.size();
  penalty_.assign(static_cast<std::size_t>(n * n), 0.0);
  std::vector<double> unit(static_cast<std::size_t>(n), 0.0), zero(unit.size(), 0.0), col(unit.size());
  // one scratch for every column (a new one per call was most of a 64^2 hierarchy's set-up)
  const std::shared_ptr<SmoothScratch<double>> scratch = smooth_scratch<double>(last.g);
  for (index_t j = 0; j < n; ++j) {
    unit[j] = 1.0;
    thin_plate_apply<double>(last.g, unit.data(), zero.data(), 1.0, col.data(), 1, scratch.get());
    for (index_t i = 0; i < n; ++i) penalty_[i * n + j] = col[i];
    unit[j] = 0.0;
  }
  chol_.assign(penalty_.size(), 0.0);
  cb_.resize(static_cast<std::size_t>(n));
}

// The Laplacian-power form's weights on the next coarser grid: w / 4 along a halved axis (its
// spacing doubles), so that with lam_c = lam 2^c the coarse operator is the rediscretised one.
template <typename T>
void ThinPlateHierarchy<T>::coarse_weights(const Level& L, Level& C) {
  for (int a = 0; a < 3; ++a) C.g.w[a] = L.g.power() && L.halve[a] ? L.g.w[a] / 4 : L.g.w[a];
}

template <typename T>
void ThinPlateHierarchy<T>::set_reflect(bool reflect) {
  require(reflect || !levels_[0].g.power(), "multigrid: order 3 and axis weights need the mirrored boundary");
  if (levels_[0].g.reflect == reflect) return;  // nothing changes
  for (Level& L : levels_) L.g.reflect = reflect;
  penalty_changed();
  set_lambda(lam_);
}

template <typename T>
void ThinPlateHierarchy<T>::set_weights(const double w[3]) {
  require(levels_[0].g.power(), "multigrid: axis weights need the Laplacian-power form (weighted or order 3)");
  for (int a = 0; a < 3; ++a) require(std::isfinite(w[a]) && w[a] > 0, "multigrid: the axis weights must be finite and > 0");
  for (int a = 0; a < 3; ++a) levels_[0].g.w[a] = w[a];
  for (std::size_t l = 0; l + 1 < levels_.size(); ++l) coarse_weights(levels_[l], levels_[l + 1]);
  penalty_changed();
  set_lambda(lam_);
}

template <typename T>
void ThinPlateHierarchy<T>::set_data_term(const T* m) {
  check_data_term(m);
  std::copy(m, m + levels_[0].g.size(), levels_[0].m.begin());
  for (std::size_t l = 0; l + 1 < levels_.size(); ++l)
    restrict_down(int(l), levels_[l].m.data(), levels_[l + 1].m.data());
  set_lambda(lam_);
}

template <typename T>
void ThinPlateHierarchy<T>::set_lambda(double lam) {
  require(std::isfinite(lam) && lam >= 0, "multigrid: lam must be finite and >= 0");
  lam_ = lam;
  level_lambdas<T>(levels_, lam, [&](std::size_t l, T lam_l) {
    Level& L = levels_[l];
    L.lam = lam_l;
    inverse_diag<T>(L.g.size(), L.m.data(), L.lam, L.rd.data(), L.w.data(), opt_.threads);
  });
  // the coarsest A = diag(m) + lam R (+ a relative 1e-10 on the diagonal: R's null space where
  // m == 0), factorised A = L L^T
  const Level& last = levels_.back();
  const index_t n = last.g.size();
  const double lam_c = double(last.lam);
  double amax = 0.0;
  for (index_t i = 0; i < n * n; ++i) {
    chol_[i] = lam_c * penalty_[i];
    amax = std::max(amax, std::abs(chol_[i]));
  }
  for (index_t i = 0; i < n; ++i) {
    chol_[i * n + i] += double(last.m[i]);
    amax = std::max(amax, std::abs(chol_[i * n + i]));
  }
  const double eps = 1e-10 * std::max(amax, std::numeric_limits<double>::min());
  for (index_t i = 0; i < n; ++i) chol_[i * n + i] += eps;
  for (index_t j = 0; j < n; ++j) {
    double* Lj = &chol_[j * n];
    double d = Lj[j];
    for (index_t k = 0; k < j; ++k) d -= Lj[k] * Lj[k];
    d = std::sqrt(std::max(d, eps));
    Lj[j] = d;
    for (index_t i = j + 1; i < n; ++i) {
      double* Li = &chol_[i * n];
      double s = Li[j];
      for (index_t k = 0; k < j; ++k) s -= Li[k] * Lj[k];
      Li[j] = s / d;
    }
  }
}

template <typename T>
void ThinPlateHierarchy<T>::coarsest_solve(const T* b, T* x) {
  const index_t n = levels_.back().g.size();
  for (index_t i = 0; i < n; ++i) {  // L y = b
    double s = double(b[i]);
    for (index_t k = 0; k < i; ++k) s -= chol_[i * n + k] * cb_[k];
    cb_[i] = s / chol_[i * n + i];
  }
  for (index_t i = n - 1; i >= 0; --i) {  // L^T x = y
    double s = cb_[i];
    for (index_t k = i + 1; k < n; ++k) s -= chol_[k * n + i] * cb_[k];
    cb_[i] = s / chol_[i * n + i];
  }
  for (index_t i = 0; i < n; ++i) x[i] = T(cb_[i]);
}

template <typename T>
void ThinPlateHierarchy<T>::restrict_down(int level, const T* f, T* c) {
  MultigridSteps::restrict_down(*this, level, f, c);
}

template <typename T>
void ThinPlateHierarchy<T>::prolong_up(int level, const T* c, T* f, bool add) {
  MultigridSteps::prolong_up(*this, level, c, f, add);
}

template <typename T>
void ThinPlateHierarchy<T>::restrict_axis_pass(index_t outer, index_t n, index_t inner, const T* f, T* c) {
  restrict_axis<T>(outer, n, inner, f, c, opt_.threads);
}

template <typename T>
void ThinPlateHierarchy<T>::prolong_axis_pass(index_t outer, index_t n, index_t inner, const T* c, T* f, bool add) {
  prolong_axis<T>(outer, n, inner, c, f, add, opt_.threads);
}

template <typename T>
T* ThinPlateHierarchy<T>::z_vector() {
  z_.resize(static_cast<std::size_t>(levels_[0].g.size()));
  return z_.data();
}

template <typename T>
void ThinPlateHierarchy<T>::copy_n(const T* from, T* to) {
  std::copy(from, from + levels_[0].g.size(), to);
}

template <typename T>
void ThinPlateHierarchy<T>::relax_n(T omega, const T* old, T* x) {
  relax(levels_[0].g.size(), omega, old, x, opt_.threads);
}

template <typename T>
void ThinPlateHierarchy<T>::smooth(Level& L, T* x, const T* b, bool zero, T* res, T* save, const T* from,
                                   T omega, const T* start) {
  thin_plate_smooth<T>(L.g, x, b, L.m.data(), L.w.data(), L.lam, T(theta_), zero, int(c1_.size()), c1_.data(),
                       c2_.data(), L.r.data(), L.d.data(), L.d2.data(), res, opt_.threads, L.scratch.get(), save,
                       from, omega, start);
}

template <typename T>
void ThinPlateHierarchy<T>::vcycle_at(int level, const T* b, T* out, bool zero, T* old, T omega, const T* start) {
  MultigridSteps::vcycle_at(*this, level, b, out, zero, old, omega, start);
}

template <typename T>
void ThinPlateHierarchy<T>::cycles(const T* b, T* x, bool from_x, int count, double omega) {
  MultigridSteps::cycles(*this, b, x, from_x, count, omega);
}

template <typename T>
void ThinPlateHierarchy<T>::cycles_from(const T* b, const T* from, T* x, int count, double omega) {
  const index_t n = levels_[0].g.size();
  const std::less<const T*> before;  // (a total order on pointers into unrelated arrays)
  require(!before(from, x + n) || !before(x, from + n), "multigrid: cycles_from's x must not overlap from");
  MultigridSteps::cycles_from(*this, b, from, x, count, omega);
}

template <typename T>
void ThinPlateHierarchy<T>::vcycle(const T* b, T* x) {
  vcycle_at(0, b, x);
}

template <typename T>
void ThinPlateHierarchy<T>::fmg(const T* b, T* x, int cycles) {
  MultigridSteps::fmg(*this, b, x, cycles);
}

// With tol > 0 the error estimate ||z|| / ||x|| comes from fused passes: (r, z) and (z, z) in one,
// ||x|| with the update of x and r; with tol <= 0 (the lambda sweep's fixed iterations) it is not
// computed (NaN). The first V-cycle writes the first direction p itself.
template <typename T>
PcgResult ThinPlateHierarchy<T>::pcg(const T* b, T* x, bool from_x, double tol, index_t maxiter,
                                     double scale, const Operator* op, const std::atomic<bool>* stop) {
  require(maxiter >= 0, "multigrid: maxiter must be >= 0");
  Level& F = levels_[0];
  const index_t n = F.g.size();
  for (auto* v : {&r_, &z_, &p_, &ap_}) v->resize(static_cast<std::size_t>(n));
  T *r = r_.data(), *z = z_.data(), *p = p_.data(), *ap = ap_.data();
  const int threads = opt_.threads;
  struct Ops {
    ThinPlateHierarchy& h;
    Level& F;
    index_t n;
    const T* b;
    T *x, *r, *z, *p, *ap;
    const Operator* op;
    const std::atomic<bool>* stop;
    int threads;
    void start_fmg() { h.fmg(b, x, 1); }
    void residual() {
      if (op) {
        (*op)(x, r);
        subtract_from(n, b, r, threads);  // r = b - A x
      } else {
        thin_plate_residual<T>(F.g, x, b, F.m.data(), F.lam, r, threads, F.scratch.get());
      }
    }
    void precondition(bool first) { h.vcycle(r, first ? p : z); }
    void dots_first(double s[2]) { dot2(n, r, p, p, p, s, threads); }
    void dots(double s[2]) { dot2(n, r, z, z, z, s, threads); }
    double dot_rp() { return dot(n, r, p, threads); }
    double dot_rz() { return dot(n, r, z, threads); }
    double dot_xx() { return dot(n, x, x, threads); }
    double apply_p() {
      if (op) (*op)(p, ap);
      else thin_plate_apply<T>(F.g, p, F.m.data(), F.lam, ap, threads, F.scratch.get());
      return dot(n, p, ap, threads);
    }
    double update(T a, bool norm) {
      if (norm) return cg_update_norm(n, a, p, ap, x, r, threads);
      cg_update(n, a, p, ap, x, r, threads);
      return 0.0;
    }
    void direction(T beta) { cg_direction(n, beta, z, p, threads); }
    bool stopped() const { return stop && stop->load(std::memory_order_relaxed); }
  } ops{*this, F, n, b, x, r, z, p, ap, op, stop, threads};
  // (not on one axis: the rate jumps there, multigrid_steps.h)
  const bool predict = opt_.predicted_stop && (F.g.n[0] > 1) + (F.g.n[1] > 1) + (F.g.n[2] > 1) >= 2;
  return pcg_steps<T>(ops, from_x, tol, maxiter, scale, predict);
}

template class ThinPlateHierarchy<float>;
template class ThinPlateHierarchy<double>;

// ---- held_out_sweep (multigrid.h) -------------------------------------------------------------

namespace {

// The sweep's fits on the host (kronpe/sweep.h's Ops)
template <typename T>
class HostSweepOps {
 public:
  HostSweepOps(ThinPlateHierarchy<T>& h, const T* b, index_t nhold, const index_t* hold, const T* y_hold,
               const SweepSettings& s, T* x_best)
      : h_(h), b_(b), nhold_(nhold), hold_(hold), y_hold_(y_hold), s_(s), x_best_(x_best),
        n_(h.grid(0).size()), buf_(static_cast<std::size_t>(nhold)) {}
  int slots() const { return int(pool_.size()); }
  void add_slot() { pool_.emplace_back(static_cast<std::size_t>(n_)); }
  void set_lambda(double lam) { h_.set_lambda(lam); }
  void set_reflect(bool reflect) { h_.set_reflect(reflect); }
  void fmg(int k) { h_.fmg(b_, pool_[k].data(), 1); }
  void cycles_from(int from, int k) { h_.cycles_from(b_, pool_[from].data(), pool_[k].data(), s_.count, s_.omega); }
  void copy(int from, int k) { std::copy(pool_[from].begin(), pool_[from].end(), pool_[k].begin()); }
  double error(int k) { return error_of(pool_[k].data()); }
  double higher_error(int from, double lam) {
    const Grid gh = higher_grid(h_.grid(0), s_.higher);
    const T* xs = pool_[from].data();
    WorkArray<T> r(static_cast<std::size_t>(n_)), z(static_cast<std::size_t>(n_));
    thin_plate_apply<T>(gh, xs, h_.data_term(0).data(), T(lam), r.data(), 1);
    for (index_t i = 0; i < n_; ++i) r[i] = b_[i] - r[i];
    h_.vcycle(r.data(), z.data());
    const T omega = T(s_.omega);
    for (index_t i = 0; i < n_; ++i) z[i] = z[i] * omega + xs[i];
    return error_of(z.data());
  }
  void keep(int k) { std::copy(pool_[k].begin(), pool_[k].end(), x_best_); }

 private:
  double error_of(const T* w) {
    for (index_t i = 0; i < nhold_; ++i) buf_[i] = w[hold_[i]] - y_hold_[i];
    return dot(nhold_, buf_.data(), buf_.data(), 1) / double(std::max<index_t>(nhold_, 1));
  }

  ThinPlateHierarchy<T>& h_;
  const T* b_;
  index_t nhold_;
  const index_t* hold_;
  const T* y_hold_;
  const SweepSettings& s_;
  T* x_best_;
  index_t n_;
  std::vector<WorkArray<T>> pool_;  // the fits
  WorkArray<T> buf_;
};

}  // namespace

template <typename T>
SweepOutcome held_out_sweep(ThinPlateHierarchy<T>& h, const T* b, index_t nhold, const index_t* hold,
                            const T* y_hold, const SweepSettings& s, T* x_best) {
  const index_t n = h.grid(0).size();
  for (index_t i = 0; i < nhold; ++i) require(hold[i] >= 0 && hold[i] < n, "held_out_sweep: hold out of range");
  HostSweepOps<T> ops(h, b, nhold, hold, y_hold, s, x_best);
  return sweep_decisions(ops, s);
}

template SweepOutcome held_out_sweep<float>(ThinPlateHierarchy<float>&, const float*, index_t, const index_t*,
                                            const float*, const SweepSettings&, float*);
template SweepOutcome held_out_sweep<double>(ThinPlateHierarchy<double>&, const double*, index_t, const index_t*,
                                             const double*, const SweepSettings&, double*);

// ---- LeadSolve (multigrid.h) ----------------------------------------------------------------

template <typename T>
LeadSolve<T>::LeadSolve(const Grid& g, const T* m, const T* b, double lam, const MultigridOptions& options,
                        double tol, index_t maxiter, double higher)
    : g_(g), m_(m), b_(b), lam_(lam), tol_(tol), higher_(higher), maxiter_(maxiter), opt_(options) {
  require(std::isfinite(lam) && lam > 0, "LeadSolve: lam must be > 0");
  require(std::isfinite(higher) && higher >= 0, "LeadSolve: higher must be >= 0");
  require(maxiter >= 0, "LeadSolve: maxiter must be >= 0");
  g_.reflect = true;
  g_.order = 2;
  g_.weighted = false;
  g_.top = 1.0;
  g_.tail = 0.0;
}

template <typename T>
LeadSolve<T>::~LeadSolve() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

template <typename T>
void LeadSolve<T>::run(int stages) {
  const std::size_t n = static_cast<std::size_t>(g_.size());
  if (stages >= 1 && done_ < 1 && !stop_[0].load()) {
    if (!h_) {
      h_ = std::make_shared<ThinPlateHierarchy<T>>(g_, m_, opt_);
      h_->set_lambda(lam_);
    }
    x_[0].resize(n);
    res_[0] = h_->pcg(b_, x_[0].data(), false, tol_, maxiter_, 0.0, nullptr, &stop_[0]);
    if (!stop_[0].load()) done_ = 1;
  }
  if (stages >= 2 && done_ == 1 && !stop_[1].load()) {
    x_[1] = x_[0];
    if (higher_ > 0) {
      const Grid gh = higher_grid(g_, higher_);
      const std::shared_ptr<SmoothScratch<T>> scratch = smooth_scratch<T>(gh);
      const T lam = T(lam_);
      const typename ThinPlateHierarchy<T>::Operator op = [&](const T* v, T* out) {
        thin_plate_apply<T>(gh, v, m_, lam, out, opt_.threads, scratch.get());
      };
      res_[1] = h_->pcg(b_, x_[1].data(), true, tol_, maxiter_, 0.0, &op, &stop_[1]);
    } else {
      res_[1] = res_[0];
    }
    if (!stop_[1].load()) done_ = 2;
  }
}

template <typename T>
void LeadSolve<T>::start() {
  require(!thread_.joinable() && done_ == 0 && !cancelled_, "LeadSolve: already started");
  thread_ = std::thread([this] {
    try {
      run(2);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

template <typename T>
void LeadSolve<T>::beside(const std::function<int()>& main) {
  require(!thread_.joinable() && done_ == 0 && !cancelled_, "LeadSolve: already started");
  int wanted = 2;
  std::exception_ptr main_error;
  auto run_main = [&] {
    try {
      wanted = main();
    } catch (...) {
      main_error = std::current_exception();
      wanted = 0;
    }
    for (int k = std::max(wanted, 0); k < 2; ++k) stop_[k].store(true);
  };
#ifdef KRONPE_OPENMP
  // a team of two unlike tasks: its clock judges nothing, it only wakes the other thread well
  // after a pause (kronpe/threads.h) and counts as a team that ran
  const TeamClock clock(2, /*judged=*/false);
#pragma omp parallel num_threads(2)
  {
    clock.started();
    const int t = omp_get_thread_num();
    // each on one thread, in a team of its own: the worksharing directives of the kernels under
    // it (omp for, single, barrier: orphaned when a kernel runs on one thread) bind to that team,
    // not to this one, whose other thread is busy with the other task
    const ThreadsCap one(1);
#pragma omp parallel num_threads(1)
    {
      if (t == 0) {
        run_main();
      } else {
        try {
          run(2);
        } catch (...) {
          error_ = std::current_exception();
        }
      }
    }
    clock.finished();
  }
#else
  run_main();
#endif
  if (main_error) {
    cancel();
    std::rethrow_exception(main_error);
  }
  finish(wanted);  // (and without a second thread, the wanted stages now)
}

template <typename T>
void LeadSolve<T>::finish(int stages) {
  require(!cancelled_, "LeadSolve: cancelled");
  for (int k = std::max(stages, 0); k < 2; ++k) stop_[k].store(true);
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  run(stages);
}

template <typename T>
void LeadSolve<T>::cancel() {
  cancelled_ = true;
  for (auto& s : stop_) s.store(true);
}

template class LeadSolve<float>;
template class LeadSolve<double>;

}  // namespace kronpe::smooth
