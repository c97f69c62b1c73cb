// CUDA blending-matrix kernels (see kronpe/blend.h for the matrix, kronpe/cuda.h for the
// conventions). The per-axis weights use the same math as the CPU (kronpe/blend_math.h) on the
// tables of a host WeightFunction uploaded per call.
//
// Transpose (B^T, a scatter-add onto the grid), two ways:
//   * with a plan: the nonzeros sorted stably by grid node (CUB radix sort, built once per set of
//     points); one thread per node sums its run in that order, in float64: deterministic;
//   * without: one thread per point and atomicAdd per nonzero: no plan, nondeterministic order.
#include <cub/device/device_radix_sort.cuh>

#include <type_traits>
#include <vector>

#include "common.cuh"
#include "kronpe/blend.h"
#include "kronpe/blend_math.h"
#include "kronpe/cuda.h"

namespace kronpe::cuda {
namespace {

using blend::Kernel;
using blend::MatrixView;
using blend::WeightFunction;
namespace bm = blend::math;

constexpr int kBlock = 256;
constexpr int kChan = 8;  // channels accumulated in registers at a time

// One axis on the device: scalars by value, per-node/per-cell arrays as offsets into the table.
struct DevAxis {
  index_t M, stride;
  index_t nodes, dh, dt;  // offsets (in doubles) into the uploaded table
  double param, lo, hi, inv_h, D0;
  int kind;
  bool uniform;
};

struct DevGrid {
  int D;
  bool normalize;
  index_t G;
  DevAxis ax[blend::kMaxDims];
};

// Cell and weight pair of coordinate q along axis a (clamped as on the CPU).
__device__ __forceinline__ void axis_pair(const DevAxis& a, const double* __restrict__ table,
                                          bool normalize, double q, index_t& j, double& w0,
                                          double& w1) {
  double beta, h;
  bm::locate(table + a.nodes, a.M, a.lo, a.hi, a.inv_h, a.uniform, q, j, beta, h);
  bm::pair(Kernel(a.kind), normalize, a.param, a.D0, table[a.dh + j], table[a.dt + j], beta, h, w0,
           w1);
}

// Kernels with per-point weight arrays come in versions for DC = 1, 2, 3 axes known at compile
// time (the arrays live in registers, every loop unrolled) and a generic one (DC = 0: g.D axes
// at run time, arrays of kMaxDims in local memory: 320 bytes of stack per thread, which made the
// on-the-fly kernels instruction-bound). The arithmetic, and its order, is the same in all.
template <int DC>
__device__ __forceinline__ int dims(const DevGrid& g) {
  return DC > 0 ? DC : g.D;
}
template <int DC>
constexpr int kSlots = DC > 0 ? DC : blend::kMaxDims;

// The per-axis pairs of point p: base index of its cell and (w0, w1) per axis.
template <int DC, typename Q>
__device__ __forceinline__ index_t point_pairs(const DevGrid& g, const double* __restrict__ table,
                                               MatrixView<const Q> pts, index_t p, double* w0,
                                               double* w1) {
  index_t base = 0;
#pragma unroll
  for (int i = 0; i < dims<DC>(g); ++i) {
    index_t j;
    axis_pair(g.ax[i], table, g.normalize, double(pts(p, i)), j, w0[i], w1[i]);
    base += j * g.ax[i].stride;
  }
  return base;
}

// Weight and grid offset of corner c (axis 0 the most significant bit), multiplied in axis
// order as on the CPU.
template <int DC>
__device__ __forceinline__ double corner(const DevGrid& g, const double* w0, const double* w1,
                                         index_t c, index_t& offset) {
  const int D = dims<DC>(g);
  double w = 1.0;
  offset = 0;
#pragma unroll
  for (int i = 0; i < D; ++i) {
    const bool bit = (c >> (D - 1 - i)) & 1;
    w *= bit ? w1[i] : w0[i];
    offset += bit ? g.ax[i].stride : 0;
  }
  return w;
}

// Weight of corner c of point p (recomputed from the point: used by the planned transpose).
template <typename Q>
__device__ __forceinline__ double corner_weight(const DevGrid& g, const double* __restrict__ table,
                                                MatrixView<const Q> pts, index_t p, index_t c) {
  double w = 1.0;
  for (int i = 0; i < g.D; ++i) {
    index_t j;
    double a0, a1;
    axis_pair(g.ax[i], table, g.normalize, double(pts(p, i)), j, a0, a1);
    w *= ((c >> (g.D - 1 - i)) & 1) ? a1 : a0;
  }
  return w;
}

// out(r, c) = sum over the terms (w, row) of w * src(row, c), for every channel c, accumulated in
// float64 in the order the terms come. terms(add) calls add(w, row) once per term; it is called
// once per chunk of kChan channels.
template <typename T, typename Terms>
__device__ __forceinline__ void gather_row(MatrixView<const T> src, Terms terms, MatrixView<T> out,
                                           index_t r) {
  const index_t C = src.cols;
  for (index_t c0 = 0; c0 < C; c0 += kChan) {
    const int nch = int(C - c0 < kChan ? C - c0 : kChan);
    double acc[kChan] = {0, 0, 0, 0, 0, 0, 0, 0};
    terms([&](double w, index_t row) {
#pragma unroll
      for (int k = 0; k < kChan; ++k)
        if (k < nch) acc[k] += w * double(src(row, c0 + k));
    });
#pragma unroll
    for (int k = 0; k < kChan; ++k)
      if (k < nch) out(r, c0 + k) = T(acc[k]);
  }
}

__device__ __forceinline__ bool bad_index(index_t idx, index_t size) {
  return static_cast<std::uint64_t>(idx) >= static_cast<std::uint64_t>(size);
}

#define KRONPE_GRID_STRIDE(i, n) \
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += index_t(gridDim.x) * blockDim.x)

// ---- kernels: on the fly ---------------------------------------------------------------------
template <int DC, typename Q>
__global__ void weights_kernel(DevGrid g, const double* __restrict__ table, MatrixView<const Q> pts,
                               MatrixView<index_t> indices, MatrixView<double> weights) {
  double w0[kSlots<DC>], w1[kSlots<DC>];
  const index_t nc = index_t(1) << dims<DC>(g);
  KRONPE_GRID_STRIDE(p, pts.rows) {
    const index_t base = point_pairs<DC>(g, table, pts, p, w0, w1);
#pragma unroll
    for (index_t c = 0; c < nc; ++c) {
      index_t off;
      const double w = corner<DC>(g, w0, w1, c, off);
      indices(p, c) = base + off;
      weights(p, c) = w;
    }
  }
}

template <int DC, typename T, typename Q>
__global__ void fly_kernel(DevGrid g, const double* __restrict__ table, MatrixView<const Q> pts,
                           MatrixView<const T> grid, MatrixView<T> out) {
  double w0[kSlots<DC>], w1[kSlots<DC>];
  const index_t nc = index_t(1) << dims<DC>(g);
  KRONPE_GRID_STRIDE(p, pts.rows) {
    const index_t base = point_pairs<DC>(g, table, pts, p, w0, w1);
    gather_row(grid, [&](auto add) {
#pragma unroll
      for (index_t c = 0; c < nc; ++c) {
        index_t off;
        const double w = corner<DC>(g, w0, w1, c, off);
        add(w, base + off);
      }
    }, out, p);
  }
}

template <int DC, typename T, typename Q>
__global__ void __launch_bounds__(kBlock, 4) transpose_fly_atomic_kernel(DevGrid g, const double* __restrict__ table,
                                            MatrixView<const Q> pts, MatrixView<const T> values,
                                            MatrixView<T> out) {
  double w0[kSlots<DC>], w1[kSlots<DC>];
  const index_t nc = index_t(1) << dims<DC>(g), C = values.cols;
  KRONPE_GRID_STRIDE(p, pts.rows) {
    const index_t base = point_pairs<DC>(g, table, pts, p, w0, w1);
#pragma unroll
    for (index_t c = 0; c < nc; ++c) {
      index_t off;
      const double w = corner<DC>(g, w0, w1, c, off);
      for (index_t k = 0; k < C; ++k) atomicAdd(&out(base + off, k), T(w * double(values(p, k))));
    }
  }
}

template <typename T, typename Q>
__global__ void transpose_fly_plan_kernel(DevGrid g, const double* __restrict__ table,
                                          MatrixView<const Q> pts, MatrixView<const T> values,
                                          const index_t* __restrict__ perm,
                                          const index_t* __restrict__ offsets, MatrixView<T> out) {
  const index_t mask = (index_t(1) << g.D) - 1;
  KRONPE_GRID_STRIDE(node, out.rows) {
    const index_t e0 = offsets[node], e1 = offsets[node + 1];
    gather_row(values, [&](auto add) {
      for (index_t e = e0; e < e1; ++e) {
        const index_t id = perm[e], p = id >> g.D;
        add(corner_weight(g, table, pts, p, id & mask), p);
      }
    }, out, node);
  }
}

// ---- kernels: stored -----------------------------------------------------------------------
template <typename T>
__global__ void stored_kernel(MatrixView<const index_t> idx, MatrixView<const double> wts,
                              MatrixView<const T> grid, MatrixView<T> out) {
  const index_t nnz = idx.cols, G = grid.rows;
  KRONPE_GRID_STRIDE(p, idx.rows) {
    gather_row(grid, [&](auto add) {
      for (index_t s = 0; s < nnz; ++s) {
        const index_t row = idx(p, s);
        if (!bad_index(row, G)) add(wts(p, s), row);
      }
    }, out, p);
  }
}

// Stored rows read by groups of G = nnz lanes (G a power of two <= 16, rows dense: indices and
// weights (P, G) with unit column stride): lane e of the grid handles nonzero e % G of point
// e / G, so every load of indices and weights is coalesced (the per-point kernel above reads a
// row as nnz 8-byte loads 8 nnz bytes apart across the warp: its L1 hit rate was 18% on an H200).
// The G products of a point are summed across its lanes by shuffles (pairwise, in float64), and
// the group's first lane writes. The whole warp iterates while any lane has work (shuffles need
// every lane): the loop runs over warp-aligned bases, idle lanes adding zeros.
template <typename T, int G>
__global__ void stored_group_kernel(const index_t* __restrict__ idx, const double* __restrict__ wts,
                                    index_t P, MatrixView<const T> grid, MatrixView<T> out) {
  static_assert(G >= 2 && G <= 16 && (G & (G - 1)) == 0, "G: a power of two in [2, 16]");
  const index_t total = P * G, rows = grid.rows, C = grid.cols;
  const int lane = int(threadIdx.x & 31u);
  const index_t step = index_t(gridDim.x) * blockDim.x;
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e - lane < total; e += step) {
    const bool active = e < total;
    const index_t row = active ? idx[e] : 0;
    const double w = active ? wts[e] : 0.0;
    const bool use = active && !bad_index(row, rows);
    const index_t p = e / G;
    for (index_t c = 0; c < C; ++c) {
      double v = use ? w * double(grid(row, c)) : 0.0;
#pragma unroll
      for (int off = 1; off < G; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (active && (lane & (G - 1)) == 0) out(p, c) = T(v);
    }
  }
}

// The atomic transpose over nonzeros (dense rows, any nnz): coalesced loads of indices and
// weights; each lane adds its nonzero's share of its point's values.
template <typename T>
__global__ void transpose_stored_flat_kernel(const index_t* __restrict__ idx,
                                             const double* __restrict__ wts, index_t nnz,
                                             MatrixView<const T> values, MatrixView<T> out) {
  const index_t C = values.cols, rows = out.rows;
  KRONPE_GRID_STRIDE(e, values.rows * nnz) {
    const index_t row = idx[e];
    if (bad_index(row, rows)) continue;
    const double w = wts[e];
    const index_t p = e / nnz;
    for (index_t k = 0; k < C; ++k) atomicAdd(&out(row, k), T(w * double(values(p, k))));
  }
}

template <typename T>
__global__ void transpose_stored_atomic_kernel(MatrixView<const index_t> idx,
                                               MatrixView<const double> wts,
                                               MatrixView<const T> values, MatrixView<T> out) {
  const index_t nnz = idx.cols, C = values.cols, G = out.rows;
  KRONPE_GRID_STRIDE(p, idx.rows) {
    for (index_t s = 0; s < nnz; ++s) {
      const index_t row = idx(p, s);
      if (bad_index(row, G)) continue;
      const double w = wts(p, s);
      for (index_t k = 0; k < C; ++k) atomicAdd(&out(row, k), T(w * double(values(p, k))));
    }
  }
}

template <typename T>
__global__ void transpose_stored_plan_kernel(MatrixView<const double> wts, index_t nnz,
                                             MatrixView<const T> values,
                                             const index_t* __restrict__ perm,
                                             const index_t* __restrict__ offsets, MatrixView<T> out) {
  KRONPE_GRID_STRIDE(node, out.rows) {
    const index_t e0 = offsets[node], e1 = offsets[node + 1];
    gather_row(values, [&](auto add) {
      for (index_t e = e0; e < e1; ++e) {
        const index_t id = perm[e], p = id / nnz;
        add(wts(p, id - p * nnz), p);
      }
    }, out, node);
  }
}

template <typename T>
__global__ void zero_kernel(MatrixView<T> out) {
  KRONPE_GRID_STRIDE(e, out.rows * out.cols) {
    const index_t r = e / out.cols;
    out(r, e - r * out.cols) = T(0);
  }
}

// ---- plan kernels ----------------------------------------------------------------------------
template <typename Q>
__global__ void plan_keys_fly_kernel(DevGrid g, const double* __restrict__ table,
                                     MatrixView<const Q> pts, std::uint64_t* keys, index_t* ids) {
  const index_t nc = index_t(1) << g.D;
  KRONPE_GRID_STRIDE(p, pts.rows) {
    index_t base = 0;
    for (int i = 0; i < g.D; ++i) {
      double beta, h, x = double(pts(p, i));
      index_t j;
      const DevAxis& a = g.ax[i];
      bm::locate(table + a.nodes, a.M, a.lo, a.hi, a.inv_h, a.uniform, x, j, beta, h);
      base += j * a.stride;
    }
    for (index_t c = 0; c < nc; ++c) {
      index_t off = 0;
      for (int i = 0; i < g.D; ++i) off += ((c >> (g.D - 1 - i)) & 1) ? g.ax[i].stride : 0;
      keys[p * nc + c] = std::uint64_t(base + off);
      ids[p * nc + c] = p * nc + c;
    }
  }
}

__global__ void plan_keys_stored_kernel(MatrixView<const index_t> idx, index_t G,
                                        std::uint64_t* keys, index_t* ids) {
  const index_t nnz = idx.cols;
  KRONPE_GRID_STRIDE(e, idx.rows * nnz) {
    const index_t p = e / nnz, row = idx(p, e - p * nnz);
    keys[e] = bad_index(row, G) ? std::uint64_t(G) : std::uint64_t(row);  // G sorts last, dropped
    ids[e] = e;
  }
}

// offsets[g] = first position of key >= g in the sorted keys, for g = 0..G.
__global__ void plan_offsets_kernel(const std::uint64_t* __restrict__ keys, index_t n, index_t G,
                                    index_t* offsets) {
  KRONPE_GRID_STRIDE(node, G + 1) {
    index_t a = 0, b = n;
    while (a < b) {
      const index_t mid = a + (b - a) / 2;
      if (keys[mid] < std::uint64_t(node)) a = mid + 1;
      else b = mid;
    }
    offsets[node] = a;
  }
}

#undef KRONPE_GRID_STRIDE

// ---- host side -------------------------------------------------------------------------------
// Stored indices and weights whose rows are dense (unit column stride, rows back to back): the
// nonzero-wise kernels index them flat.
bool dense_rows(MatrixView<const index_t> indices, MatrixView<const double> weights) {
  const index_t nnz = indices.cols;
  return indices.rows <= 1 ? (indices.stride_c == 1 && weights.stride_c == 1)
                           : (indices.stride_c == 1 && weights.stride_c == 1 && indices.stride_r == nnz &&
                              weights.stride_r == nnz);
}

// f(std::integral_constant<int, DC>) with DC = D for D = 1, 2, 3 (the kernels' compile-time
// versions), else DC = 0 (the generic kernels).
template <typename F>
void with_dims(int D, F&& f) {
  switch (D) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}

std::size_t table_doubles(const WeightFunction& wf) {
  std::size_t n = 0;
  for (int i = 0; i < wf.dims(); ++i) n += std::size_t(3 * wf.axis_table(i).M - 2);
  return n;
}

// The grid's scalars, and its tables uploaded into `table` (table_doubles(wf) doubles).
DevGrid upload_grid(const WeightFunction& wf, double* table, cudaStream_t s) {
  DevGrid g{};
  g.D = wf.dims();
  g.normalize = wf.normalize();
  g.G = wf.grid_size();
  std::vector<double> host;
  host.reserve(table_doubles(wf));
  for (int i = 0; i < g.D; ++i) {
    const WeightFunction::AxisTable t = wf.axis_table(i);
    DevAxis& a = g.ax[i];
    a.M = t.M;
    a.stride = wf.strides()[size_t(i)];
    a.param = t.param;
    a.lo = t.lo;
    a.hi = t.hi;
    a.inv_h = t.inv_h;
    a.D0 = t.D0;
    a.kind = int(t.kind);
    a.uniform = t.uniform;
    a.nodes = index_t(host.size());
    host.insert(host.end(), t.nodes, t.nodes + t.M);
    a.dh = index_t(host.size());
    host.insert(host.end(), t.Dh, t.Dh + (t.M - 1));
    a.dt = index_t(host.size());
    for (index_t k = 0; k + 1 < t.M; ++k) host.push_back(t.singular[k] ? 0.0 : t.det[k]);
  }
  detail::upload(table, host.data(), host.size(), s);
  return g;
}

template <typename T>
void zero(const Context& ctx, MatrixView<T> out) {
  if (out.rows == 0 || out.cols == 0) return;
  const cudaStream_t s = detail::stream_of(ctx);
  if (out.stride_c == 1 && (out.rows == 1 || out.stride_r == out.cols)) {
    detail::check(cudaMemsetAsync(out.data, 0, size_t(out.rows * out.cols) * sizeof(T), s),
                  "cudaMemsetAsync (blend_transpose output)");
    return;
  }
  zero_kernel<T><<<detail::blocks_for(out.rows * out.cols, kBlock), kBlock, 0, s>>>(out);
  detail::check_launch("blend zero kernel");
}

int key_bits(index_t G) {  // bits that hold every key in [0, G]
  int b = 1;
  while (b < 63 && (index_t(1) << b) <= G) ++b;
  return b;
}

// CUB's temporary storage for sorting n (key, id) pairs with keys in [0, G].
std::size_t sort_temp_bytes(index_t n, index_t G) {
  std::size_t bytes = 0;
  const std::uint64_t* keys_in = nullptr;
  std::uint64_t* keys_out = nullptr;
  const index_t* ids_in = nullptr;
  index_t* ids_out = nullptr;
  detail::check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, ids_in, ids_out,
                                                n, 0, key_bits(G)),
                "cub::DeviceRadixSort::SortPairs (size query)");
  return bytes;
}

