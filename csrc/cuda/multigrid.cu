// kronpe CUDA backend: the thin-plate multigrid solver and the default fill on the device
// (kronpe/cuda.h, DeviceThinPlate and smooth_fill; the host's is csrc/cpu/multigrid.cpp).
//
// The penalty is applied from per-axis band tables (built on the host for each level and
// boundary): R = sum_a B_a + 2 sum_{a<b} L_a (x) L_b, B_a = D2^T D2 (natural) or L_a^2 (mirrored),
// L_a = D1^T D1 the Neumann Laplacian (kronpe/smooth.h). One thread per node, each in a fixed
// order. What is set once per level and lambda (the data terms restricted to the coarse grids,
// diag(R), the coarsest factorisation) is computed on the host by the host's own kernels and
// uploaded; the V-cycles, full multigrid and PCG run on the device, their dot products reduced
// in float64 by blocks in a fixed order (no atomics: the same bits run to run). The kernels are in
// multigrid_kernels.cuh, the device arrays' memory comes from block_cache.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "block_cache.cuh"
#include "common.cuh"
#include "kronpe/cuda.h"
#include "kronpe/multigrid.h"
#include "kronpe/multigrid_steps.h"
#include "kronpe/smooth.h"
#include "kronpe/sweep.h"
#include "multigrid_kernels.cuh"

namespace kronpe::cuda {

using detail::check;
using detail::check_launch;
using detail::DBuf;
using smooth::Grid;

namespace {

constexpr int kReduceBlocks = 256;  // partial sums of a reduction (then added in order)
constexpr index_t kMaxCoarsest = 1024;

// The calling thread's pinned buffer of the reductions' results (cudaMallocHost pins pages, a
// slow call: one per thread, kept)
double* pinned_sums() {
  thread_local double* p = nullptr;
  if (!p) check(cudaMallocHost(&p, 8 * sizeof(double)), "cudaMallocHost");
  return p;
}

// KRONPE_CUDA_TRACE=1: the fill's phases timed (each waits for the device) on stderr
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("KRONPE_CUDA_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

// ---- host helpers -----------------------------------------------------------------------------

// B_a's band (5 per node) of an axis of n nodes: D2^T D2 (natural) or L^2 (mirrored)
std::vector<float> band2(index_t n, bool reflect) {
  std::vector<float> out(static_cast<std::size_t>(5 * n), 0.f);
  // L = D1^T D1 as a dense band function
  auto L = [n](index_t j, index_t k) -> double {
    if (n < 2 || k < 0 || k >= n || j < 0 || j >= n) return 0.0;
    if (j == k) return (j == 0 || j == n - 1) ? 1.0 : 2.0;
    return std::abs(j - k) == 1 ? -1.0 : 0.0;
  };
  for (index_t j = 0; j < n; ++j)
    for (index_t k = j - 2; k <= j + 2; ++k) {
      if (k < 0 || k >= n) continue;
      double v = 0.0;
      if (reflect) {
        for (index_t r = std::max<index_t>(0, j - 1); r <= std::min<index_t>(n - 1, j + 1); ++r) v += L(j, r) * L(r, k);
      } else {
        static const double c[3] = {1.0, -2.0, 1.0};
        // rows r of D2 (r = 0 .. n - 3) with columns r .. r + 2
        for (index_t r = std::max<index_t>(0, std::max(j, k) - 2); r <= std::min(n - 3, std::min(j, k)); ++r)
          v += c[j - r] * c[k - r];
      }
      out[std::size_t(5 * j + (k - j + 2))] = float(v);
    }
  return out;
}

std::vector<float> band1(index_t n) {
  std::vector<float> out(static_cast<std::size_t>(3 * n), 0.f);
  if (n < 2) return out;
  for (index_t j = 0; j < n; ++j) {
    out[std::size_t(3 * j + 1)] = (j == 0 || j == n - 1) ? 1.f : 2.f;
    if (j > 0) out[std::size_t(3 * j)] = -1.f;
    if (j + 1 < n) out[std::size_t(3 * j + 2)] = -1.f;
  }
  return out;
}

unsigned grid_of(index_t n) { return detail::blocks_for(n, kBlock, 4096); }

}  // namespace

// ---- the hierarchy ----------------------------------------------------------------------------

struct DeviceThinPlate::Impl {
  struct Level {
    Grid g;
    bool halve[3] = {false, false, false};
    float lam = 0.f;  // (the host's copy; the kernels read lams_)
    DBuf<float> m, w, x, b, r, d, d2, fx;
    DBuf<float> rd[2];  // diag(R), natural and mirrored
    const float* b2[2][3] = {};  // B_a's bands, natural and mirrored (in bands_)
    const float* b1[3] = {};     // L_a's bands (in bands_)
    Stencil stencil(bool reflect) const {
      Stencil S{};
      S.size = int(g.size());
      for (int a = 0; a < 3; ++a) {
        S.n[a] = int(g.n[a]);
        S.b2[a] = b2[reflect][a];
        S.b1[a] = b1[a];
      }
      S.s[2] = 1;
      S.s[1] = S.n[2];
      S.s[0] = S.n[1] * S.n[2];
      return S;
    }
  };

