// Argument conversions shared by the bindings of the grid families (the thin-plate operator,
// the multigrid solvers on the host and the device, the masked and lattice kernels, the
// reductions and the channel mix): a grid from a C-contiguous host array, the common size of
// planes, a grid's penalty, the solvers' options and the held-out sweep's settings and outcome.
// Every array is a host descriptor, C-contiguous, of one dtype and of the grid's shape (1 to 3
// axes); kronpe.solvers.multigrid owns them and makes them so.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "kronpe/multigrid.h"
#include "kronpe/smooth.h"

namespace kronpe::bindings {

// The grid of `x` (1 to 3 axes, C-contiguous, host), padded to three axes.
inline smooth::Grid grid_of(const Array& x, const char* name) {
  bindings::require_host(x, name);
  require(x.ndim() >= 1 && x.ndim() <= 3,
          std::string(name) + " must have 1 to 3 axes, got " + std::to_string(x.ndim()));
  smooth::Grid g;
  const int pad = 3 - x.ndim();
  index_t stride = 1;
  bool empty = false;
  for (int a = 0; a < x.ndim(); ++a) empty = empty || x.shape[a] == 0;
  for (int a = x.ndim() - 1; a >= 0; --a) {
    g.n[pad + a] = x.shape[a];
    require(empty || x.shape[a] <= 1 || x.strides[a] == stride,
            std::string(name) + " must be C-contiguous");
    stride *= x.shape[a];
  }
  return g;
}

// The common size of C-contiguous host arrays of one dtype (planes of a grid, any shape).
inline index_t flat_planes(const std::vector<Array>& arrays, const char* name) {
  index_t n = -1;
  for (const Array& a : arrays) {
    bindings::require_host(a, name);
    require(a.dtype == arrays[0].dtype, std::string(name) + " must share one dtype");
    index_t size = 1, stride = 1;
    for (index_t s : a.shape) size *= s;
    for (int d = a.ndim() - 1; d >= 0; --d) {
      require(size == 0 || a.shape[d] <= 1 || a.strides[d] == stride, std::string(name) + " must be C-contiguous");
      stride *= a.shape[d];
    }
    require(n < 0 || size == n, std::string(name) + " must have one size");
    n = size;
  }
  return n;
}

// The penalty of a grid: its boundary, order and (None: unweighted) axis weights, one per axis of
// the array (the padding axes get 1).
struct Penalty {
  bool reflect = false;
  int order = 2;
  std::optional<std::vector<double>> weights;
  double top = 1.0, tail = 0.0;  // the power form's polynomial (smooth::Grid)

  void set(smooth::Grid& g, int ndim) const {
    g.reflect = reflect;
    g.order = order;
    g.top = top;
    g.tail = tail;
    if (!weights) return;
    require(int(weights->size()) == ndim, "weights must have one value per axis (" + std::to_string(ndim) + "), got " +
                                              std::to_string(weights->size()));
    g.weighted = true;
    for (int a = 0; a < ndim; ++a) g.w[3 - ndim + a] = (*weights)[std::size_t(a)];
  }
};

// Every array has x's grid, dtype and place; then f(grid, T{}).
template <typename F>
void same_grid(const Array& x, std::initializer_list<std::pair<const Array*, const char*>> others,
               const Penalty& pen, F&& f) {
  smooth::Grid g = grid_of(x, "x");
  pen.set(g, x.ndim());
  for (const auto& [a, name] : others) {
    const smooth::Grid h = grid_of(*a, name);
    require(a->ndim() == x.ndim() && h.n[0] == g.n[0] && h.n[1] == g.n[1] && h.n[2] == g.n[2],
            std::string(name) + " must have x's shape");
    require(a->dtype == x.dtype, std::string(name) + " must have x's dtype " + x.dtype);
  }
  bindings::dispatch1(x.dtype, [&](auto t) {
    using T = decltype(t);
    f(g, T{});
  });
}

template <typename T>
T* p(const Array& a, const char* name) {
  return bindings::data<T>(a, name);
}

template <typename P>
std::vector<P*> plane_pointers(const std::vector<Array>& arrays, const char* name) {
  std::vector<P*> out;
  for (const Array& a : arrays) out.push_back(p<P>(a, name));
  return out;
}

inline smooth::MultigridOptions options(int degree, double lmax, double alpha, index_t coarsest, int threads) {
  smooth::MultigridOptions o;
  o.degree = degree;
  o.lmax = lmax;
  o.alpha = alpha;
  o.coarsest = coarsest;
  o.threads = threads;
  return o;
}

// The held-out sweep's settings from the binding's arguments.
inline smooth::SweepSettings sweep_settings(const std::vector<double>& lams, double ratio, double flat, int count, double omega,
                                     double boundary_margin, double higher, double higher_margin) {
  smooth::SweepSettings st;
  st.lams = lams;
  st.ratio = ratio;
  st.flat = flat;
  st.count = count;
  st.omega = omega;
  st.boundary_margin = boundary_margin;
  st.higher = higher;
  st.higher_margin = higher_margin;
  return st;
}

inline py::dict sweep_outcome(const smooth::SweepOutcome& o) {
  py::dict d;
  d["tried"] = o.tried;
  d["errs"] = o.errs;
  d["best"] = o.best;
  d["interpolating"] = o.interpolating;
  d["boundary_errs"] = std::vector<double>{o.boundary_errs[0], o.boundary_errs[1]};
  d["reflect"] = o.reflect;
  if (o.higher_tested) {
    d["higher_errs"] = std::vector<double>{o.higher_errs[0], o.higher_errs[1]};
    d["higher"] = o.higher;
  }
  return d;
}

}  // namespace kronpe::bindings