// Sorts the keys (with their ids into perm) and fills offsets; keys/ids were written into the
// scratch arrays by the caller's key kernel.
void sort_and_offsets(const Context& ctx, detail::Scratch& scratch, index_t n, index_t G,
                      std::uint64_t* keys, index_t* ids, index_t* perm, index_t* offsets) {
  const cudaStream_t s = detail::stream_of(ctx);
  std::uint64_t* sorted = scratch.take<std::uint64_t>(size_t(n));
  std::size_t temp_bytes = sort_temp_bytes(n, G);
  void* temp = scratch.take<unsigned char>(temp_bytes);
  const std::uint64_t* keys_in = keys;
  const index_t* ids_in = ids;
  detail::check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, sorted, ids_in, perm, n,
                                                0, key_bits(G), s),
                "cub::DeviceRadixSort::SortPairs");
  plan_offsets_kernel<<<detail::blocks_for(G + 1, kBlock), kBlock, 0, s>>>(sorted, n, G, offsets);
  detail::check_launch("blend plan offsets kernel");
}

// keys, ids, sorted keys and CUB's storage (in the order sort_and_offsets takes them)
std::size_t plan_bytes(index_t n, index_t G) {
  return detail::aligned(size_t(n) * sizeof(std::uint64_t)) * 2 +
         detail::aligned(size_t(n) * sizeof(index_t)) + detail::aligned(sort_temp_bytes(n, G));
}

}  // namespace