  // m: the finest data term, on the host (null: set_data_term_device follows)
  Impl(int device, const Grid& g, const float* m, const smooth::MultigridOptions& options)
      : device_(device), opt_(options) {
    require(opt_.degree >= 1 && opt_.degree <= 16, "multigrid: degree must be 1 to 16");
    require(opt_.lmax > 0 && opt_.alpha > 1, "multigrid: need lmax > 0 and alpha > 1");
    require(opt_.coarsest >= 1 && opt_.coarsest <= kMaxCoarsest,
            "multigrid on the device: coarsest must be 1 to " + std::to_string(kMaxCoarsest) + " nodes");
    require(!g.power(), "multigrid on the device: the thin-plate penalty only (order 2, no weights)");
    for (int a = 0; a < 3; ++a) require(g.n[a] >= 1, "multigrid: every axis needs a node");
    const index_t size = checked_mul(checked_mul(g.n[0], g.n[1], "multigrid: grid"), g.n[2], "multigrid: grid");
    require(size <= index_t(std::numeric_limits<int>::max() / 2),
            "multigrid on the device: at most 2^30 nodes, got " + std::to_string(size));
    if (m) check_data_term(m, size);
    reflect_ = g.reflect;
    const char* graphs = std::getenv("KRONPE_CUDA_GRAPHS");
    use_graphs_ = !(graphs && std::string(graphs) == "0");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    host_sums_ = pinned_sums();
    part_ = DBuf<double>(static_cast<std::size_t>(kReduceBlocks * 2));
    sums_ = DBuf<double>(4);
    for (const smooth::LevelShape& shape : smooth::level_shapes(g, opt_.coarsest)) {
      Level L;
      L.g = shape.g;
      for (int a = 0; a < 3; ++a) L.halve[a] = shape.halve[a];
      levels_.push_back(std::move(L));
    }
    require(levels_.size() <= 32, "multigrid on the device: too many levels");
    // every level's bands in one upload
    std::vector<float> bands;
    std::vector<std::size_t> offsets;
    for (Level& L : levels_) {
      for (int a = 0; a < 3; ++a) {
        for (int refl = 0; refl < 2; ++refl) {
          offsets.push_back(bands.size());
          const std::vector<float> t = band2(L.g.n[a], refl == 1);
          bands.insert(bands.end(), t.begin(), t.end());
        }
        offsets.push_back(bands.size());
        const std::vector<float> t = band1(L.g.n[a]);
        bands.insert(bands.end(), t.begin(), t.end());
      }
    }
    bands_ = DBuf<float>(bands.size());
    detail::upload(bands_.get(), bands.data(), bands.size(), stream_);
    std::size_t k = 0;
    for (Level& L : levels_)
      for (int a = 0; a < 3; ++a) {
        L.b2[0][a] = bands_.get() + offsets[k++];
        L.b2[1][a] = bands_.get() + offsets[k++];
        L.b1[a] = bands_.get() + offsets[k++];
      }
    for (Level& L : levels_) {
      const std::size_t n = static_cast<std::size_t>(L.g.size());
      for (DBuf<float>* v : {&L.m, &L.w, &L.x, &L.b, &L.r, &L.d, &L.d2, &L.fx}) *v = DBuf<float>(n);
      for (int refl = 0; refl < 2; ++refl) {
        L.rd[refl] = DBuf<float>(n);
        const Stencil S = L.stencil(refl == 1);
        penalty_diag_kernel<<<grid_of(S.size), kBlock, 0, stream_>>>(S, L.rd[refl].get());
        check_launch("penalty_diag_kernel");
      }
    }
    lams_ = DBuf<float>(levels_.size());
    const index_t nmax = levels_[0].g.size();
    for (DBuf<float>* v : {&r_, &z_, &p_, &ap_, &t1_, &t2_}) *v = DBuf<float>(static_cast<std::size_t>(nmax));
    // R on the coarsest grid, dense, both boundaries (the host's kernel in double), in one upload
    const index_t nc = levels_.back().g.size();
    std::vector<double> R(static_cast<std::size_t>(2 * nc * nc));
    for (int refl = 0; refl < 2; ++refl) {
      Grid gc = levels_.back().g;
      gc.reflect = refl == 1;
      std::vector<double> unit(static_cast<std::size_t>(nc), 0.0), zero(unit.size(), 0.0), col(unit.size());
      for (index_t j = 0; j < nc; ++j) {
        unit[j] = 1.0;
        smooth::thin_plate_apply<double>(gc, unit.data(), zero.data(), 1.0, col.data(), 1);
        for (index_t i = 0; i < nc; ++i) R[std::size_t(refl * nc * nc + i * nc + j)] = col[i];
        unit[j] = 0.0;
      }
    }
    coarse_R_ = DBuf<double>(R.size());
    detail::upload(coarse_R_.get(), R.data(), R.size(), stream_);
    chol_ = DBuf<double>(static_cast<std::size_t>(nc * nc));
    inverse_ = DBuf<double>(static_cast<std::size_t>(nc * nc));
    set_chebyshev();
    if (m) set_data_term(m);
  }

