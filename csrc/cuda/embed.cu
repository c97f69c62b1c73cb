// CUDA embedders: one thread per output element, the per-element math of kronpe/embed.h
// (kronpe/embed_math.h, KRONPE_HD) evaluated in double and rounded once, as on the CPU.
#include "common.cuh"
#include "kronpe/cuda.h"
#include "kronpe/embed.h"

namespace kronpe::cuda {
namespace {

constexpr int kBlock = 256;

// Index arithmetic in I (32-bit when every offset fits, 64-bit otherwise).
template <typename T, typename I>
__global__ void basis_kernel(BasisParams p, I n, const T* __restrict__ x, I xs, T* __restrict__ out,
                             I rs, I cs) {
  const I K = I(p.K), total = n * K;
  for (I e = I(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    const I i = e / K, k = e - i * K;
    const double xi = double(x[i * xs]);
    const double v = embed_math::basis_value(p, xi, index_t(k));
    out[i * rs + k * cs] = embed_math::stored<T>(v);
  }
}

template <typename T, typename I>
__global__ void fourier_kernel(const double* __restrict__ omega, I F, FourierLayout layout,
                               bool include_input, double amplitude, I width, I n,
                               const T* __restrict__ x, I xs, T* __restrict__ out, I rs, I cs) {
  const I total = n * width, first = include_input ? 1 : 0;
  for (I e = I(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    const I i = e / width, col = e - i * width;
    const double xi = double(x[i * xs]);
    double v;
    if (col < first) {
      v = xi;
    } else {
      I j;
      bool cosine;
      embed_math::fourier_column<I>(layout, F, col - first, j, cosine);
      const double a = omega[j] * xi;
      v = amplitude * (cosine ? cos(a) : sin(a));
    }
    out[i * rs + col * cs] = col < first ? T(v) : embed_math::stored<T>(v);
  }
}

// Whether 32-bit arithmetic reaches every offset: the element count and each |stride| * extent
// stay below 2^30 (room for the grid-stride step).
bool fits32(index_t count, std::initializer_list<std::pair<index_t, index_t>> strided) {
  const index_t lim = index_t(1) << 30;
  if (count >= lim) return false;
  index_t reach = 0;
  for (const auto& [stride, extent] : strided) {
    const index_t a = stride < 0 ? -stride : stride;
    if (extent > 0 && a > 0 && a > (lim - reach) / extent) return false;
    reach += a * extent;
  }
  return reach < lim;
}

void check_strides(index_t x_stride, index_t rs, index_t cs) {
  require(x_stride >= 0 && rs >= 0 && cs >= 0,
          "embed (CUDA): strides must be non-negative (the Python layer passes views with "
          "non-negative strides)");
}

}  // namespace

template <typename T>
void embed_basis(const Context& ctx, const BasisParams& p, index_t n, const T* x, index_t x_stride,
                 T* out, index_t out_row_stride, index_t out_col_stride) {
  check_basis_params(p);
  require(n >= 0, "embed: negative number of points");
  check_strides(x_stride, out_row_stride, out_col_stride);
  const index_t total = checked_mul(n, p.K, "embed: output size");
  if (total == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  const unsigned grid = detail::blocks_for(total, kBlock);
  if (fits32(total, {{x_stride, n}, {out_row_stride, n}, {out_col_stride, p.K}}))
    basis_kernel<T, std::int32_t><<<grid, kBlock, 0, s>>>(p, std::int32_t(n), x, std::int32_t(x_stride), out,
                                                        std::int32_t(out_row_stride),
                                                        std::int32_t(out_col_stride));
  else
    basis_kernel<T, index_t><<<grid, kBlock, 0, s>>>(p, n, x, x_stride, out, out_row_stride,
                                                   out_col_stride);
  detail::check_launch("embed_basis kernel");
}

std::size_t embed_fourier_workspace(const FourierParams& p) {
  return detail::aligned(std::size_t(p.F > 0 ? p.F : 0) * sizeof(double));
}

template <typename T>
void embed_fourier(const Context& ctx, const FourierParams& p, index_t n, const T* x,
                   index_t x_stride, T* out, index_t out_row_stride, index_t out_col_stride) {
  check_fourier_params(p);  // reads the host frequencies
  require(n >= 0, "embed: negative number of points");
  check_strides(x_stride, out_row_stride, out_col_stride);
  const index_t width = fourier_width(p);
  const index_t total = checked_mul(n, width, "embed: output size");
  if (total == 0) return;
  detail::DeviceGuard guard(ctx.device);
  const cudaStream_t s = detail::stream_of(ctx);
  detail::Scratch scratch(ctx, embed_fourier_workspace(p));
  double* omega = p.F > 0 ? scratch.take<double>(size_t(p.F)) : nullptr;
  detail::upload(omega, p.omega, size_t(p.F), s);
  const unsigned grid = detail::blocks_for(total, kBlock);
  if (fits32(total, {{x_stride, n}, {out_row_stride, n}, {out_col_stride, width}}))
    fourier_kernel<T, std::int32_t><<<grid, kBlock, 0, s>>>(
        omega, std::int32_t(p.F), p.layout, p.include_input, p.amplitude, std::int32_t(width),
        std::int32_t(n), x, std::int32_t(x_stride), out, std::int32_t(out_row_stride),
        std::int32_t(out_col_stride));
  else
    fourier_kernel<T, index_t><<<grid, kBlock, 0, s>>>(omega, p.F, p.layout, p.include_input,
                                                     p.amplitude, width, n, x, x_stride, out,
                                                     out_row_stride, out_col_stride);
  detail::check_launch("embed_fourier kernel");
}

template void embed_basis<float>(const Context&, const BasisParams&, index_t, const float*, index_t,
                                 float*, index_t, index_t);
template void embed_basis<double>(const Context&, const BasisParams&, index_t, const double*,
                                  index_t, double*, index_t, index_t);
template void embed_fourier<float>(const Context&, const FourierParams&, index_t, const float*,
                                   index_t, float*, index_t, index_t);
template void embed_fourier<double>(const Context&, const FourierParams&, index_t, const double*,
                                    index_t, double*, index_t, index_t);

}  // namespace kronpe::cuda
