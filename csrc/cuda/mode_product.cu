// CUDA mode-n products: the CPU planner's ChainProgram (kronpe/mode_product.h) executed with
// cuBLAS strided-batched GEMMs and strided-copy kernels (a tiled transpose when the two arrays'
// contiguous axes differ, a plain gather otherwise).
#include <vector>

#include "common.cuh"
#include "cublas.cuh"
#include "kronpe/cuda.h"
#include "kronpe/mode_product.h"

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

// The program of a chain on the GPU (planned with the GPU cost model, cached per thread).
ChainProgram program(int ndim, const index_t* shape, const index_t* strides, int nmodes,
                     const int* modes, const index_t* out_rows, int elem_size, bool any_layout) {
  return mode_chain_program(ndim, shape, strides, nmodes, modes, out_rows, elem_size, any_layout,
                            cuda_cost_model());
}

std::size_t workspace_of(const ChainProgram& prog, int nmodes, const index_t* out_rows,
                         const index_t* in_cols, const index_t* mat_strides, int elem_size) {
  if (prog.ops.empty()) return 0;
  std::size_t bytes = 2 * detail::aligned(std::size_t(prog.workspace) * std::size_t(elem_size));
  for (int j = 0; j < nmodes; ++j)
    if (!operand_layout(out_rows[j], in_cols[j], mat_strides[2 * j], mat_strides[2 * j + 1]).in_place)
      bytes += detail::aligned(std::size_t(out_rows[j] * in_cols[j]) * std::size_t(elem_size));
  return bytes;
}

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
  const ChainProgram prog =
      program(ndim, shape, strides, nmodes, modes, out_rows, elem_size, any_layout);
  std::vector<index_t> cols(static_cast<size_t>(nmodes));
  for (int j = 0; j < nmodes; ++j) cols[size_t(j)] = shape[modes[j]];
  return workspace_of(prog, nmodes, out_rows, cols.data(), mat_strides, elem_size);
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
  require(nmodes >= 0, "mode product: negative number of modes");
  std::vector<index_t> rows(static_cast<size_t>(nmodes)), cols(static_cast<size_t>(nmodes)),
      mstrides(2 * static_cast<size_t>(nmodes));
  for (int j = 0; j < nmodes; ++j) {
    rows[size_t(j)] = mats[j].rows;
    cols[size_t(j)] = mats[j].cols;
    mstrides[2 * size_t(j)] = mats[j].row_stride;
    mstrides[2 * size_t(j) + 1] = mats[j].col_stride;
  }
  mode_chain_shape(ndim, shape, nmodes, modes, rows.data(), cols.data());  // checks
  const ChainProgram prog = program(ndim, shape, src_strides, nmodes, modes, rows.data(),
                                    int(sizeof(T)), out_order != nullptr);
  if (out_order)
    for (int i = 0; i < ndim; ++i) out_order[i] = prog.out_order[size_t(i)];
  if (prog.out_size == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  if (prog.in_size == 0) {  // sums over empty axes
    detail::check(cudaMemsetAsync(dst, 0, size_t(prog.out_size) * sizeof(T), s),
                  "cudaMemsetAsync (empty contraction)");
    return;
  }
  detail::Scratch scratch(ctx, workspace_of(prog, nmodes, rows.data(), cols.data(),
                                            mstrides.data(), int(sizeof(T))));
  T* work[2] = {nullptr, nullptr};
  if (prog.workspace > 0) {
    work[0] = scratch.take<T>(size_t(prog.workspace));
    work[1] = scratch.take<T>(size_t(prog.workspace));
  }
  // matrices: read in place when cuBLAS can, else a dense row-major copy
  std::vector<OperandLayout> lay(static_cast<size_t>(nmodes));
  std::vector<const T*> mdata(static_cast<size_t>(nmodes));
  for (int j = 0; j < nmodes; ++j) {
    const MatrixRef<T>& a = mats[j];
    lay[size_t(j)] = operand_layout(a.rows, a.cols, a.row_stride, a.col_stride);
    mdata[size_t(j)] = a.data;
    if (!lay[size_t(j)].in_place) {
      T* c = scratch.take<T>(size_t(a.rows * a.cols));
      const index_t shp[2] = {a.rows, a.cols}, ss[2] = {a.row_stride, a.col_stride},
                    ds[2] = {a.cols, 1};
      std::vector<CopyDim> dims;
      if (copy_dims(2, shp, ss, ds, dims)) launch_copy<T>(ctx, dims, a.data, c);
      mdata[size_t(j)] = c;
    }
  }
  auto pointer = [&](ChainBuffer b) -> T* {
    switch (b) {
      case ChainBuffer::input: return const_cast<T*>(src);  // only ever read
      case ChainBuffer::work0: return work[0];
      case ChainBuffer::work1: return work[1];
      default: return dst;
    }
  };
  for (const ChainOp& op : prog.ops) {
    const T* x = pointer(op.src);
    T* y = pointer(op.dst);
    if (op.kind == ChainOp::copy) {
      std::vector<CopyDim> dims;
      if (copy_dims(int(op.shape.size()), op.shape.data(), op.src_strides.data(),
                    op.dst_strides.data(), dims))
        launch_copy<T>(ctx, dims, x, y);
      continue;
    }
    const OperandLayout& A = lay[size_t(op.matrix)];
    const bool ta = op.matrix_trans != A.stored_transposed;
    const T* a = mdata[size_t(op.matrix)];
    if (op.matrix_left)
      detail::gemm<T>(ctx, ta, op.buffer_trans, op.M, op.N, op.K, a, A.ld, 0, x, op.ld_buffer,
                      op.stride_buffer, y, op.ldc, op.stride_c, op.batch);
    else
      detail::gemm<T>(ctx, op.buffer_trans, ta, op.M, op.N, op.K, x, op.ld_buffer, op.stride_buffer,
                      a, A.ld, 0, y, op.ldc, op.stride_c, op.batch);
  }
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