  ~Impl() {
    for (auto& e : graphs_) cudaGraphExecDestroy(e.second);
    if (stream_) {
      cudaStreamSynchronize(stream_);  // (the arrays go back to the cache)
      cudaStreamDestroy(stream_);
    }
  }

  // ---- set-up ----

  static void check_data_term(const float* m, index_t n) {
    for (index_t i = 0; i < n; ++i)
      require(m[i] >= 0.f && m[i] <= std::numeric_limits<float>::max(), "multigrid: m must be finite and >= 0");
  }

  void set_chebyshev() { smooth::chebyshev_coefficients<float>(opt_.lmax, opt_.alpha, opt_.degree, theta_, c1_, c2_); }

  void set_lambda(double lam) {
    require(std::isfinite(lam) && lam >= 0, "multigrid: lam must be finite and >= 0");
    lam_ = lam;
    Lambdas all{};
    all.levels = int(levels_.size());
    smooth::level_lambdas<float>(levels_, lam, [&](std::size_t l, float lam_l) {
      Level& L = levels_[l];
      L.lam = lam_l;
      all.lam[l] = L.lam;
      const int n = int(L.g.size());
      inverse_diag_kernel<<<grid_of(n), kBlock, 0, stream_>>>(n, L.m.get(), L.lam, L.rd[reflect_].get(), L.w.get());
      check_launch("inverse_diag_kernel");
    });
    set_lambdas_kernel<<<1, 32, 0, stream_>>>(all, lams_.get());
    check_launch("set_lambdas_kernel");
    const Level& last = levels_.back();
    const int nc = int(last.g.size());
    coarsest_factor_kernel<<<1, kBlock, 0, stream_>>>(nc, coarse_R_.get() + std::size_t(reflect_) * nc * nc,
                                                      last.m.get(), last.lam, chol_.get(), inverse_.get());
    check_launch("coarsest_factor_kernel");
  }

  void set_reflect(bool reflect) {
    if (reflect == reflect_) return;
    reflect_ = reflect;
    drop_graphs();  // (their kernels hold the other boundary's bands)
    set_lambda(lam_);
  }

  void set_data_term(const float* m) {
    check_data_term(m, levels_[0].g.size());
    to_device(levels_[0].m.get(), m);
    restrict_data_term();
  }

  // the finest data term from device memory
  void set_data_term_device(const float* m) {
    copy(m, levels_[0].m.get());
    restrict_data_term();
  }

  void restrict_data_term() {
    for (std::size_t l = 0; l + 1 < levels_.size(); ++l)
      restrict_down(int(l), levels_[l].m.get(), levels_[l + 1].m.get());
    set_lambda(lam_);
  }

  // ---- kernels of a level ----

  Stencil st(const Level& L) const { return L.stencil(reflect_); }
  const float* lam_of(int level) const { return lams_.get() + level; }

  void apply(int level, const float* x, float* out, const float* b = nullptr) {
    const Level& L = levels_[level];
    const Stencil S = st(L);
    apply_kernel<<<grid_of(S.size), kBlock, 0, stream_>>>(S, x, L.m.get(), lam_of(level), b, out);
    check_launch("apply_kernel");
  }

