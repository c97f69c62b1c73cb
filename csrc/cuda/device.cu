// CUDA backend: runtime queries, the cuBLAS loader (dlopen) and the row-major GEMM wrapper.
#include <algorithm>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "common.cuh"
#include "cublas.cuh"
#include "kronpe/cuda.h"

namespace kronpe::cuda {
namespace detail {
namespace {

struct Loader {
  std::mutex mutex;
  std::vector<std::string> paths;  // candidates from set_cublas_search_paths
  bool tried = false;
  void* library = nullptr;
  std::string path, error;
  int version = 0;
  CublasApi api;
};

Loader& loader() {
  static Loader* l = new Loader;  // never destroyed: handles may outlive static destructors
  return *l;
}

template <typename F>
bool resolve(void* lib, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

// Tries one candidate; on success fills l.api, l.path, l.version.
bool try_load(Loader& l, const std::string& candidate, std::string& why) {
  dlerror();
  void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    why += "\n  " + candidate + ": " + (e ? e : "not found");
    return false;
  }
  CublasApi api;
  std::string missing;
  resolve(lib, "cublasCreate_v2", api.create, missing);
  resolve(lib, "cublasDestroy_v2", api.destroy, missing);
  resolve(lib, "cublasSetStream_v2", api.set_stream, missing);
  resolve(lib, "cublasGetProperty", api.get_property, missing);
  resolve(lib, "cublasGetStatusString", api.status_string, missing);
  resolve(lib, "cublasGemmStridedBatchedEx_64", api.gemm_strided_batched, missing);
  if (!missing.empty()) {
    why += "\n  " + candidate + ": lacks " + missing;
    dlclose(lib);
    return false;
  }
  int major = 0, minor = 0, patch = 0;
  api.get_property(MAJOR_VERSION, &major);
  api.get_property(MINOR_VERSION, &minor);
  api.get_property(PATCH_LEVEL, &patch);
  if (major != CUBLAS_VER_MAJOR) {
    why += "\n  " + candidate + ": cuBLAS " + std::to_string(major) + " found, kronpe was built with " +
           std::to_string(CUBLAS_VER_MAJOR);
    dlclose(lib);
    return false;
  }
  Dl_info where{};
  l.path = dladdr(reinterpret_cast<void*>(api.create), &where) && where.dli_fname ? where.dli_fname
                                                                                   : candidate;
  l.api = api;
  l.library = lib;
  l.version = major * 10000 + minor * 100 + patch;
  return true;
}

void load_locked(Loader& l) {
  if (l.tried) return;
  l.tried = true;
  std::string why;
  std::vector<std::string> candidates = l.paths;
  candidates.push_back("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  for (const std::string& c : candidates)
    if (try_load(l, c, why)) {
      l.error.clear();
      return;
    }
  l.error = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR) +
            " could not be loaded (pip install nvidia-cublas, or put the CUDA toolkit's lib64 on "
            "the library path); tried:" + why;
}

struct HandleSlot {
  int device;
  cudaStream_t stream;
  cublasHandle_t handle;
};

constexpr size_t kHandleSlots = 64;

}  // namespace

const CublasApi& cublas() {
  Loader& l = loader();
  std::lock_guard<std::mutex> lock(l.mutex);
  load_locked(l);
  if (!l.library) throw BackendError("kronpe CUDA: " + l.error);
  return l.api;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasApi& api = cublas();
  throw BackendError(std::string("kronpe CUDA: ") + what + " failed: " + api.status_string(status) +
                     " (cublasStatus_t " + std::to_string(int(status)) + ")");
}

namespace {
// The handles: one per (device, stream), shared by every thread (cuBLAS allows one handle from
// several threads; a handle's stream never changes, so no thread reconfigures another's), under
// a mutex. A stream under CUDA graph capture cannot get a new one (cublasCreate allocates), so
// one handle per device is kept ready for it, made by the last uncaptured call that found none;
// the forward and the backward of a captured step (two threads: torch's autograd runs the
// backward on its own) then share the handle of the capture stream.
struct Handles {
  std::mutex mutex;
  std::vector<HandleSlot> slots;  // at most kHandleSlots; the oldest evicted first
  std::vector<std::pair<int, cublasHandle_t>> spares;
};
Handles& handles() {
  static Handles* h = new Handles;  // never destroyed (see cublas_handle)
  return *h;
}

cublasHandle_t new_handle(const CublasApi& api, cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  check_cublas(api.create(&h), "cublasCreate");
  cublasStatus_t st = api.set_stream(h, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    api.destroy(h);
    check_cublas(st, "cublasSetStream");
  }
  return h;
}
}  // namespace

cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  // Never destroyed at thread or process exit (the CUDA context may already be gone then);
  // only evicted when more than kHandleSlots streams have been used.
  const CublasApi& api = cublas();
  Handles& all = handles();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const HandleSlot& s : all.slots)
    if (s.device == device && s.stream == stream) return s.handle;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  auto spare = std::find_if(all.spares.begin(), all.spares.end(),
                            [&](const auto& e) { return e.first == device; });
  cublasHandle_t h = nullptr;
  if (capture != cudaStreamCaptureStatusNone) {
    if (spare == all.spares.end())
      throw BackendError(
          "kronpe CUDA: no cuBLAS handle can be made while a CUDA graph is being captured: run "
          "the computation once on this device outside the capture first");
    h = spare->second;
    all.spares.erase(spare);
    check_cublas(api.set_stream(h, stream), "cublasSetStream");
  } else {
    h = new_handle(api, stream);
    if (spare == all.spares.end()) all.spares.push_back({device, new_handle(api, nullptr)});
  }
  if (all.slots.size() >= kHandleSlots) {
    api.destroy(all.slots.front().handle);
    all.slots.erase(all.slots.begin());
  }
  all.slots.push_back({device, stream, h});
  return h;
}

