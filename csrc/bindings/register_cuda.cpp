// Bindings of the CUDA backend's state (kronpe/cuda.h): build and version queries, cuBLAS
// discovery, TF32. The CUDA kernels are bound with their families (register_mode_product.cpp,
// register_blend.cpp, register_embed.cpp) as cuda_*; in a module built without CUDA they exist
// and raise RuntimeError (BackendError, csrc/cuda/cuda_stub.cpp).
#include <string>
#include <vector>

#include "common.h"
#include "kronpe/cuda.h"

namespace py = pybind11;
using namespace kronpe;

void register_cuda(py::module_& m) {
  m.def("cuda_built", &cuda::built, "True when the CUDA kernels were compiled in.");
  m.def(
      "cuda_info",
      [](bool load_cublas) {
        const cuda::Info i = cuda::info(load_cublas);
        py::dict d;
        d["runtime_version"] = i.runtime_version;
        d["driver_version"] = i.driver_version;
        d["cublas_header_version"] = i.cublas_header_version;
        d["cublas_loaded"] = i.cublas_loaded;
        d["cublas_version"] = i.cublas_version;
        d["cublas_path"] = i.cublas_path;
        d["cublas_error"] = i.cublas_error;
        return d;
      },
      py::arg("load_cublas") = false, "CUDA runtime, driver and cuBLAS versions (internal).");
  m.def("cuda_set_cublas_paths", &cuda::set_cublas_search_paths, py::arg("paths"),
        "Candidate libcublas files, tried before the soname (internal).");
  m.def("cuda_set_allow_tf32", &cuda::set_allow_tf32, py::arg("allow"));
  m.def("cuda_multigrid_cache", &cuda::multigrid_cache_bytes, py::arg("release") = false,
        "Bytes of device memory the fills' multigrid keeps for the next fills; release: freed first (internal: "
        "kronpe.cuda.empty_cache).");
  m.def("cuda_allow_tf32", &cuda::allow_tf32);
}