  // out = [b -] A_h x, A_h = diag(m) + lam (higher L^3 + L^2) on the finest grid at its lambda
  // (t1_, t2_ used)
  void apply_higher(const float* x, float* out, double higher, const float* b = nullptr) {
    const Level& F = levels_[0];
    const Stencil S = st(F);
    laplacian_kernel<<<grid_of(S.size), kBlock, 0, stream_>>>(S, x, t1_.get());
    laplacian_kernel<<<grid_of(S.size), kBlock, 0, stream_>>>(S, t1_.get(), t2_.get());
    power_final_kernel<<<grid_of(S.size), kBlock, 0, stream_>>>(S, x, t2_.get(), F.m.get(), lam_of(0), float(higher),
                                                                 1.f, b, out);
    check_launch("power_final_kernel");
  }

  // the smoother (the host's thin_plate_smooth): from x (zero: from 0; start: from start), save
  // receives the start, from: the result over-relaxed from it, res: b - A x after it
  void smooth(int level, float* x, const float* b, bool zero, float* res, float* save, const float* from, float omega,
              const float* start) {
    Level& L = levels_[level];
    const Stencil S = st(L);
    const unsigned grid = grid_of(S.size);
    const float* x0 = zero ? nullptr : (start ? start : x);
    float* d = L.d.get();
    float* d2 = L.d2.get();
    cheb_start_kernel<<<grid, kBlock, 0, stream_>>>(S, x0, b, L.m.get(), L.w.get(), lam_of(level), float(theta_),
                                                    L.r.get(), d, x, save);
    check_launch("cheb_start_kernel");
    for (std::size_t k = 0; k < c1_.size(); ++k) {
      cheb_step_kernel<<<grid, kBlock, 0, stream_>>>(S, d, L.r.get(), x, L.m.get(), L.w.get(), lam_of(level), c1_[k],
                                                     c2_[k], d2);
      check_launch("cheb_step_kernel");
      std::swap(d, d2);
    }
    cheb_finish_kernel<<<grid, kBlock, 0, stream_>>>(S.size, d, x, from, omega);
    check_launch("cheb_finish_kernel");
    if (res) apply(level, x, res, b);
  }

  // MultigridSteps' view of the levels and kernels (kronpe/multigrid_steps.h)
  int levels() const { return int(levels_.size()); }
  const Grid& grid(int l) const { return levels_[l].g; }
  const bool* halve(int l) const { return levels_[l].halve; }
  float* x_of(int l) { return levels_[l].x.get(); }
  float* r_of(int l) { return levels_[l].r.get(); }
  float* b_of(int l) { return levels_[l].b.get(); }
  float* fx_of(int l) { return levels_[l].fx.get(); }
  float* d_of(int l) { return levels_[l].d.get(); }
  float* d2_of(int l) { return levels_[l].d2.get(); }
  void smooth_at(int l, float* x, const float* b, bool zero, float* res, float* save, const float* from, float omega,
                 const float* start) {
    smooth(l, x, b, zero, res, save, from, omega, start);
  }
  void restrict_axis_pass(index_t outer, index_t n, index_t inner, const float* f, float* c) {
    const index_t total = outer * smooth::coarse_length(n) * inner;
    transfer_kernel<<<grid_of(total), kBlock, 0, stream_>>>(int(outer), int(n), int(inner), f, c, false, false);
    check_launch("transfer_kernel");
  }
  void prolong_axis_pass(index_t outer, index_t n, index_t inner, const float* c, float* f, bool add) {
    transfer_kernel<<<grid_of(outer * n * inner), kBlock, 0, stream_>>>(int(outer), int(n), int(inner), c, f, true,
                                                                         add);
    check_launch("transfer_kernel");
  }
  void top_vcycle(const float* b, float* out, bool zero, float* old, float omega, const float* start) {
    vcycle0(b, out, zero, old, omega, start);
  }
  float* z_vector() { return z_.get(); }
  void copy_n(const float* from, float* to) { copy(from, to); }
  void relax_n(float omega, const float* old, float* x) {
    const int n = n0();
    relax_kernel<<<grid_of(n), kBlock, 0, stream_>>>(n, omega, old, x);
    check_launch("relax_kernel");
  }
  void restrict_down(int level, const float* f, float* c) { smooth::MultigridSteps::restrict_down(*this, level, f, c); }

  void coarsest_solve(const float* b, float* x) {
    const int n = int(levels_.back().g.size());
    coarsest_kernel<<<1, std::min(n, 1024), 0, stream_>>>(n, inverse_.get(), b, x);
    check_launch("coarsest_kernel");
  }

  void vcycle_at(int level, const float* b, float* out = nullptr, bool zero = true, float* old = nullptr,
                 float omega = 1.f, const float* start = nullptr) {
    smooth::MultigridSteps::vcycle_at(*this, level, b, out, zero, old, omega, start);
  }

