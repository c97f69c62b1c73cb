// Bindings of the thin-plate operator and the multigrid transfers (kronpe/smooth.h), CPU only.
// Every array is a host descriptor, C-contiguous, of one dtype and of the grid's shape (1 to 3
// axes); kronpe.solvers.multigrid owns them and makes them so.
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "kronpe/channels.h"
#include "kronpe/gcv.h"
#include "kronpe/cuda.h"
#include "kronpe/masked.h"
#include "kronpe/multigrid.h"
#include "kronpe/reductions.h"
#include "kronpe/smooth.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;

namespace {

// The grid of `x` (1 to 3 axes, C-contiguous, host), padded to three axes.
smooth::Grid grid_of(const Array& x, const char* name) {
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
index_t flat_planes(const std::vector<Array>& arrays, const char* name) {
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

// The finest grid's arrays of a hierarchy: its shape (padded) and dtype T.
template <typename P, typename T>
P* finest(const smooth::ThinPlateHierarchy<T>& h, const Array& a, const char* name) {
  const smooth::Grid g = grid_of(a, name);
  const smooth::Grid& f = h.grid(0);
  require(g.n[0] == f.n[0] && g.n[1] == f.n[1] && g.n[2] == f.n[2],
          std::string(name) + " must have the finest grid's shape");
  return p<P>(a, name);
}

smooth::MultigridOptions options(int degree, double lmax, double alpha, index_t coarsest, int threads) {
  smooth::MultigridOptions o;
  o.degree = degree;
  o.lmax = lmax;
  o.alpha = alpha;
  o.coarsest = coarsest;
  o.threads = threads;
  return o;
}

template <typename T>
void register_hierarchy(py::module_& m, const char* name) {
  using H = smooth::ThinPlateHierarchy<T>;
  py::class_<H, std::shared_ptr<H>>(m, name,
                "The multigrid hierarchy of diag(m) + lam R on a grid of 1 to 3 axes (kronpe/multigrid.h; "
                "internal: kronpe.solvers.multigrid.ThinPlateMG wraps it).")
      .def(py::init([](const Array& mm, int degree, double lmax, double alpha, index_t coarsest, bool reflect,
                       int threads, int order, const std::optional<std::vector<double>>& weights, double top,
         double tail) {
             smooth::Grid g = grid_of(mm, "m");
             Penalty{reflect, order, weights, top, tail}.set(g, mm.ndim());
             const smooth::MultigridOptions o = options(degree, lmax, alpha, coarsest, threads);
             const T* mp = p<const T>(mm, "m");
             py::gil_scoped_release release;
             return std::make_shared<H>(g, mp, o);
           }),
           py::arg("m"), py::arg("degree"), py::arg("lmax"), py::arg("alpha"), py::arg("coarsest"),
           py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2, py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0)
      .def("set_lambda", [](H& h, double lam) { h.set_lambda(lam); }, py::arg("lam"))
      .def(
          "set_weights",
          [](H& h, const std::vector<double>& w) {
            const smooth::Grid& g = h.grid(0);
            const int ndim = int(w.size());
            require(ndim >= 1 && ndim <= 3, "set_weights: one weight per axis (1 to 3)");
            double full[3] = {g.w[0], g.w[1], g.w[2]};
            for (int a = 0; a < ndim; ++a) full[3 - ndim + a] = w[std::size_t(a)];
            h.set_weights(full);
          },
          py::arg("weights"), "the Laplacian-power form's axis weights (lam kept)")
      .def("set_chebyshev", [](H& h, double lmax, double alpha) { h.set_chebyshev(lmax, alpha); }, py::arg("lmax"),
           py::arg("alpha"), "the smoother's interval [lmax / alpha, lmax]")
      .def("set_predicted_stop", [](H& h, bool on) { h.set_predicted_stop(on); }, py::arg("on"),
           "pcg's predicted stop on (the default) or off: with it on, the V-cycle of the iteration the "
           "estimates' rate says reaches tol is skipped and the reported estimate is that expectation")
      .def(
          "set_data_term",
          [](H& h, const Array& mm) {
            const T* mp = finest<const T>(h, mm, "m");
            py::gil_scoped_release release;
            h.set_data_term(mp);
          },
          py::arg("m"), "a new data term on the same grid (lam kept)")
      .def("set_reflect", [](H& h, bool reflect) { h.set_reflect(reflect); }, py::arg("reflect"),
           "the penalty's boundary on every level: mirrored (True) or natural (lam kept)")
      .def_property_readonly("lam", &H::lambda)
      .def_property_readonly("shapes",
                             [](const H& h) {
                               std::vector<std::vector<index_t>> out;
                               for (int l = 0; l < h.levels(); ++l) {
                                 const smooth::Grid& g = h.grid(l);
                                 out.push_back({g.n[0], g.n[1], g.n[2]});
                               }
                               return out;
                             },
                             "every level's grid, padded to three axes, finest first")
      .def("data_term",
           [](const H& h, int level) {
             require(level >= 0 && level < h.levels(), "data_term: level out of range");
             const auto& v = h.data_term(level);
             return std::vector<double>(v.begin(), v.end());
           },
           py::arg("level"))
      .def(
          "vcycle",
          [](H& h, const Array& b, const Array& x) {
            const T* bp = finest<const T>(h, b, "b");
            T* xp = finest<T>(h, x, "x");
            require(b.address != x.address, "vcycle: x must not be b");
            py::gil_scoped_release release;
            h.vcycle(bp, xp);
          },
          py::arg("b"), py::arg("x"), "x = V b, one V-cycle from zero")
      .def(
          "fmg",
          [](H& h, const Array& b, const Array& x, int cycles) {
            const T* bp = finest<const T>(h, b, "b");
            T* xp = finest<T>(h, x, "x");
            require(b.address != x.address, "fmg: x must not be b");
            py::gil_scoped_release release;
            h.fmg(bp, xp, cycles);
          },
          py::arg("b"), py::arg("x"), py::arg("cycles") = 1, "x = the full multigrid approximation of A^-1 b")
      .def(
          "cycles",
          [](H& h, const Array& b, const Array& x, bool from_x, int count, double omega) {
            const T* bp = finest<const T>(h, b, "b");
            T* xp = finest<T>(h, x, "x");
            require(b.address != x.address, "cycles: x must not be b");
            py::gil_scoped_release release;
            h.cycles(bp, xp, from_x, count, omega);
          },
          py::arg("b"), py::arg("x"), py::arg("from_x"), py::arg("count"), py::arg("omega") = 1.0,
          "count V-cycles from x (from_x) or from fmg(b), in place, each over-relaxed by omega: the "
          "stationary multigrid iteration")
      .def(
          "cycles_from",
          [](H& h, const Array& b, const Array& start, const Array& x, int count, double omega) {
            const T* bp = finest<const T>(h, b, "b");
            const T* sp = finest<const T>(h, start, "start");
            T* xp = finest<T>(h, x, "x");
            require(b.address != x.address && start.address != x.address, "cycles_from: x must not be b or start");
            py::gil_scoped_release release;
            h.cycles_from(bp, sp, xp, count, omega);
          },
          py::arg("b"), py::arg("start"), py::arg("x"), py::arg("count"), py::arg("omega") = 1.0,
          "cycles from start into x (count >= 1): the values of copying start into x and cycles(b, x, True, "
          "count, omega), without the copy")
      .def(
          "pcg",
          [](H& h, const Array& b, const Array& x, bool from_x, double tol, index_t maxiter, double scale,
             const py::object& op) {
            const T* bp = finest<const T>(h, b, "b");
            T* xp = finest<T>(h, x, "x");
            require(b.address != x.address, "pcg: x must not be b");
            typename H::Operator apply;
            if (!op.is_none()) {
              require(PyCallable_Check(op.ptr()), "pcg: operator must be callable (v -> A v) or None");
              // v: a read-only view of CG's vector for the call's duration; A v: an array of the
              // finest grid's shape and dtype, copied out
              const smooth::Grid& g = h.grid(0);
              std::vector<py::ssize_t> shape(b.shape.begin(), b.shape.end());
              apply = [&op, shape, size = g.size()](const T* v, T* out) {
                py::gil_scoped_acquire hold;
                py::array_t<T> view(shape, v, py::capsule(v, [](void*) {}));  // no copy, no owner
                view.attr("flags").attr("writeable") = false;
                auto got = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(op(view));
                require(bool(got) && got.size() == size, "pcg: operator must return A v, an array of v's size");
                std::copy(got.data(), got.data() + size, out);
              };
            }
            smooth::PcgResult r;
            {
              py::gil_scoped_release release;
              r = h.pcg(bp, xp, from_x, tol, maxiter, scale, op.is_none() ? nullptr : &apply);
            }
            return py::make_tuple(r.iterations, r.error);
          },
          py::arg("b"), py::arg("x"), py::arg("from_x"), py::arg("tol"), py::arg("maxiter"), py::arg("scale") = 0.0,
          py::arg("operator") = py::none(),
          "multigrid-preconditioned CG from x (from_x) or from fmg(b): (iterations, ||z|| / scale); operator: "
          "v -> A v for a system other than the hierarchy's finest matrix (v a read-only view valid during the "
          "call)");
}

// The held-out sweep's settings from the binding's arguments.
smooth::SweepSettings sweep_settings(const std::vector<double>& lams, double ratio, double flat, int count, double omega,
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

py::dict sweep_outcome(const smooth::SweepOutcome& o) {
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

template <typename T>
void register_sweep(py::module_& m) {
  using H = smooth::ThinPlateHierarchy<T>;
  m.def(
      "held_out_fill_sweep",
      [](const Array& mm, const Array& y, const Array& hold, const Array& x_best, int degree, double lmax,
         double alpha, index_t coarsest, int threads, const std::vector<double>& lams, double ratio, double flat,
         int count, double omega, double boundary_margin, double higher, double higher_margin) {
        const smooth::Grid g = grid_of(mm, "m");
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&y, "y"}, {&x_best, "x_best"}}) {
          const smooth::Grid h = grid_of(*a, name);
          require(a->ndim() == mm.ndim() && h.n[0] == g.n[0] && h.n[1] == g.n[1] && h.n[2] == g.n[2],
                  std::string(name) + " must have m's shape");
        }
        const T* mp = p<const T>(mm, "m");
        const T* yp = p<const T>(y, "y");
        T* xp = p<T>(x_best, "x_best");
        bindings::require_host(hold, "hold");
        const index_t* hp = bindings::data<const index_t>(hold, "hold", 1);
        const index_t nh = hold.shape[0], n = g.size();
        require(nh <= 1 || hold.strides[0] == 1, "held_out_fill_sweep: hold must be contiguous");
        require(g.size() > 0, "m must have at least one node");
        const smooth::SweepSettings st =
            sweep_settings(lams, ratio, flat, count, omega, boundary_margin, higher, higher_margin);
        std::shared_ptr<H> h;
        smooth::SweepOutcome o;
        {
          py::gil_scoped_release release;
          for (index_t i = 0; i < nh; ++i)
            require(hp[i] >= 0 && hp[i] < n && mp[hp[i]] > T(0), "held_out_fill_sweep: hold must index nodes with data");
          // the training term and right-hand side (the held-out nodes left out), their values y / m
          smooth::WorkArray<T> train(mp, mp + n), b(yp, yp + n), y_hold(static_cast<std::size_t>(nh));
          for (index_t i = 0; i < nh; ++i) {
            y_hold[std::size_t(i)] = yp[hp[i]] / mp[hp[i]];
            train[std::size_t(hp[i])] = T(0);
            b[std::size_t(hp[i])] = T(0);
          }
          h = std::make_shared<H>(g, train.data(), options(degree, lmax, alpha, coarsest, threads));
          o = smooth::held_out_sweep<T>(*h, b.data(), nh, hp, y_hold.data(), st, xp);
        }
        return py::make_tuple(h, sweep_outcome(o));
      },
      py::arg("m"), py::arg("y"), py::arg("hold"), py::arg("x_best"), py::arg("degree"), py::arg("lmax"),
      py::arg("alpha"), py::arg("coarsest"), py::arg("threads"), py::arg("lams"), py::arg("ratio"), py::arg("flat"),
      py::arg("count"), py::arg("omega"), py::arg("boundary_margin"), py::arg("higher"), py::arg("higher_margin"),
      "held_out_sweep on the hierarchy of m with the held-out nodes left out (m = 0 and y = 0 there, their values "
      "y / m held out), built here: (the hierarchy, the sweep's dict)");
}

template <typename T>
void register_lead_solve(py::module_& m, const char* name) {
  using L = smooth::LeadSolve<T>;
  py::class_<L>(m, name,
                "The leading component of a fill at the interpolation limit, solved ahead of the sweep "
                "(kronpe/multigrid.h; internal: kronpe.solvers.smooth).")
      .def(py::init([](const Array& mm, const Array& b, double lam, int degree, double lmax, double alpha,
                       index_t coarsest, int threads, double tol, index_t maxiter, double higher) {
             smooth::Grid g = grid_of(mm, "m");
             const smooth::Grid gb = grid_of(b, "b");
             require(b.ndim() == mm.ndim() && gb.n[0] == g.n[0] && gb.n[1] == g.n[1] && gb.n[2] == g.n[2],
                     "b must have m's shape");
             require(g.size() > 0, "m must have at least one node");
             const smooth::MultigridOptions o = options(degree, lmax, alpha, coarsest, threads);
             const T* mp = p<const T>(mm, "m");
             const T* bp = p<const T>(b, "b");
             return std::make_unique<L>(g, mp, bp, lam, o, tol, maxiter, higher);
           }),
           py::arg("m"), py::arg("b"), py::arg("lam"), py::arg("degree"), py::arg("lmax"), py::arg("alpha"),
           py::arg("coarsest"), py::arg("threads"), py::arg("tol"), py::arg("maxiter"), py::arg("higher"),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>())  // m and b are not copied: kept with the solve
      .def("start", [](L& l) { l.start(); }, "both stages on a thread of its own")
      .def(
          "beside",
          [](L& l, const py::function& fn) {
            // fn() -> (result, stages wanted), run on this thread with the GIL while the stages run
            // on a second one
            py::object result;
            {
              py::gil_scoped_release release;
              l.beside([&]() -> int {
                py::gil_scoped_acquire hold;
                py::tuple got = fn();
                require(got.size() == 2, "beside: the function must return (result, stages)");
                result = got[0];
                return got[1].cast<int>();
              });
            }
            return result;
          },
          py::arg("fn"), "fn() on this thread beside both stages on another: fn's result")
      .def(
          "finish",
          [](L& l, int stages) {
            py::gil_scoped_release release;
            l.finish(stages);
          },
          py::arg("stages"), "waits for the started solve, or runs the first `stages` stages now")
      .def("cancel", [](L& l) { l.cancel(); })
      .def_property_readonly("stages_done", &L::stages_done)
      .def("hierarchy", [](const L& l) { return l.hierarchy(); })
      .def(
          "solution",
          [](const L& l, int stage) {
            require(stage >= 1 && stage <= l.stages_done(), "solution: that stage has not run");
            const smooth::Grid& g = l.grid();
            const auto& x = l.x(stage);
            py::array_t<T> out(std::vector<py::ssize_t>{py::ssize_t(g.n[0]), py::ssize_t(g.n[1]), py::ssize_t(g.n[2])});
            std::copy(x.begin(), x.end(), out.mutable_data());
            const smooth::PcgResult r = l.result(stage);
            return py::make_tuple(out, r.iterations, r.error);
          },
          py::arg("stage"), "(x padded to three axes, iterations, error estimate) of a stage")
      .def(
          "result",
          [](const L& l, int stage) {
            require(stage >= 1 && stage <= l.stages_done(), "result: that stage has not run");
            const smooth::PcgResult r = l.result(stage);
            return py::make_tuple(r.iterations, r.error);
          },
          py::arg("stage"), "(iterations, error estimate) of a stage, without its solution");
}


// The device's multigrid (kronpe/cuda.h): a hierarchy for the tests and measurements, and the fill.
struct DeviceHierarchy {
  std::unique_ptr<cuda::DeviceThinPlate> d;
  smooth::Grid g;
  int ndim = 0;
  // a float32 host array of the finest grid's shape
  template <typename P>
  P* on_grid(const Array& a, const char* name) const {
    const smooth::Grid h = grid_of(a, name);
    require(a.ndim() == ndim && h.n[0] == g.n[0] && h.n[1] == g.n[1] && h.n[2] == g.n[2],
            std::string(name) + " must have the grid's shape");
    return p<P>(a, name);
  }
  // f(in, out) on two arrays of the grid (in read, out written), without the GIL
  template <typename F>
  void into(const Array& in, const Array& out, F&& f) const {
    const float* ip = on_grid<const float>(in, "input");
    float* op = on_grid<float>(out, "output");
    py::gil_scoped_release release;
    f(ip, op);
  }
};

void register_device(py::module_& m) {
  py::class_<DeviceHierarchy>(m, "CudaThinPlate32",
                              "The thin-plate multigrid hierarchy of diag(m) + lam R on a CUDA device, float32, "
                              "host arrays in and out (kronpe/cuda.h; internal: tests and measurements).")
      .def(py::init([](int device, const Array& mm, bool reflect, int degree, double lmax, double alpha,
                       index_t coarsest) {
             DeviceHierarchy h;
             h.g = grid_of(mm, "m");
             h.g.reflect = reflect;
             h.ndim = mm.ndim();
             require(h.g.size() > 0, "m must have at least one node");
             const float* mp = p<const float>(mm, "m");
             const smooth::MultigridOptions o = options(degree, lmax, alpha, coarsest, 0);
             py::gil_scoped_release release;
             h.d = std::make_unique<cuda::DeviceThinPlate>(device, h.g, mp, o);
             return h;
           }),
           py::arg("device"), py::arg("m"), py::arg("reflect"), py::arg("degree"), py::arg("lmax"), py::arg("alpha"),
           py::arg("coarsest"))
      .def_property_readonly("levels", [](const DeviceHierarchy& h) { return h.d->levels(); })
      .def("set_lambda", [](DeviceHierarchy& h, double lam) { h.d->set_lambda(lam); }, py::arg("lam"))
      .def("set_reflect", [](DeviceHierarchy& h, bool r) { h.d->set_reflect(r); }, py::arg("reflect"))
      .def(
          "set_data_term",
          [](DeviceHierarchy& h, const Array& mm) {
            const float* mp = h.on_grid<const float>(mm, "m");
            py::gil_scoped_release release;
            h.d->set_data_term(mp);
          },
          py::arg("m"))
      .def(
          "apply",
          [](DeviceHierarchy& h, const Array& x, const Array& out, double higher) {
            h.into(x, out, [&](const float* xp, float* op) { h.d->apply(xp, op, higher); });
          },
          py::arg("x"), py::arg("out"), py::arg("higher") = 0.0)
      .def(
          "vcycle",
          [](DeviceHierarchy& h, const Array& b, const Array& x) {
            h.into(b, x, [&](const float* bp, float* xp) { h.d->vcycle(bp, xp); });
          },
          py::arg("b"), py::arg("x"))
      .def(
          "fmg",
          [](DeviceHierarchy& h, const Array& b, const Array& x, int cycles) {
            h.into(b, x, [&](const float* bp, float* xp) { h.d->fmg(bp, xp, cycles); });
          },
          py::arg("b"), py::arg("x"), py::arg("cycles") = 1)
      .def(
          "cycles",
          [](DeviceHierarchy& h, const Array& b, const Array& x, bool from_x, int count, double omega) {
            h.into(b, x, [&](const float* bp, float* xp) { h.d->cycles(bp, xp, from_x, count, omega); });
          },
          py::arg("b"), py::arg("x"), py::arg("from_x"), py::arg("count"), py::arg("omega") = 1.0)
      .def(
          "pcg",
          [](DeviceHierarchy& h, const Array& b, const Array& x, bool from_x, double tol, index_t maxiter,
             double scale, double higher) {
            smooth::PcgResult r;
            h.into(b, x, [&](const float* bp, float* xp) { r = h.d->pcg(bp, xp, from_x, tol, maxiter, scale, higher); });
            return py::make_tuple(r.iterations, r.error);
          },
          py::arg("b"), py::arg("x"), py::arg("from_x"), py::arg("tol"), py::arg("maxiter"), py::arg("scale") = 0.0,
          py::arg("higher") = 0.0);

  m.def(
      "cuda_smooth_fill",
      [](int device, const Array& mm, const std::vector<Array>& planes, const Array& y, const Array& hold,
         const std::vector<Array>& out, const std::vector<double>& lams, double ratio, double flat, int count,
         double omega, double boundary_margin, double higher, double higher_margin, int degree, double lmax,
         double alpha, index_t coarsest, double lam_interpolating, double tol, double tol_interpolating,
         index_t maxiter, bool lead) {
        const smooth::Grid g = grid_of(mm, "m");
        require(g.size() > 0, "m must have at least one node");
        require(!planes.empty() && planes.size() == out.size(), "planes and out must hold one array per channel");
        auto check = [&](const Array& a, const char* name) {
          const smooth::Grid h = grid_of(a, name);
          require(a.ndim() == mm.ndim() && h.n[0] == g.n[0] && h.n[1] == g.n[1] && h.n[2] == g.n[2],
                  std::string(name) + " must have m's shape");
        };
        std::vector<const float*> bp;
        std::vector<float*> xp;
        for (const Array& a : planes) {
          check(a, "planes");
          bp.push_back(p<const float>(a, "planes"));
        }
        for (const Array& a : out) {
          check(a, "out");
          xp.push_back(p<float>(a, "out"));
        }
        check(y, "y");
        bindings::require_host(hold, "hold");
        const index_t* hp = bindings::data<const index_t>(hold, "hold", 1);
        const index_t nh = hold.shape[0];
        require(nh <= 1 || hold.strides[0] == 1, "hold must be contiguous");
        cuda::FillSettings s;
        s.sweep = sweep_settings(lams, ratio, flat, count, omega, boundary_margin, higher, higher_margin);
        s.options = options(degree, lmax, alpha, coarsest, 0);
        s.lam_interpolating = lam_interpolating;
        s.tol = tol;
        s.tol_interpolating = tol_interpolating;
        s.maxiter = maxiter;
        s.lead = lead;
        const float* mp = p<const float>(mm, "m");
        const float* yp = p<const float>(y, "y");
        cuda::FillOutcome o;
        {
          py::gil_scoped_release release;
          o = cuda::smooth_fill(device, g, mp, int(bp.size()), bp.data(), yp, nh, hp, s, xp.data());
        }
        py::dict d = sweep_outcome(o.sweep);
        d["lam"] = o.lam;
        d["iterations"] = o.iterations;
        d["errors"] = o.errors;
        return d;
      },
      py::arg("device"), py::arg("m"), py::arg("planes"), py::arg("y"), py::arg("hold"), py::arg("out"),
      py::arg("lams"), py::arg("ratio"), py::arg("flat"), py::arg("count"), py::arg("omega"),
      py::arg("boundary_margin"), py::arg("higher"), py::arg("higher_margin"), py::arg("degree"), py::arg("lmax"),
      py::arg("alpha"), py::arg("coarsest"), py::arg("lam_interpolating"), py::arg("tol"),
      py::arg("tol_interpolating"), py::arg("maxiter"), py::arg("lead"),
      "The default fill of a diagonal data term on a CUDA device (kronpe/cuda.h smooth_fill): the held-out "
      "sweep, then every channel's solve; host arrays, the solutions written into out. The sweep's dict with "
      "lam, iterations and errors.");
}

}  // namespace

void register_smooth(py::module_& m) {
  register_device(m);
  register_hierarchy<float>(m, "ThinPlateHierarchy32");
  register_hierarchy<double>(m, "ThinPlateHierarchy64");
  register_sweep<float>(m);  // (the fills are float32)
  register_lead_solve<float>(m, "LeadSolve32");
  register_lead_solve<double>(m, "LeadSolve64");
  m.def("set_nodes_per_extra_thread", &smooth::set_nodes_per_extra_thread, py::arg("nodes"),
        "The smoothing kernels' team rule beyond two threads, one thread per `nodes` (default 2^16, "
        "at least 2^13); returns the previous value (internal: tools/gpu_host_diag.py).");
  m.def(
      "work_cache",
      [](bool clear) {
        if (clear) smooth::work_cache_clear();
        return smooth::work_cache_bytes();
      },
      py::arg("clear") = false,
      "The bytes of solver work memory kept for the next fit (kronpe/multigrid.h); clear=True frees "
      "them first (internal).");
  m.def(
      "masked_fill",
      [](const Array& s, const Array& mask, const Array& out, bool planar) {
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&s, "s"}, {&out, "out"}, {&mask, "mask"}})
          bindings::require_host(*a, name);
        require(s.ndim() == 2, "masked_fill: s must be 2-D (n, C)");
        const index_t n = s.shape[0], C = s.shape[1];
        const std::vector<index_t> want = planar ? std::vector<index_t>{C, n} : std::vector<index_t>{n, C};
        require(std::vector<index_t>(out.shape.begin(), out.shape.end()) == want && out.dtype == s.dtype,
                planar ? "masked_fill: out must have shape (C, n) and s's dtype" : "masked_fill: out must have s's shape and dtype");
        require(mask.ndim() == 1 && mask.shape[0] == n, "masked_fill: mask must be 1-D of s's length");
        require(n <= 1 || C == 0 || ((C <= 1 || s.strides[1] == 1) && s.strides[0] == C), "masked_fill: s must be C-contiguous");
        const index_t inner = out.shape.size() == 2 ? out.shape[1] : 0;
        require(out.ndim() != 2 || out.shape[0] <= 1 || inner == 0 || ((inner <= 1 || out.strides[1] == 1) && out.strides[0] == inner),
                "masked_fill: out must be C-contiguous");
        require(n <= 1 || mask.strides[0] == 1, "masked_fill: mask must be contiguous");
        const unsigned char* mp = bindings::data<const unsigned char>(mask, "mask");
        py::tuple result;
        bindings::dispatch1(s.dtype, [&](auto t) {
          using T = decltype(t);
          const T* sp = p<const T>(s, "s");
          T* op = p<T>(out, "out");
          require(n * C == 0 || (op + n * C <= sp || sp + n * C <= op), "masked_fill: out must not overlap s");
          std::vector<T> lo(static_cast<std::size_t>(C)), hi(lo.size());
          index_t bad = 0;
          {
            py::gil_scoped_release release;
            bad = masked_fill<T>(n, C, sp, mp, op, lo.data(), hi.data(), planar);
          }
          result = py::make_tuple(std::vector<double>(lo.begin(), lo.end()),
                                  std::vector<double>(hi.begin(), hi.end()), bad);
        });
        return result;
      },
      py::arg("s"), py::arg("mask"), py::arg("out"), py::arg("planar") = false,
      "out = s where mask (uint8 (n,)) else 0, s (n, C), out (n, C) or (C, n) with planar; returns (per-channel min, max over the observed "
      "values, how many of them are NaN or Inf) (internal).");
  m.def(
      "lattice_count",
      [](const Array& x, index_t probe, double rtol, double tol) {
        bindings::require_host(x, "x");
        require(x.ndim() == 1, "lattice_count: x must be 1-D (P,)");
        index_t n = 0;
        bindings::dispatch1(x.dtype, [&](auto t) {
          using T = decltype(t);
          const T* xp = p<const T>(x, "x");
          const index_t P = x.shape[0], sx = x.strides[0];
          py::gil_scoped_release release;
          n = lattice_count<T>(P, xp, sx, probe, rtol, tol);
        });
        return n;
      },
      py::arg("x"), py::arg("probe"), py::arg("rtol"), py::arg("tol"),
      "n when every coordinate of x (float32 or float64 (P,), any stride) is a multiple k h of h = 1 / n, the smallest gap "
      "between distinct ones, 0 <= k <= n; else 0 (kronpe/masked.h; kronpe.reference.lattice_count) (internal).");
  m.def(
      "lattice_index",
      [](const Array& points, const std::vector<index_t>& n, const std::vector<double>& origin,
         const std::vector<double>& scale, const std::optional<std::vector<Array>>& nodes, const Array& out) {
        bindings::require_host(points, "points");
        bindings::require_host(out, "out");
        require(points.ndim() == 2, "lattice_index: points must be 2-D (P, D)");
        const index_t P = points.shape[0];
        const int D = int(points.shape[1]);
        require(D >= 1, "lattice_index: points must have at least one coordinate (D >= 1)");
        require(index_t(n.size()) == D && index_t(origin.size()) == D && index_t(scale.size()) == D,
                "lattice_index: n, origin and scale must hold one value per coordinate (D = " + std::to_string(D) + ")");
        index_t* fp = bindings::data<index_t>(out, "out", 1);
        require(out.shape[0] == P && (P <= 1 || out.strides[0] == 1), "lattice_index: out must be contiguous int64 (P,)");
        std::vector<const double*> node_ptrs;
        if (nodes) {
          require(index_t(nodes->size()) == D, "lattice_index: nodes must hold one array per coordinate");
          for (int a = 0; a < D; ++a) {
            const Array& g = (*nodes)[std::size_t(a)];
            bindings::require_host(g, "nodes");
            const double* gp = bindings::data<const double>(g, "nodes", 1);
            require(g.shape[0] == n[std::size_t(a)] && (g.shape[0] <= 1 || g.strides[0] == 1),
                    "lattice_index: nodes[" + std::to_string(a) + "] must be contiguous float64 of n[" +
                        std::to_string(a) + "] values");
            node_ptrs.push_back(gp);
          }
        }
        index_t first = 0;
        bindings::dispatch1(points.dtype, [&](auto t) {
          using T = decltype(t);
          const T* pp = p<const T>(points, "points");
          py::gil_scoped_release release;
          first = lattice_index<T>(P, D, pp, points.strides[0], points.strides[1], n.data(), origin.data(),
                                   scale.data(), nodes ? node_ptrs.data() : nullptr, fp);
        });
        return first;
      },
      py::arg("points"), py::arg("n"), py::arg("origin"), py::arg("scale"), py::arg("nodes"), py::arg("out"),
      "out[p] = the C-order flat index of point p's nearest lattice node (kronpe/masked.h: node k of "
      "axis a at origin[a] + k / scale[a], n[a] nodes, clamped); with nodes, the first p whose "
      "coordinates are not exactly its nodes' values is returned (else P) (internal).");
  m.def(
      "lattice_sums",
      [](const Array& flat, const Array& values, const Array& counts, const Array& sums) {
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&flat, "flat"}, {&values, "values"},
                                      {&counts, "counts"}, {&sums, "sums"}})
          bindings::require_host(*a, name);
        const index_t* fp = bindings::data<const index_t>(flat, "flat", 1);
        require(values.ndim() == 2 && values.shape[0] == flat.shape[0],
                "lattice_sums: values must be (P, C) with flat's P");
        require(flat.shape[0] <= 1 || flat.strides[0] == 1, "lattice_sums: flat must be contiguous");
        const index_t P = values.shape[0], C = values.shape[1];
        require(counts.ndim() == 1 && counts.dtype == values.dtype && (counts.shape[0] <= 1 || counts.strides[0] == 1),
                "lattice_sums: counts must be contiguous 1-D of values' dtype");
        const index_t G = counts.shape[0];
        require(sums.ndim() == 2 && sums.shape[0] == C && sums.shape[1] == G && sums.dtype == values.dtype &&
                    (C * G <= 1 || ((G <= 1 || sums.strides[1] == 1) && (C <= 1 || sums.strides[0] == G))),
                "lattice_sums: sums must be C-contiguous (C, G) of values' dtype");
        bindings::dispatch1(values.dtype, [&](auto t) {
          using T = decltype(t);
          const T* vp = p<const T>(values, "values");
          T* cp = p<T>(counts, "counts");
          T* sp = p<T>(sums, "sums");
          py::gil_scoped_release release;
          lattice_sums<T>(P, C, fp, vp, values.strides[0], values.strides[1], G, cp, sp);
        });
      },
      py::arg("flat"), py::arg("values"), py::arg("counts"), py::arg("sums"),
      "counts[g] = how many points have flat index g, sums[c, g] = the sum of their values[:, c] "
      "(kronpe/masked.h) (internal).");
  m.def(
      "thin_plate",
      [](const Array& x, const Array& mask, double lam, const Array& out, const std::string& mode,
         const std::optional<Array>& b, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        require(mode == "apply" || mode == "residual", "thin_plate: mode must be apply or residual");
        if (mode == "residual") require(b.has_value(), "thin_plate: residual needs b");
        const Array& bb = b ? *b : x;
        same_grid(x, {{&mask, "mask"}, {&out, "out"}, {&bb, "b"}}, Penalty{reflect, order, weights, top, tail}, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* xp = p<const T>(x, "x");
          const T* mp = p<const T>(mask, "mask");
          const T* bp = p<const T>(bb, "b");
          T* op = p<T>(out, "out");
          py::gil_scoped_release release;
          if (mode == "apply") smooth::thin_plate_apply<T>(g, xp, mp, T(lam), op, threads);
          else smooth::thin_plate_residual<T>(g, xp, bp, mp, T(lam), op, threads);
        });
      },
      py::arg("x"), py::arg("mask"), py::arg("lam"), py::arg("out"), py::arg("mode") = "apply",
      py::arg("b") = py::none(), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "out = mask x + lam R x (apply) or b - (mask x + lam R x) (residual); R the thin-plate "
      "penalty (internal).");
  m.def(
      "thin_plate_diag",
      [](const Array& mask, double lam, const Array& out, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        same_grid(mask, {{&out, "out"}}, Penalty{reflect, order, weights, top, tail}, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* mp = p<const T>(mask, "mask");
          T* op = p<T>(out, "out");
          py::gil_scoped_release release;
          smooth::thin_plate_diag<T>(g, mp, T(lam), op, threads);
        });
      },
      py::arg("mask"), py::arg("lam"), py::arg("out"), py::arg("reflect") = false, py::arg("threads") = 0,
      py::arg("order") = 2, py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0, "out = diag(mask + lam R) (internal).");
  m.def(
      "thin_plate_cheb_start",
      [](const std::optional<Array>& x, const Array& b, const Array& mask, double lam, double theta,
         const Array& r, const Array& d, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        const Penalty pen{reflect, order, weights, top, tail};
        if (x) same_grid(b, {{&*x, "x"}}, pen, [](const smooth::Grid&, auto) {});
        same_grid(b, {{&mask, "mask"}, {&r, "r"}, {&d, "d"}}, pen, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* xp = x ? p<const T>(*x, "x") : nullptr;
          const T* bp = p<const T>(b, "b");
          const T* mp = p<const T>(mask, "mask");
          T* rp = p<T>(r, "r");
          T* dp = p<T>(d, "d");
          py::gil_scoped_release release;
          smooth::thin_plate_cheb_start<T>(g, xp, bp, mp, T(lam), T(theta), rp, dp, threads);
        });
      },
      py::arg("x"), py::arg("b"), py::arg("mask"), py::arg("lam"), py::arg("theta"), py::arg("r"),
      py::arg("d"), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "r = (b - A x) / diag(A), d = r / theta: a Chebyshev smoother's start; x None: x = 0 "
      "(internal).");
  m.def(
      "thin_plate_cheb_step",
      [](const Array& d, const Array& r, const Array& x, const Array& mask, double lam, double c1,
         double c2, const Array& d_out, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        same_grid(d, {{&r, "r"}, {&x, "x"}, {&mask, "mask"}, {&d_out, "d_out"}}, Penalty{reflect, order, weights, top, tail},
                  [&](const smooth::Grid& g, auto t) {
                    using T = decltype(t);
                    require(d.address != d_out.address, "thin_plate_cheb_step: d_out must not be d");
                    const T* dp = p<const T>(d, "d");
                    T* rp = p<T>(r, "r");
                    T* xp = p<T>(x, "x");
                    const T* mp = p<const T>(mask, "mask");
                    T* op = p<T>(d_out, "d_out");
                    py::gil_scoped_release release;
                    smooth::thin_plate_cheb_step<T>(g, dp, rp, xp, mp, T(lam), T(c1), T(c2), op,
                                                    threads);
                  });
      },
      py::arg("d"), py::arg("r"), py::arg("x"), py::arg("mask"), py::arg("lam"), py::arg("c1"),
      py::arg("c2"), py::arg("d_out"), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "x += d, r -= (A d) / diag(A), d_out = c1 d + c2 r: a Chebyshev smoother's step (internal).");
  m.def(
      "dot",
      [](const Array& a, const Array& b) {
        bindings::require_host(a, "a");
        bindings::require_host(b, "b");
        require(a.shape == b.shape, "dot: b must have a's shape");
        require(a.dtype == b.dtype, "dot: b must have a's dtype " + a.dtype);
        index_t n = 1, stride = 1;
        for (int d = a.ndim() - 1; d >= 0; --d) {
          n *= a.shape[d];
        }
        for (int d = a.ndim() - 1; d >= 0; --d) {
          require(n == 0 || a.shape[d] <= 1 || (a.strides[d] == stride && b.strides[d] == stride),
                  "dot: a and b must be C-contiguous");
          stride *= a.shape[d];
        }
        double out = 0.0;
        bindings::dispatch1(a.dtype, [&](auto t) {
          using T = decltype(t);
          const T* ap = p<const T>(a, "a");
          const T* bp = p<const T>(b, "b");
          py::gil_scoped_release release;
          out = smooth::dot<T>(n, ap, bp);
        });
        return out;
      },
      py::arg("a"), py::arg("b"),
      "sum(a * b) over C-contiguous arrays of one shape and dtype, accumulated in double "
      "(internal).");
  m.def(
      "gcv_scores",
      [](const Array& mm, const Array& count, const Array& w, const Array& ridges, double rss0, double n,
         double total) {
        const index_t r = flat_planes({mm, count, w}, "m, count and w");
        require(mm.dtype == "float64", "gcv_scores: m, count and w must be float64, got " + mm.dtype);
        require(ridges.dtype == "float64", "gcv_scores: ridges must be float64, got " + ridges.dtype);
        const index_t L = flat_planes({ridges}, "ridges");
        std::vector<double> scores(static_cast<std::size_t>(L));
        const double* mp = p<const double>(mm, "m");
        const double* cp = p<const double>(count, "count");
        const double* wp = p<const double>(w, "w");
        const double* rp = p<const double>(ridges, "ridges");
        {
          py::gil_scoped_release release;
          smooth::gcv_scores(r, mp, cp, wp, L, rp, rss0, n, total, scores.data());
        }
        return scores;
      },
      py::arg("m"), py::arg("count"), py::arg("w"), py::arg("ridges"), py::arg("rss0"), py::arg("n"),
      py::arg("total"),
      "GCV scores at the ridges of a curve given by C-contiguous float64 m, count and w of one size "
      "(internal, kronpe.solvers.gcv; kronpe.reference.gcv_scores).");
  m.def(
      "dots",
      [](const std::vector<Array>& arrays) {
        require(!arrays.empty(), "dots: no arrays");
        const index_t n = flat_planes(arrays, "arrays");
        const int c = int(arrays.size());
        std::vector<double> S(std::size_t(c) * std::size_t(c));
        bindings::dispatch1(arrays[0].dtype, [&](auto t) {
          using T = decltype(t);
          const std::vector<const T*> ap = plane_pointers<const T>(arrays, "arrays");
          py::gil_scoped_release release;
          smooth::dots<T>(n, c, ap.data(), S.data());
        });
        return S;
      },
      py::arg("arrays"),
      "every inner product of C-contiguous arrays of one size and dtype, [a_i . a_j] flat (c, c), as dot "
      "computes each (internal).");
  m.def(
      "mix_channels",
      [](const std::vector<Array>& inputs, const Array& v, const std::vector<Array>& outputs,
         const std::optional<Array>& lo, const std::optional<Array>& hi) {
        require(!inputs.empty() && !outputs.empty(), "mix_channels: no inputs or no outputs");
        const index_t n = flat_planes(inputs, "inputs");
        const int cin = int(inputs.size()), cout = int(outputs.size());
        require(v.ndim() == 2 && v.shape[0] == cin && v.shape[1] == cout && (cout <= 1 || v.strides[1] == 1) &&
                    (cin <= 1 || v.strides[0] == cout),
                "mix_channels: v must be C-contiguous (inputs, outputs)");
        // outputs: n values each, one element stride (planes, or the columns of an interleaved array)
        index_t stride = 1;
        for (std::size_t c = 0; c < outputs.size(); ++c) {
          const Array& o = outputs[c];
          bindings::require_host(o, "outputs");
          require(o.dtype == inputs[0].dtype, "mix_channels: outputs must have the inputs' dtype");
          require(o.ndim() == 1 && o.shape[0] == n, "mix_channels: every output must be 1-D of the inputs' size");
          if (c == 0) stride = n > 1 ? o.strides[0] : 1;
          require(n <= 1 || o.strides[0] == stride, "mix_channels: the outputs must have one element stride");
        }
        require(stride >= 1, "mix_channels: the outputs' stride must be positive");
        require(lo.has_value() == hi.has_value(), "mix_channels: lo and hi go together");
        for (const std::optional<Array>* r : {&lo, &hi})
          if (*r) require((*r)->ndim() == 1 && (*r)->shape[0] == cout && ((*r)->strides[0] == 1 || cout <= 1),
                          "mix_channels: lo and hi must hold one contiguous value per output");
        index_t outside = 0;
        bindings::dispatch1(inputs[0].dtype, [&](auto t) {
          using T = decltype(t);
          const std::vector<const T*> ip = plane_pointers<const T>(inputs, "inputs");
          std::vector<T*> op;
          for (const Array& o : outputs) op.push_back(p<T>(o, "outputs"));
          for (T* o : op)  // the outputs span [o, o + (n - 1) stride]
            for (const T* i : ip)
              require(n == 0 || o + (n - 1) * stride < i || i + n <= o, "mix_channels: outputs must not overlap inputs");
          const T* vp = p<const T>(v, "v");
          const T* lp = lo ? p<const T>(*lo, "lo") : nullptr;
          const T* hp = hi ? p<const T>(*hi, "hi") : nullptr;
          py::gil_scoped_release release;
          outside = mix_channels<T>(n, cin, ip.data(), cout, vp, op.data(), stride, lp, hp);
        });
        return outside;
      },
      py::arg("inputs"), py::arg("v"), py::arg("outputs"), py::arg("lo") = py::none(), py::arg("hi") = py::none(),
      "outputs[c] = sum_k v[k, c] inputs[k] (each optionally clipped to [lo[c], hi[c]]); returns how many "
      "values were outside (internal).");
  m.def(
      "grid_transfer",
      [](const Array& src, const Array& dst, int axis, bool restrict_, bool add, int threads) {
        bindings::require_host(src, "src");
        bindings::require_host(dst, "dst");
        require(src.ndim() == dst.ndim() && axis >= 0 && axis < src.ndim(),
                "grid_transfer: axis out of range or ranks differ");
        require(src.dtype == dst.dtype, "grid_transfer: dst must have src's dtype");
        const index_t n = restrict_ ? src.shape[axis] : dst.shape[axis];
        const index_t nc = restrict_ ? dst.shape[axis] : src.shape[axis];
        require(n >= 1 && nc == smooth::coarse_length(n), "grid_transfer: coarse length must be n // 2 + 1");
        index_t outer = 1, inner = 1;
        for (int a = 0; a < src.ndim(); ++a) {
          if (a == axis) continue;
          require(src.shape[a] == dst.shape[a], "grid_transfer: shapes differ off the axis");
          (a < axis ? outer : inner) *= src.shape[a];
        }
        grid_of(src, "src");  // C-contiguity (rank checked above: 1 to 3 axes)
        grid_of(dst, "dst");
        bindings::dispatch1(src.dtype, [&](auto t) {
          using T = decltype(t);
          const T* sp = p<const T>(src, "src");
          T* dp = p<T>(dst, "dst");
          py::gil_scoped_release release;
          if (restrict_) smooth::restrict_axis<T>(outer, n, inner, sp, dp, threads);
          else smooth::prolong_axis<T>(outer, n, inner, sp, dp, add, threads);
        });
      },
      py::arg("src"), py::arg("dst"), py::arg("axis"), py::arg("restrict"), py::arg("add") = false,
      py::arg("threads") = 0,
      "dst = P^T src (restrict) or P src (dst += P src with add) along one axis, linear interpolation, coarse node j at "
      "fine node 2 j (internal).");
}
