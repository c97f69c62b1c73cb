// kronpe._core: one PYBIND11_MODULE, one register_<family>() per binding file. The kernels and what
// kronpe's public functions stand on are module functions; the hooks that only tune, report or
// force the kernels' internal choices (tests, benches and tools) are in the private submodule
// kronpe._core._tuning.
#include "common.h"
#include "kronpe/cuda.h"
#include "kronpe/mode_product_plan.h"
#include "kronpe/multigrid.h"
#include "kronpe/simd.h"
#include "kronpe/threads.h"

#ifndef KRONPE_VERSION
#define KRONPE_VERSION "dev"
#endif
#ifndef KRONPE_CXX_COMPILER
#define KRONPE_CXX_COMPILER "unknown"
#endif
#ifndef KRONPE_CUDA_COMPILER
#define KRONPE_CUDA_COMPILER ""
#endif
#ifndef KRONPE_CUDA_ARCHITECTURES
#define KRONPE_CUDA_ARCHITECTURES ""
#endif
#ifndef KRONPE_BUILD_TYPE
#define KRONPE_BUILD_TYPE ""
#endif

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "kronpe compiled core (C++ kernels; CUDA kernels when built with CUDA)";
  py::module_ tuning = m.def_submodule(
      "_tuning",
      "The kernels' tuning hooks: team rules, vector paths, GEMM and planner choices, caches and "
      "counters (internal: for kronpe's solvers, tests, benches and tools; not part of kronpe's API).");
  m.def("build_info", []() {
    py::dict d;
    d["version"] = KRONPE_VERSION;
    d["compiler"] = KRONPE_CXX_COMPILER;
    d["build_type"] = KRONPE_BUILD_TYPE;
    d["cuda"] = kronpe::cuda::built();
    d["cuda_compiler"] = KRONPE_CUDA_COMPILER;
    d["cuda_architectures"] = KRONPE_CUDA_ARCHITECTURES;
    d["simd"] = kronpe::simd_level() == 2 ? "avx512" : kronpe::simd_level() == 1 ? "avx2" : "generic";
#ifdef KRONPE_OPENMP
    d["openmp"] = true;
#else
    d["openmp"] = false;
#endif
    return d;
  });
  m.def("cuda_device_count", &kronpe::cuda::device_count);
  m.def(
      "clear_caches",
      [] {
        kronpe::smooth::work_cache_clear();
        kronpe::mode_chain_programs_clear();
      },
      "Frees the solvers' kept work memory and forgets the calling thread's planned mode-n chains "
      "(internal: kronpe.clear_caches).");
  m.def("set_num_threads", &kronpe::set_default_threads, py::arg("n"),
        "Threads of kronpe's CPU kernels when a call gives none; 0: OpenMP's default (internal, "
        "see kronpe.set_num_threads).");
  m.def("get_num_threads", &kronpe::default_threads,
        "Threads of kronpe's CPU kernels when a call gives none (internal).");
  tuning.def("kernel_threads", &kronpe::kernel_threads,
        "Threads a kernel's team takes now when its call gives none: get_num_threads(), fewer while "
        "the cores are marked busy (internal; kronpe/threads.h).");
  tuning.def(
      "busy_cores", [] { return py::make_tuple(kronpe::cores_busy(), kronpe::busy_marks()); },
      "(whether the cores are marked busy now, how many times they were marked): kronpe/threads.h's "
      "back-off (the default teams halved by every late team) while another library's threads hold the cores "
      "(internal).");
  tuning.def("team_is_judged", &kronpe::team_is_judged, py::arg("cold"), py::arg("late"), py::arg("oversubscribed"),
             "Whether a team's lateness counts toward marking the cores busy: every warm team; a cold one "
             "(launched after its threads went to sleep) only when late with more tasks runnable than CPUs "
             "(internal; kronpe/threads.h).");
  register_blas(m, tuning);
  register_embed(m);
  register_mode_product(m, tuning);
  register_blend(m, tuning);
  register_multigrid_cuda(m);
  register_multigrid(m, tuning);
  register_masked(m);
  register_smooth(m, tuning);
  register_reductions(m);
  register_channels(m);
  register_spline(m);
  register_cuda(m);
}
