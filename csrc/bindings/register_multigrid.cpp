// Bindings of the thin-plate multigrid solvers on the host (kronpe/multigrid.h): the hierarchies,
// the held-out sweep of a fill and the leading component's solve.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/multigrid.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::grid_of;
using bindings::options;
using bindings::p;
using bindings::Penalty;
using bindings::sweep_outcome;
using bindings::sweep_settings;

namespace {

// The finest grid's arrays of a hierarchy: its shape (padded) and dtype T.
template <typename P, typename T>
P* finest(const smooth::ThinPlateHierarchy<T>& h, const Array& a, const char* name) {
  const smooth::Grid g = grid_of(a, name);
  const smooth::Grid& f = h.grid(0);
  require(g.n[0] == f.n[0] && g.n[1] == f.n[1] && g.n[2] == f.n[2],
          std::string(name) + " must have the finest grid's shape");
  return p<P>(a, name);
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

}  // namespace

void register_multigrid(py::module_& m, py::module_& tuning) {
  register_hierarchy<float>(m, "ThinPlateHierarchy32");
  register_hierarchy<double>(m, "ThinPlateHierarchy64");
  register_sweep<float>(m);  // (the fills are float32)
  register_lead_solve<float>(m, "LeadSolve32");
  register_lead_solve<double>(m, "LeadSolve64");
  tuning.def(
      "work_cache",
      [](bool clear) {
        if (clear) smooth::work_cache_clear();
        return smooth::work_cache_bytes();
      },
      py::arg("clear") = false,
      "The bytes of solver work memory kept for the next fit (kronpe/multigrid.h); clear=True frees "
      "them first (internal).");
}