  // ---- graphs: a finest-level V-cycle or a full multigrid pass is some 80 small launches, each
  // costing the host more than the device its work. Each kind of call (its flags: the topology of
  // its launches) keeps one CUDA graph: replayed when the arrays are the last call's, else the
  // new call captured and the graph updated to it in place (cudaGraphExecUpdate; instantiated
  // again only where that fails). KRONPE_CUDA_GRAPHS=0: launched one by one.
  struct GraphKey {
    const void* p[4];
    int flags;
    float omega;
    bool same_kind(const GraphKey& o) const { return flags == o.flags && omega == o.omega; }
    bool operator==(const GraphKey& o) const {
      return same_kind(o) && p[0] == o.p[0] && p[1] == o.p[1] && p[2] == o.p[2] && p[3] == o.p[3];
    }
  };

  template <typename F>
  void replay(const GraphKey& key, F&& enqueue) {
    if (!use_graphs_) {
      enqueue();
      return;
    }
    std::pair<GraphKey, cudaGraphExec_t>* slot = nullptr;
    for (auto& e : graphs_)
      if (e.first.same_kind(key)) slot = &e;
    if (slot && slot->first == key) {
      check(cudaGraphLaunch(slot->second, stream_), "cudaGraphLaunch");
      return;
    }
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    bool updated = false;
    if (slot) {
      cudaGraphExecUpdateResultInfo info;
      updated = cudaGraphExecUpdate(slot->second, graph, &info) == cudaSuccess;
      if (!updated) {
        cudaGetLastError();  // (a failed update is not an error of the next call)
        cudaGraphExecDestroy(slot->second);
      }
    } else {
      graphs_.emplace_back(key, nullptr);
      slot = &graphs_.back();
    }
    cudaError_t e = cudaSuccess;
    if (!updated) e = cudaGraphInstantiate(&slot->second, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      graphs_.erase(graphs_.begin() + (slot - graphs_.data()));
      check(e, "cudaGraphInstantiate");
    }
    slot->first = key;
    check(cudaGraphLaunch(slot->second, stream_), "cudaGraphLaunch");
  }

  void drop_graphs() {
    if (graphs_.empty()) return;
    sync();
    for (auto& e : graphs_) cudaGraphExecDestroy(e.second);
    graphs_.clear();
  }

  // vcycle_at(0, ...) through its graph
  void vcycle0(const float* b, float* out, bool zero = true, float* old = nullptr, float omega = 1.f,
               const float* start = nullptr) {
    ++vcycles_;
    if (levels_.size() == 1) {
      vcycle_at(0, b, out, zero, old, omega, start);
      return;
    }
    const GraphKey key{{b, out, old, start}, int(zero) | (old ? 2 : 0) | (start ? 4 : 0), omega};
    replay(key, [&] { vcycle_at(0, b, out, zero, old, omega, start); });
  }

  int n0() const { return int(levels_[0].g.size()); }

  void cycles(const float* b, float* x, bool from_x, int count, double omega) {
    smooth::MultigridSteps::cycles(*this, b, x, from_x, count, omega);
  }

  void cycles_from(const float* b, const float* from, float* x, int count, double omega) {
    smooth::MultigridSteps::cycles_from(*this, b, from, x, count, omega);
  }

  void fmg(const float* b, float* x, int cycles) {
    const GraphKey key{{b, x, nullptr, nullptr}, 100 + cycles, 1.f};
    replay(key, [&] { smooth::MultigridSteps::fmg(*this, b, x, cycles); });
  }

