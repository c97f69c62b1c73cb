// CUDA mode-n products: the shared executor (kronpe/mode_product_exec.h) with a cuBLAS backend:
// strided-batched GEMMs and strided-copy kernels (a tiled transpose when the two arrays'
// contiguous axes differ, a plain gather otherwise) on the caller's stream and scratch memory.
#include <optional>
#include <vector>

#include "common.cuh"
#include "cublas.cuh"
#include "kronpe/cuda.h"
#include "kronpe/mode_product.h"
#include "kronpe/mode_product_exec.h"

namespace kronpe::cuda {
namespace {

constexpr int kMaxCopyDims = 12;  // merged axes of a copy (after merging; far above real use)
constexpr int kCopyBlock = 256;
constexpr int kTile = 32;         // transpose tile (kTile x kTile elements)
constexpr int kTileRows = 8;      // threads per tile column

struct CopyAxes {
  int nd = 0;
  index_t n[kMaxCopyDims], s[kMaxCopyDims], d[kMaxCopyDims];
};

// dst[e] for every e of the box: the destination's row-major order over the merged axes.
template <typename T, typename I>
__global__ void copy_kernel(CopyAxes ax, I total, const T* __restrict__ src, T* __restrict__ dst) {
  for (I e = I(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    I rest = e, so = 0, dof = 0;
    for (int k = ax.nd - 1; k >= 0; --k) {
      const I n = I(ax.n[k]);
      const I i = rest % n;
      rest /= n;
      so += i * I(ax.s[k]);
      dof += i * I(ax.d[k]);
    }
    dst[dof] = src[so];
  }
}

// Tiled transpose: axis a is contiguous in dst (d = 1), axis b in src (s = 1); the other axes
// (`outer`) are walked by blockIdx.z. Reads and writes are both coalesced.
template <typename T>
__global__ void transpose_kernel(CopyAxes outer, index_t outer_count, index_t na, index_t sa,
                                 index_t nb, index_t db, const T* __restrict__ src,
                                 T* __restrict__ dst) {
  __shared__ T tile[kTile][kTile + 1];
  const index_t tiles_b = (nb + kTile - 1) / kTile, tiles_a = (na + kTile - 1) / kTile;
  for (index_t o = blockIdx.z; o < outer_count; o += gridDim.z) {
    index_t rest = o, so = 0, dof = 0;
    for (int k = outer.nd - 1; k >= 0; --k) {
      const index_t i = rest % outer.n[k];
      rest /= outer.n[k];
      so += i * outer.s[k];
      dof += i * outer.d[k];
    }
    for (index_t ta = blockIdx.y; ta < tiles_a; ta += gridDim.y)
      for (index_t tb = blockIdx.x; tb < tiles_b; tb += gridDim.x) {
        const index_t a0 = ta * kTile, b0 = tb * kTile;
        __syncthreads();  // the previous tile has been written out
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const index_t a = a0 + j, b = b0 + threadIdx.x;
          if (a < na && b < nb) tile[j][threadIdx.x] = src[so + a * sa + b];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const index_t a = a0 + threadIdx.x, b = b0 + j;
          if (a < na && b < nb) dst[dof + a + b * db] = tile[threadIdx.x][j];
        }
      }
  }
}

bool offsets_fit32(const std::vector<CopyDim>& dims, index_t total) {
  index_t reach_s = 0, reach_d = 0;
  for (const CopyDim& c : dims) {
    reach_s += (c.s < 0 ? -c.s : c.s) * (c.n - 1);
    reach_d += (c.d < 0 ? -c.d : c.d) * (c.n - 1);
  }
  const index_t lim = index_t(1) << 30;  // room for the grid-stride step
  return total < lim && reach_s < lim && reach_d < lim;
}

template <typename T>
void launch_copy(const Context& ctx, const std::vector<CopyDim>& dims, const T* src, T* dst) {
  const cudaStream_t s = detail::stream_of(ctx);
  if (dims.empty()) {  // one element
    detail::check(cudaMemcpyAsync(dst, src, sizeof(T), cudaMemcpyDeviceToDevice, s),
                  "cudaMemcpyAsync (one element)");
    return;
  }
  require(int(dims.size()) <= kMaxCopyDims,
          "strided copy (CUDA): more than " + std::to_string(kMaxCopyDims) +
              " axes that cannot be merged");
  index_t total = 1;
  for (const CopyDim& c : dims) total *= c.n;
  const int nd = int(dims.size());
  // contiguous in both: one memcpy
  if (nd == 1 && dims[0].s == 1 && dims[0].d == 1) {
    detail::check(cudaMemcpyAsync(dst, src, size_t(total) * sizeof(T), cudaMemcpyDeviceToDevice, s),
                  "cudaMemcpyAsync (contiguous copy)");
    return;
  }
  // the destination's contiguous axis is the last; the source's, if another one, gets the tile
  int b = -1;
  if (dims[size_t(nd - 1)].d == 1 && dims[size_t(nd - 1)].s != 1)
    for (int i = 0; i < nd - 1; ++i)
      if (dims[size_t(i)].s == 1) b = i;
  if (b >= 0 && dims[size_t(nd - 1)].n >= 4 && dims[size_t(b)].n >= 4) {
    const CopyDim& A = dims[size_t(nd - 1)];
    const CopyDim& B = dims[size_t(b)];
    CopyAxes outer;
    index_t outer_count = 1;
    for (int i = 0; i < nd - 1; ++i) {
      if (i == b) continue;
      outer.n[outer.nd] = dims[size_t(i)].n;
      outer.s[outer.nd] = dims[size_t(i)].s;
      outer.d[outer.nd] = dims[size_t(i)].d;
      ++outer.nd;
      outer_count *= dims[size_t(i)].n;
    }
    const index_t tiles_a = (A.n + kTile - 1) / kTile, tiles_b = (B.n + kTile - 1) / kTile;
    const dim3 grid(unsigned(std::min<index_t>(tiles_b, 1 << 16)),
                    unsigned(std::min<index_t>(tiles_a, 65535)),
                    unsigned(std::min<index_t>(outer_count, 65535)));
    transpose_kernel<T><<<grid, dim3(kTile, kTileRows), 0, s>>>(outer, outer_count, A.n, A.s, B.n,
                                                                B.d, src, dst);
    detail::check_launch("strided copy (transpose) kernel");
    return;
  }
  CopyAxes ax;
  ax.nd = nd;
  for (int i = 0; i < nd; ++i) {
    ax.n[i] = dims[size_t(i)].n;
    ax.s[i] = dims[size_t(i)].s;
    ax.d[i] = dims[size_t(i)].d;
  }
  const unsigned grid = detail::blocks_for(total, kCopyBlock);
  if (offsets_fit32(dims, total))
    copy_kernel<T, std::int32_t><<<grid, kCopyBlock, 0, s>>>(ax, std::int32_t(total), src, dst);
  else
    copy_kernel<T, index_t><<<grid, kCopyBlock, 0, s>>>(ax, total, src, dst);
  detail::check_launch("strided copy kernel");
}

template <typename T>
class CudaBackend {
 public:
  explicit CudaBackend(const Context& ctx) : ctx_(ctx) {}
  const ModeCostModel& model() const { return cuda_cost_model(); }
  void start() { guard_.emplace(ctx_.device); }
  void zero(T* dst, index_t n) {
    detail::check(cudaMemsetAsync(dst, 0, size_t(n) * sizeof(T), detail::stream_of(ctx_)),
                  "cudaMemsetAsync (empty contraction)");
  }
  unsigned char* scratch(std::size_t bytes) {
    scratch_.emplace(ctx_, bytes);
    return bytes ? scratch_->template take<unsigned char>(bytes) : nullptr;
  }
  void copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides, T* dst,
            const index_t* dst_strides) {
    std::vector<CopyDim> dims;
    if (copy_dims(ndim, shape, src_strides, dst_strides, dims)) launch_copy<T>(ctx_, dims, src, dst);
  }
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, const T* a, index_t lda,
            index_t stride_a, const T* b, index_t ldb, index_t stride_b, T* c, index_t ldc,
            index_t stride_c, index_t batch) {
    detail::gemm<T>(ctx_, ta, tb, M, N, K, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c,
                    batch);
  }
  template <typename F>
  void run_ops(const ChainProgram& prog, F&& step) {
    for (const ChainOp& op : prog.ops) step(*this, op);
  }

