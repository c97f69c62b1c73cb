// kronpe C++ core: the CUDA backend's host-side entry points. No CUDA, Python or torch types:
// device pointers are plain pointers, a stream is a cudaStream_t passed as an integer.
//
// Conventions (every entry point below):
//   * `Context` names the CUDA device the arrays live on, a stream on that device, and scratch
//     memory on that device given by the caller (from its own allocator, e.g. CuPy's or torch's
//     caching allocator, so that it is stream-ordered like the arrays). Each kernel family has a
//     `*_workspace` query for the bytes it needs; with less (or none), the kernel takes the rest
//     from CUDA's stream-ordered allocator (cudaMallocAsync / cudaFreeAsync on the same stream).
//   * Work is enqueued on the stream and the call returns without waiting (no device
//     synchronisation; small host-to-device uploads of parameters are stream-ordered too).
//   * Arguments are checked on the host before anything is launched (ArgumentError, i.e.
//     ValueError in Python). A CUDA or cuBLAS failure throws BackendError (RuntimeError) with
//     CUDA's / cuBLAS's own error string. In a module built without CUDA every entry point
//     throws BackendError("kronpe was built without CUDA ...").
//   * Sizes and offsets are 64-bit everywhere (kernels switch to 32-bit index arithmetic only
//     where every offset fits); GEMMs use cuBLAS's 64-bit API.
//
// cuBLAS is not linked: it is loaded with dlopen on first use (a GEMM), from the paths handed
// over by set_cublas_search_paths (the Python layer passes the nvidia-cublas wheel's
// nvidia/cu13/lib, where torch and CuPy find theirs), else by its soname (libcublas.so.<major>,
// the system's search path, or the copy torch/CuPy already loaded into the process). So the
// module imports on machines without a GPU, a driver or cuBLAS.
//
// Determinism: embedders, blend, the stored/on-the-fly weights and the mode-n chains (cuBLAS
// with a fixed algorithm on one stream) give the same bits run to run. blend_transpose with a
// plan (a sort of the nonzeros by grid node, see blend_plan_*) is deterministic: every node sums
// its contributions in a fixed order, in float64. Without a plan it scatters with atomicAdd:
// faster, no extra memory, but the order of the additions (so the last bits) varies.
//
// TF32: float32 GEMMs compute in full float32 (CUBLAS_COMPUTE_32F) unless set_allow_tf32(true).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kronpe/blend.h"
#include "kronpe/common.h"
#include "kronpe/embed.h"
#include "kronpe/mode_product.h"
#include "kronpe/multigrid.h"