std::size_t blend_fly_workspace(const WeightFunction& wf) {
  return detail::aligned(table_doubles(wf) * sizeof(double));
}

std::size_t blend_plan_workspace(index_t points, index_t nnz, index_t grid_size) {
  require(points >= 0 && nnz >= 0 && grid_size >= 0, "blend plan: negative size");
  return plan_bytes(checked_mul(points, nnz, "blend plan: nonzeros"), grid_size);
}

template <typename Q>
void blend_weights(const Context& ctx, const WeightFunction& wf, MatrixView<const Q> points,
                   MatrixView<index_t> indices, MatrixView<double> weights) {
  const index_t P = points.rows, nc = wf.corners();
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  blend::require_shape(indices.rows, indices.cols, "blend: indices", P, nc);
  blend::require_shape(weights.rows, weights.cols, "blend: weights", P, nc);
  if (P == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  detail::Scratch scratch(ctx, blend_fly_workspace(wf));
  double* table = scratch.take<double>(table_doubles(wf));
  const DevGrid g = upload_grid(wf, table, s);
  with_dims(g.D, [&](auto dc) {
    weights_kernel<decltype(dc)::value, Q><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(
        g, table, points, indices, weights);
  });
  detail::check_launch("blend weights kernel");
}

template <typename T, typename Q>
void blend_fly(const Context& ctx, const WeightFunction& wf, MatrixView<const Q> points,
               MatrixView<const T> grid, MatrixView<T> out) {
  const index_t P = points.rows, C = grid.cols;
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  blend::require_shape(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  blend::require_shape(out.rows, out.cols, "blend: output", P, C);
  if (P == 0 || C == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  detail::Scratch scratch(ctx, blend_fly_workspace(wf));
  double* table = scratch.take<double>(table_doubles(wf));
  const DevGrid g = upload_grid(wf, table, s);
  with_dims(g.D, [&](auto dc) {
    fly_kernel<decltype(dc)::value, T, Q><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(
        g, table, points, grid, out);
  });
  detail::check_launch("blend kernel");
}

template <typename T, typename Q>
void blend_transpose_fly(const Context& ctx, const WeightFunction& wf, MatrixView<const Q> points,
                         MatrixView<const T> values, MatrixView<T> out, const index_t* perm,
                         const index_t* offsets) {
  const index_t P = points.rows, C = values.cols;
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  blend::require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  blend::require_shape(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  require((perm == nullptr) == (offsets == nullptr),
          "blend_transpose: give both perm and offsets (a plan) or neither");
  if (out.rows == 0 || C == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  if (P == 0) {
    zero(ctx, out);
    return;
  }
  detail::Scratch scratch(ctx, blend_fly_workspace(wf));
  double* table = scratch.take<double>(table_doubles(wf));
  const DevGrid g = upload_grid(wf, table, s);
  if (perm) {
    transpose_fly_plan_kernel<T, Q><<<detail::blocks_for(out.rows, kBlock), kBlock, 0, s>>>(
        g, table, points, values, perm, offsets, out);
    detail::check_launch("blend_transpose (planned) kernel");
  } else {
    zero(ctx, out);
    with_dims(g.D, [&](auto dc) {
      transpose_fly_atomic_kernel<decltype(dc)::value, T, Q>
          <<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(g, table, points, values, out);
    });
    detail::check_launch("blend_transpose (atomic) kernel");
  }
}

template <typename T>
void blend_stored(const Context& ctx, MatrixView<const index_t> indices,
                  MatrixView<const double> weights, MatrixView<const T> grid, MatrixView<T> out) {
  const index_t P = indices.rows, nnz = indices.cols, C = grid.cols;
  blend::require_shape(weights.rows, weights.cols, "blend: weights", P, nnz);
  blend::require_shape(out.rows, out.cols, "blend: output", P, C);
  if (P == 0 || C == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  auto group = [&](auto g) {
    constexpr int G = decltype(g)::value;
    stored_group_kernel<T, G><<<detail::blocks_for(P * G, kBlock), kBlock, 0, s>>>(
        indices.data, weights.data, P, grid, out);
  };
  if (!dense_rows(indices, weights)) {
    stored_kernel<T><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(indices, weights, grid, out);
  } else if (nnz == 2) {
    group(std::integral_constant<int, 2>{});
  } else if (nnz == 4) {
    group(std::integral_constant<int, 4>{});
  } else if (nnz == 8) {
    group(std::integral_constant<int, 8>{});
  } else if (nnz == 16) {
    group(std::integral_constant<int, 16>{});
  } else {
    stored_kernel<T><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(indices, weights, grid, out);
  }
  detail::check_launch("blend (stored) kernel");
}

template <typename T>
void blend_transpose_stored(const Context& ctx, MatrixView<const index_t> indices,
                            MatrixView<const double> weights, MatrixView<const T> values,
                            MatrixView<T> out, const index_t* perm, const index_t* offsets) {
  const index_t P = indices.rows, nnz = indices.cols, C = values.cols;
  blend::require_shape(weights.rows, weights.cols, "blend_transpose: weights", P, nnz);
  blend::require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require(out.cols == C, "blend_transpose: output must have as many channels as values");
  require((perm == nullptr) == (offsets == nullptr),
          "blend_transpose: give both perm and offsets (a plan) or neither");
  if (out.rows == 0 || C == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  if (P == 0 || nnz == 0) {
    zero(ctx, out);
    return;
  }
  if (perm) {
    transpose_stored_plan_kernel<T><<<detail::blocks_for(out.rows, kBlock), kBlock, 0, s>>>(
        weights, nnz, values, perm, offsets, out);
    detail::check_launch("blend_transpose (stored, planned) kernel");
  } else {
    zero(ctx, out);
    if (dense_rows(indices, weights)) {
      transpose_stored_flat_kernel<T><<<detail::blocks_for(P * nnz, kBlock), kBlock, 0, s>>>(
          indices.data, weights.data, nnz, values, out);
    } else {
      transpose_stored_atomic_kernel<T><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(
          indices, weights, values, out);
    }
    detail::check_launch("blend_transpose (stored, atomic) kernel");
  }
}

template <typename Q>
void blend_plan_fly(const Context& ctx, const WeightFunction& wf, MatrixView<const Q> points,
                    index_t* perm, index_t* offsets) {
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  const index_t P = points.rows, G = wf.grid_size();
  const index_t n = checked_mul(P, wf.corners(), "blend plan: nonzeros");
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  detail::Scratch scratch(ctx, blend_fly_workspace(wf) + plan_bytes(n, G));
  double* table = scratch.take<double>(table_doubles(wf));
  const DevGrid g = upload_grid(wf, table, s);
  std::uint64_t* keys = scratch.take<std::uint64_t>(size_t(n));
  index_t* ids = scratch.take<index_t>(size_t(n));
  if (P > 0) {
    plan_keys_fly_kernel<Q><<<detail::blocks_for(P, kBlock), kBlock, 0, s>>>(g, table, points,
                                                                              keys, ids);
    detail::check_launch("blend plan keys kernel");
  }
  sort_and_offsets(ctx, scratch, n, G, keys, ids, perm, offsets);
}

void blend_plan_stored(const Context& ctx, MatrixView<const index_t> indices, index_t grid_size,
                       index_t* perm, index_t* offsets) {
  require(grid_size >= 0, "blend plan: negative grid size");
  const index_t n = checked_mul(indices.rows, indices.cols, "blend plan: nonzeros");
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  detail::Scratch scratch(ctx, plan_bytes(n, grid_size));
  std::uint64_t* keys = scratch.take<std::uint64_t>(size_t(n));
  index_t* ids = scratch.take<index_t>(size_t(n));
  if (n > 0) {
    plan_keys_stored_kernel<<<detail::blocks_for(n, kBlock), kBlock, 0, s>>>(indices, grid_size,
                                                                           keys, ids);
    detail::check_launch("blend plan keys kernel");
  }
  sort_and_offsets(ctx, scratch, n, grid_size, keys, ids, perm, offsets);
}

#define KRONPE_CUDA_BLEND_Q(Q)                                                                 \
  template void blend_weights<Q>(const Context&, const WeightFunction&, MatrixView<const Q>,    \
                                 MatrixView<index_t>, MatrixView<double>);                     \
  template void blend_plan_fly<Q>(const Context&, const WeightFunction&, MatrixView<const Q>,   \
                                  index_t*, index_t*);
#define KRONPE_CUDA_BLEND_TQ(T, Q)                                                             \
  template void blend_fly<T, Q>(const Context&, const WeightFunction&, MatrixView<const Q>,     \
                                MatrixView<const T>, MatrixView<T>);                           \
  template void blend_transpose_fly<T, Q>(const Context&, const WeightFunction&,                \
                                          MatrixView<const Q>, MatrixView<const T>,             \
                                          MatrixView<T>, const index_t*, const index_t*);
#define KRONPE_CUDA_BLEND_T(T)                                                                 \
  template void blend_stored<T>(const Context&, MatrixView<const index_t>,                      \
                                MatrixView<const double>, MatrixView<const T>, MatrixView<T>); \
  template void blend_transpose_stored<T>(const Context&, MatrixView<const index_t>,            \
                                          MatrixView<const double>, MatrixView<const T>,        \
                                          MatrixView<T>, const index_t*, const index_t*);
KRONPE_CUDA_BLEND_Q(float)
KRONPE_CUDA_BLEND_Q(double)
KRONPE_CUDA_BLEND_TQ(float, float)
KRONPE_CUDA_BLEND_TQ(float, double)
KRONPE_CUDA_BLEND_TQ(double, float)
KRONPE_CUDA_BLEND_TQ(double, double)
KRONPE_CUDA_BLEND_T(float)
KRONPE_CUDA_BLEND_T(double)

}  // namespace kronpe::cuda
