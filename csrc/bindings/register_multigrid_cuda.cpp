// Bindings of the CUDA backend's thin-plate multigrid (kronpe/cuda.h DeviceThinPlate and
// smooth_fill): a hierarchy on a device for the tests and measurements, and the default fill. Host
// arrays in and out; in a module built without CUDA they exist and raise RuntimeError
// (csrc/cuda/cuda_stub.cpp).
#include <memory>
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/cuda.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::grid_of;
using bindings::options;
using bindings::p;
using bindings::sweep_outcome;
using bindings::sweep_settings;

namespace {

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

}  // namespace

void register_multigrid_cuda(py::module_& m) {
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