namespace kronpe::cuda {

using Stream = std::uintptr_t;  // a cudaStream_t; 0 is the legacy default stream

bool built();        // true when the CUDA kernels were compiled into this module
int device_count();  // visible CUDA devices (0 without a driver or a device); never throws

struct Info {
  int runtime_version = 0;        // the CUDA runtime compiled in (statically linked)
  int driver_version = 0;         // 0 without a driver
  int cublas_header_version = 0;  // CUBLAS_VERSION of the headers the kernels were built with
  bool cublas_loaded = false;
  int cublas_version = 0;         // of the loaded library (0 if not loaded)
  std::string cublas_path;        // where it was loaded from
  std::string cublas_error;       // why loading failed (empty if it did not)
};
// Versions; with load_cublas, first try to load cuBLAS (no device needed). Never throws.
Info info(bool load_cublas);

// Candidate files for libcublas, tried in order before the soname (replaces earlier ones).
void set_cublas_search_paths(const std::vector<std::string>& paths);

// TF32 tensor-core math for float32 GEMMs (off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();

struct Context {
  int device = 0;
  Stream stream = 0;
  void* workspace = nullptr;  // device memory on `device`
  std::size_t workspace_bytes = 0;
};

// ---- embedders (kronpe/embed.h) -------------------------------------------------------------
// x: n coordinates (stride x_stride), out: (n, K) with the given strides, both on the device.
template <typename T>
void embed_basis(const Context& ctx, const BasisParams& p, index_t n, const T* x, index_t x_stride,
                 T* out, index_t out_row_stride, index_t out_col_stride);
// p.omega points to HOST memory (F values); they are uploaded into the workspace.
std::size_t embed_fourier_workspace(const FourierParams& p);
template <typename T>
void embed_fourier(const Context& ctx, const FourierParams& p, index_t n, const T* x,
                   index_t x_stride, T* out, index_t out_row_stride, index_t out_col_stride);

// ---- mode-n products (kronpe/mode_product.h) -------------------------------------------------
// The chain is planned by the CPU planner with a GPU cost model (cuda_cost_model) and lowered
// to the same ChainProgram; GEMMs run in cuBLAS (strided-batched, 64-bit API), permuting copies
// in a tiled transpose kernel. mat_strides: 2 per matrix (row, column), as in MatrixRef.
const ModeCostModel& cuda_cost_model();
std::size_t multi_mode_workspace(int ndim, const index_t* shape, const index_t* strides,
                                 int nmodes, const int* modes, const index_t* out_rows,
                                 const index_t* mat_strides, int elem_size, bool any_layout);
template <typename T>
void multi_mode_product(const Context& ctx, int ndim, const index_t* shape, const T* src,
                        const index_t* src_strides, int nmodes, const int* modes,
                        const MatrixRef<T>* mats, T* dst, int* out_order = nullptr);
// dst[i] = src[i] over a strided box (strides in elements, any sign). No workspace.
template <typename T>
void strided_copy(const Context& ctx, int ndim, const index_t* shape, const T* src,
                  const index_t* src_strides, T* dst, const index_t* dst_strides);

// ---- blending matrix (kronpe/blend.h) --------------------------------------------------------
// `wf` is built on the host (it validates the axes); its tables are uploaded into the workspace
// by every on-the-fly call (blend_fly_workspace bytes). Points, values, outputs, indices,
// weights, perm and offsets are device memory. Coordinates are clamped onto the grid as on the
// CPU (the Python layer validates them first).
std::size_t blend_fly_workspace(const blend::WeightFunction& wf);
template <typename Q>
void blend_weights(const Context& ctx, const blend::WeightFunction& wf,
                   blend::MatrixView<const Q> points, blend::MatrixView<index_t> indices,
                   blend::MatrixView<double> weights);
template <typename T, typename Q>
void blend_fly(const Context& ctx, const blend::WeightFunction& wf,
               blend::MatrixView<const Q> points, blend::MatrixView<const T> grid,
               blend::MatrixView<T> out);
// perm/offsets: a plan from blend_plan_fly on the same points (deterministic), or both null
// (atomicAdd scatter).
template <typename T, typename Q>
void blend_transpose_fly(const Context& ctx, const blend::WeightFunction& wf,
                         blend::MatrixView<const Q> points, blend::MatrixView<const T> values,
                         blend::MatrixView<T> out, const index_t* perm, const index_t* offsets);

// Stored (indices, weights) of shape (P, nnz). An index outside [0, G) is skipped (it is never
// read or written); callers that take indices from users check them first.
template <typename T>
void blend_stored(const Context& ctx, blend::MatrixView<const index_t> indices,
                  blend::MatrixView<const double> weights, blend::MatrixView<const T> grid,
                  blend::MatrixView<T> out);
template <typename T>
void blend_transpose_stored(const Context& ctx, blend::MatrixView<const index_t> indices,
                            blend::MatrixView<const double> weights,
                            blend::MatrixView<const T> values, blend::MatrixView<T> out,
                            const index_t* perm, const index_t* offsets);

// Plans of the deterministic transpose: the P * nnz nonzeros e = p * nnz + k sorted stably by
// grid index (perm, P * nnz entries) and the start of each node's run (offsets, G + 1 entries).
// Nonzeros with an index outside [0, G) are left out. Workspace: blend_plan_workspace bytes
// (plus blend_fly_workspace(wf) for blend_plan_fly).
std::size_t blend_plan_workspace(index_t points, index_t nnz, index_t grid_size);
template <typename Q>
void blend_plan_fly(const Context& ctx, const blend::WeightFunction& wf,
                    blend::MatrixView<const Q> points, index_t* perm, index_t* offsets);
void blend_plan_stored(const Context& ctx, blend::MatrixView<const index_t> indices,
                       index_t grid_size, index_t* perm, index_t* offsets);

// ---- the thin-plate multigrid solver on the device (kronpe/multigrid.h) ----------------------
// ThinPlateHierarchy<float>'s hierarchy, V-cycle, full multigrid and PCG with their vectors on a
// device (the thin-plate penalty, natural or mirrored; float32 vectors, float64 dot products and
// coarsest solve), for the default fills (kronpe.solvers.smooth). Arrays in and out of these
// calls are HOST arrays of the grid's size: the solver keeps its own device copies, works on a
// stream of its own and returns once the results are back. The same operations as the host's;
// the sums run in another order, so values agree to rounding, not to the bit.
class DeviceThinPlate {
 public:
  DeviceThinPlate(int device, const smooth::Grid& g, const float* m, const smooth::MultigridOptions& options);
  ~DeviceThinPlate();
  DeviceThinPlate(const DeviceThinPlate&) = delete;
  DeviceThinPlate& operator=(const DeviceThinPlate&) = delete;

  void set_lambda(double lam);
  void set_reflect(bool reflect);
  void set_data_term(const float* m);
  int levels() const;
  // out = A x (higher > 0: with R + higher L^3, mirrored: the sweep's higher-order system)
  void apply(const float* x, float* out, double higher = 0.0);
  void vcycle(const float* b, float* x);
  void fmg(const float* b, float* x, int cycles);
  void cycles(const float* b, float* x, bool from_x, int count, double omega);
  smooth::PcgResult pcg(const float* b, float* x, bool from_x, double tol, index_t maxiter, double scale,
                        double higher = 0.0);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The default fill of a diagonal data term (kronpe.solvers.smooth.fit with lambda held out, its
// steps on the host when no LeadSolve runs beside the sweep) on the device: the held-out sweep
// (kronpe/sweep.h) for the selection signal y with the nodes `hold` left out, then every channel's
// PCG at the lambda chosen (the interpolation limit's lambda when the sweep chose it), the first
// from the sweep's fit when `lead` (y is b[0]), with the higher-order penalty when the sweep took
// it, the others from full multigrid to tol times the first one's norm. m, b[c], y: host arrays of
// g's size; x[c]: the channels' solutions (host). Nothing is clipped or mixed here.
struct FillSettings {
  smooth::SweepSettings sweep;
  smooth::MultigridOptions options;
  double lam_interpolating = 0.0;
  double tol = 1e-3, tol_interpolating = 3e-4;
  index_t maxiter = 0;
  bool lead = false;
};
struct FillOutcome {
  smooth::SweepOutcome sweep;
  double lam = 0.0;
  index_t iterations = 0;
  std::vector<double> errors;  // each channel's stopping measure
};
// The device memory the hierarchies keep for the next ones (blocks of the sizes a fill used,
// at most 1 GiB in all); with release, it is freed first. Never throws (0 without CUDA).
std::size_t multigrid_cache_bytes(bool release) noexcept;

FillOutcome smooth_fill(int device, const smooth::Grid& g, const float* m, int channels, const float* const* b,
                        const float* y, index_t nhold, const index_t* hold, const FillSettings& s,
                        float* const* x);

}  // namespace kronpe::cuda