 private:
  const Context& ctx_;
  std::optional<detail::DeviceGuard> guard_;
  std::optional<detail::Scratch> scratch_;  // released (stream-ordered) after the chain
};

}  // namespace

const ModeCostModel& cuda_cost_model() {
  // Rough figures for an A100/H100-class GPU (float32 without TF32 ~ 20-50 Tflop/s, a GEMM
  // launch ~ 5 us, a permuting copy at ~ 1 TB/s effective); only ratios matter.
  static const ModeCostModel cm{/*rate_f32=*/30e12, /*half=*/96.0, /*call=*/5e-6,
                                /*copy_f32=*/8e-12, /*batched_one_call=*/true, /*id=*/1,
                                /*layout_penalty=*/{0.0, 0.0, 0.0, 0.0, 0.0}};
  return cm;
}

std::size_t multi_mode_workspace(int ndim, const index_t* shape, const index_t* strides,
                                 int nmodes, const int* modes, const index_t* out_rows,
                                 const index_t* mat_strides, int elem_size, bool any_layout) {
  require(elem_size == 4 || elem_size == 8, "multi_mode_workspace: element size must be 4 or 8");
  const ChainProgram prog = mode_chain_program(ndim, shape, strides, nmodes, modes, out_rows,
                                                elem_size, any_layout, cuda_cost_model());
  std::vector<index_t> cols(static_cast<size_t>(nmodes));
  for (int j = 0; j < nmodes; ++j) cols[size_t(j)] = shape[modes[j]];
  return chain_workspace_bytes(prog, nmodes, out_rows, cols.data(), mat_strides, elem_size);
}

template <typename T>
void strided_copy(const Context& ctx, int ndim, const index_t* shape, const T* src,
                  const index_t* src_strides, T* dst, const index_t* dst_strides) {
  std::vector<CopyDim> dims;
  if (!copy_dims(ndim, shape, src_strides, dst_strides, dims)) return;
  detail::DeviceGuard guard(ctx.device);
  launch_copy<T>(ctx, dims, src, dst);
}

template <typename T>
void multi_mode_product(const Context& ctx, int ndim, const index_t* shape, const T* src,
                        const index_t* src_strides, int nmodes, const int* modes,
                        const MatrixRef<T>* mats, T* dst, int* out_order) {
  CudaBackend<T> backend(ctx);
  run_mode_chain<T>(backend, ndim, shape, src, src_strides, nmodes, modes, mats, dst, out_order);
}

template void strided_copy<float>(const Context&, int, const index_t*, const float*, const index_t*,
                                  float*, const index_t*);
template void strided_copy<double>(const Context&, int, const index_t*, const double*,
                                   const index_t*, double*, const index_t*);
template void multi_mode_product<float>(const Context&, int, const index_t*, const float*,
                                        const index_t*, int, const int*, const MatrixRef<float>*,
                                        float*, int*);
template void multi_mode_product<double>(const Context&, int, const index_t*, const double*,
                                         const index_t*, int, const int*,
                                         const MatrixRef<double>*, double*, int*);

}  // namespace kronpe::cuda