namespace {
std::atomic<bool> g_allow_tf32{false};
}

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, index_t m, index_t n, index_t k,
          const T* a, index_t lda, index_t stride_a, const T* b, index_t ldb, index_t stride_b,
          T* c, index_t ldc, index_t stride_c, index_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const CublasApi& api = cublas();
  cublasHandle_t h = cublas_handle(ctx.device, stream_of(ctx));
  const T one = T(1), zero = T(0);
  const bool f32 = sizeof(T) == 4;
  const cudaDataType type = f32 ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute =
      f32 ? (g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F)
          : CUBLAS_COMPUTE_64F;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix with
  // row stride ld is the column-major transpose with leading dimension ld.
  check_cublas(api.gemm_strided_batched(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, type,
                                        ldb, stride_b, a, type, lda, stride_a, &zero, c, type, ldc,
                                        stride_c, batch, compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx_64");
}

template void gemm<float>(const Context&, bool, bool, index_t, index_t, index_t, const float*,
                          index_t, index_t, const float*, index_t, index_t, float*, index_t,
                          index_t, index_t);
template void gemm<double>(const Context&, bool, bool, index_t, index_t, index_t, const double*,
                           index_t, index_t, const double*, index_t, index_t, double*, index_t,
                           index_t, index_t);

}  // namespace detail

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver" / "no device" error
    return 0;
  }
  return n;
}

Info info(bool load_cublas) {
  Info out;
  cudaRuntimeGetVersion(&out.runtime_version);
  if (cudaDriverGetVersion(&out.driver_version) != cudaSuccess) out.driver_version = 0;
  cudaGetLastError();
  out.cublas_header_version = CUBLAS_VERSION;
  detail::Loader& l = detail::loader();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (load_cublas) detail::load_locked(l);
  out.cublas_loaded = l.library != nullptr;
  out.cublas_version = l.version;
  out.cublas_path = l.path;
  out.cublas_error = l.error;
  return out;
}

void set_cublas_search_paths(const std::vector<std::string>& paths) {
  detail::Loader& l = detail::loader();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.paths = paths;
  if (!l.library) l.tried = false;  // try again with the new candidates
}

void set_allow_tf32(bool allow) { detail::g_allow_tf32.store(allow); }
bool allow_tf32() { return detail::g_allow_tf32.load(); }

}  // namespace kronpe::cuda