  void copy(const float* from, float* to) {
    check(cudaMemcpyAsync(to, from, sizeof(float) * std::size_t(n0()), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync (multigrid)");
  }

  // K sums (K = 1: a . b; K = 2: a . b, c . d), or the held-out sum of squares (hold), to the host
  template <int K>
  void sums(int n, const float* a, const float* b, const float* c, const float* d, const int* hold, double* out) {
    const unsigned blocks = std::min<unsigned>(kReduceBlocks, detail::blocks_for(n, kBlock));
    partial_sums_kernel<K><<<blocks, kBlock, 0, stream_>>>(n, a, b, c, d, hold, part_.get());
    check_launch("partial_sums_kernel");
    final_sums_kernel<K><<<1, 32, 0, stream_>>>(int(blocks), part_.get(), sums_.get());
    check_launch("final_sums_kernel");
    check(cudaMemcpyAsync(host_sums_, sums_.get(), K * sizeof(double), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (sums)");
    sync();
    for (int k = 0; k < K; ++k) out[k] = host_sums_[k];
  }
  double dot(const float* a, const float* b) {
    double s;
    sums<1>(n0(), a, b, nullptr, nullptr, nullptr, &s);
    return s;
  }

  void sync() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (multigrid)"); }

  // PCG (the host's ThinPlateHierarchy::pcg), higher > 0: the higher-order operator
  smooth::PcgResult pcg(const float* b, float* x, bool from_x, double tol, index_t maxiter, double scale,
                        double higher) {
    const Level& F = levels_[0];
    struct Ops {
      Impl& h;
      const float* b;
      float *x, *r, *z, *p, *ap;
      double higher;
      int n;
      void op(const float* v, float* out, const float* bb) {
        if (higher > 0) h.apply_higher(v, out, higher, bb);
        else h.apply(0, v, out, bb);
      }
      void start_fmg() { h.fmg(b, x, 1); }
      void residual() { op(x, r, b); }  // r = b - A x
      void precondition(bool first) { h.vcycle0(r, first ? p : z); }
      void dots_first(double s[2]) { h.sums<2>(n, r, p, p, p, nullptr, s); }
      void dots(double s[2]) { h.sums<2>(n, r, z, z, z, nullptr, s); }
      double dot_rp() { return h.dot(r, p); }
      double dot_rz() { return h.dot(r, z); }
      double dot_xx() { return h.dot(x, x); }
      double apply_p() {
        op(p, ap, nullptr);
        return h.dot(p, ap);
      }
      double update(float a, bool norm) {
        cg_update_kernel<<<grid_of(n), kBlock, 0, h.stream_>>>(n, a, p, ap, x, r);
        check_launch("cg_update_kernel");
        return norm ? h.dot(x, x) : 0.0;
      }
      void direction(float beta) {
        cg_direction_kernel<<<grid_of(n), kBlock, 0, h.stream_>>>(n, beta, z, p);
        check_launch("cg_direction_kernel");
      }
      bool stopped() const { return false; }
    } ops{*this, b, x, r_.get(), z_.get(), p_.get(), ap_.get(), higher, n0()};
    const bool predict = opt_.predicted_stop && (F.g.n[0] > 1) + (F.g.n[1] > 1) + (F.g.n[2] > 1) >= 2;
    return smooth::pcg_steps<float>(ops, from_x, tol, maxiter, scale, predict);
  }

  // host <-> device of a finest-grid array
  void to_device(float* d, const float* h) { detail::upload(d, h, std::size_t(n0()), stream_); }
  void to_host(float* h, const float* d) {
    check(cudaMemcpyAsync(h, d, sizeof(float) * std::size_t(n0()), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (multigrid result)");
    sync();
  }

  int device_;  // (the caller makes it current around every call)
  smooth::MultigridOptions opt_;
  cudaStream_t stream_ = nullptr;
  std::vector<Level> levels_;
  bool reflect_ = false;
  bool use_graphs_ = true;
  double lam_ = 0.0;
  double theta_ = 0.0;
  std::vector<float> c1_, c2_;
  DBuf<float> bands_, lams_;
  DBuf<double> coarse_R_, chol_, inverse_, part_, sums_;
  double* host_sums_ = nullptr;
  int vcycles_ = 0;  // finest-level V-cycles run (KRONPE_CUDA_TRACE)
  DBuf<float> r_, z_, p_, ap_, t1_, t2_;
  std::vector<std::pair<GraphKey, cudaGraphExec_t>> graphs_;
};

// ---- the public class (host arrays in and out) -----------------------------------------------

namespace {

// a finest-grid device array for a call's host input or output
struct Staged {
  DBuf<float> d;
  Staged(DeviceThinPlate::Impl& h, const float* host) : d(std::size_t(h.n0())) {
    if (host) h.to_device(d.get(), host);
  }
};

}  // namespace

DeviceThinPlate::DeviceThinPlate(int device, const Grid& g, const float* m, const smooth::MultigridOptions& options) {
  detail::DeviceGuard guard(device);
  impl_ = std::make_unique<Impl>(device, g, m, options);
}
DeviceThinPlate::~DeviceThinPlate() {
  if (!impl_) return;
  try {
    detail::DeviceGuard guard(impl_->device_);
    impl_.reset();
  } catch (...) {
  }
}

void DeviceThinPlate::set_lambda(double lam) {
  detail::DeviceGuard guard(impl_->device_);
  impl_->set_lambda(lam);
}
void DeviceThinPlate::set_reflect(bool reflect) {
  detail::DeviceGuard guard(impl_->device_);
  impl_->set_reflect(reflect);
}
void DeviceThinPlate::set_data_term(const float* m) {
  detail::DeviceGuard guard(impl_->device_);
  impl_->set_data_term(m);
}
int DeviceThinPlate::levels() const { return int(impl_->levels_.size()); }

void DeviceThinPlate::apply(const float* x, float* out, double higher) {
  detail::DeviceGuard guard(impl_->device_);
  Staged dx(*impl_, x), dout(*impl_, nullptr);
  if (higher > 0) impl_->apply_higher(dx.d.get(), dout.d.get(), higher);
  else impl_->apply(0, dx.d.get(), dout.d.get());
  impl_->to_host(out, dout.d.get());
}

void DeviceThinPlate::vcycle(const float* b, float* x) {
  detail::DeviceGuard guard(impl_->device_);
  Staged db(*impl_, b), dx(*impl_, nullptr);
  impl_->vcycle0(db.d.get(), dx.d.get());
  impl_->to_host(x, dx.d.get());
}

void DeviceThinPlate::fmg(const float* b, float* x, int cycles) {
  require(cycles >= 0, "multigrid: cycles must be >= 0");
  detail::DeviceGuard guard(impl_->device_);
  Staged db(*impl_, b), dx(*impl_, nullptr);
  impl_->fmg(db.d.get(), dx.d.get(), cycles);
  impl_->to_host(x, dx.d.get());
}

void DeviceThinPlate::cycles(const float* b, float* x, bool from_x, int count, double omega) {
  detail::DeviceGuard guard(impl_->device_);
  Staged db(*impl_, b), dx(*impl_, from_x ? x : nullptr);
  impl_->cycles(db.d.get(), dx.d.get(), from_x, count, omega);
  impl_->to_host(x, dx.d.get());
}

smooth::PcgResult DeviceThinPlate::pcg(const float* b, float* x, bool from_x, double tol, index_t maxiter,
                                       double scale, double higher) {
  detail::DeviceGuard guard(impl_->device_);
  Staged db(*impl_, b), dx(*impl_, from_x ? x : nullptr);
  const smooth::PcgResult r = impl_->pcg(db.d.get(), dx.d.get(), from_x, tol, maxiter, scale, higher);
  impl_->to_host(x, dx.d.get());
  return r;
}

// ---- the fill ---------------------------------------------------------------------------------

namespace {

// The sweep's fits on the device (kronpe/sweep.h's Ops)
class DeviceSweepOps {
 public:
  DeviceSweepOps(DeviceThinPlate::Impl& h, const float* b, int nhold, const int* hold, const float* y_hold,
                 const smooth::SweepSettings& s, float* x_best)
      : h_(h), b_(b), nhold_(nhold), hold_(hold), y_hold_(y_hold), s_(s), x_best_(x_best) {}
  int slots() const { return int(pool_.size()); }
  void add_slot() { pool_.emplace_back(std::size_t(h_.n0())); }
  void set_lambda(double lam) { h_.set_lambda(lam); }
  void set_reflect(bool reflect) { h_.set_reflect(reflect); }
  void fmg(int k) { h_.fmg(b_, pool_[k].get(), 1); }
  void cycles_from(int from, int k) { h_.cycles_from(b_, pool_[from].get(), pool_[k].get(), s_.count, s_.omega); }
  void copy(int from, int k) { h_.copy(pool_[from].get(), pool_[k].get()); }
  double error(int k) { return error_of(pool_[k].get()); }
  double higher_error(int from, double lam) {
    const int n = h_.n0();
    const float* xs = pool_[from].get();
    float* r = h_.r_.get();
    float* z = h_.p_.get();
    h_.apply_higher(xs, r, s_.higher, b_);  // (at the hierarchy's lambda, which is lam)
    h_.vcycle0(r, z);
    step_from_kernel<<<grid_of(n), kBlock, 0, h_.stream_>>>(n, float(s_.omega), xs, z);
    check_launch("step_from_kernel");
    return error_of(z);
  }
  void keep(int k) { h_.copy(pool_[k].get(), x_best_); }

 private:
  double error_of(const float* w) {
    double s = 0.0;
    if (nhold_ > 0) h_.sums<1>(nhold_, w, y_hold_, nullptr, nullptr, hold_, &s);
    return s / double(std::max(nhold_, 1));
  }

  DeviceThinPlate::Impl& h_;
  const float* b_;
  int nhold_;
  const int* hold_;
  const float* y_hold_;
  const smooth::SweepSettings& s_;
  float* x_best_;
  std::vector<DBuf<float>> pool_;
};

}  // namespace

FillOutcome smooth_fill(int device, const Grid& g, const float* m, int channels, const float* const* b,
                        const float* y, index_t nhold, const index_t* hold, const FillSettings& s,
                        float* const* x) {
  require(channels >= 1, "smooth_fill: need a channel or more");
  detail::DeviceGuard guard(device);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last = t0;
  DeviceThinPlate::Impl* traced = nullptr;
  auto phase = [&](const char* name) {
    if (!tracing()) return;
    if (traced) traced->sync();
    const Clock::time_point now = Clock::now();
    std::fprintf(stderr, "kronpe cuda fill: %-26s %8.3f ms (%8.3f in all), %d V-cycles\n", name,
                 std::chrono::duration<double, std::milli>(now - last).count(),
                 std::chrono::duration<double, std::milli>(now - t0).count(), traced ? traced->vcycles_ : 0);
    last = now;
  };
  require(!s.sweep.lams.empty(), "held_out_sweep: no lambda to try");
  const index_t n = g.size();
  require(nhold <= n, "smooth_fill: more held-out nodes than nodes");
  for (index_t i = 0; i < nhold; ++i)
    require(hold[i] >= 0 && hold[i] < n && m[hold[i]] > 0.f, "held_out_fill_sweep: hold must index nodes with data");
  // the training term and right-hand side (the held-out nodes left out), their values y / m, made
  // on the device
  std::vector<int> hold32(static_cast<std::size_t>(nhold));
  for (index_t i = 0; i < nhold; ++i) hold32[std::size_t(i)] = int(hold[i]);
  DeviceThinPlate::Impl::check_data_term(m, n);
  Grid gn = g;
  gn.reflect = false;
  phase("host set-up");
  DeviceThinPlate::Impl h(device, gn, nullptr, s.options);
  traced = &h;
  const std::size_t nn = static_cast<std::size_t>(n);
  DBuf<float> d_m(nn), d_train(nn), d_btrain(nn), d_yhold(std::max<std::size_t>(1, hold32.size())), x_best(nn);
  DBuf<int> d_hold(std::max<std::size_t>(1, hold32.size()));
  h.to_device(d_m.get(), m);
  h.to_device(d_btrain.get(), y);
  h.copy(d_m.get(), d_train.get());
  detail::upload(d_hold.get(), hold32.data(), hold32.size(), h.stream_);
  if (nhold > 0) {
    holdout_kernel<<<grid_of(nhold), kBlock, 0, h.stream_>>>(int(nhold), d_hold.get(), d_train.get(), d_btrain.get(),
                                                            d_yhold.get());
    check_launch("holdout_kernel");
  }
  h.set_data_term_device(d_train.get());
  phase("hierarchy");
  FillOutcome out;
  {
    DeviceSweepOps ops(h, d_btrain.get(), int(nhold), d_hold.get(), d_yhold.get(), s.sweep, x_best.get());
    out.sweep = smooth::sweep_decisions(ops, s.sweep);
  }
  phase("sweep");
  const smooth::SweepOutcome& o = out.sweep;
  out.lam = o.interpolating ? s.lam_interpolating : o.best;
  const double tol = o.interpolating ? s.tol_interpolating : s.tol;
  // the whole data term, the lambda chosen (the boundary is the sweep's)
  h.set_data_term_device(d_m.get());
  h.set_lambda(out.lam);
  phase("data term");
  DBuf<float> bc(nn), xc(nn);
  double scale = 0.0;
  for (int c = 0; c < channels; ++c) {
    h.to_device(bc.get(), b[c]);
    const bool from_sweep = c == 0 && s.lead;
    if (from_sweep) h.copy(x_best.get(), xc.get());
    const double higher = c == 0 && o.higher ? s.sweep.higher : 0.0;  // (as on the host: the first component)
    const smooth::PcgResult r = h.pcg(bc.get(), xc.get(), from_sweep, tol, s.maxiter, scale, higher);
    out.iterations = std::max(out.iterations, r.iterations);
    out.errors.push_back(r.error);
    h.to_host(x[c], xc.get());
    if (c == 0 && tol > 0 && channels > 1) {
      double xx = 0.0;
      for (index_t i = 0; i < n; ++i) xx += double(x[0][i]) * double(x[0][i]);
      scale = std::max(std::sqrt(xx), 1e-30);
    }
    phase(c == 0 ? "component 0" : "a later component");
  }
  return out;
}

}  // namespace kronpe::cuda