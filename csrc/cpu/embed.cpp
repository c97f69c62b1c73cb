// CPU embedders: one row per coordinate, OpenMP over rows, the math of kronpe/embed_math.h.
// See kronpe/embed.h.
#include "kronpe/embed.h"
#include "kronpe/threads.h"

#include <string>

namespace kronpe {
namespace {

// Rows with fewer elements than this in total stay on one thread.
constexpr index_t kParallelElements = 1 << 15;

// Calls row(i, xi, out_row) for every coordinate, in parallel when the work is large.
template <typename T, typename Row>
void for_each_row(index_t n, index_t width, const T* x, index_t x_stride, T* out,
                  index_t out_row_stride, Row row) {
  const bool parallel = n * width >= kParallelElements;
  (void)parallel;
#ifdef KRONPE_OPENMP
#pragma omp parallel for schedule(static) num_threads(kernel_threads()) if (parallel)
#endif
  for (index_t i = 0; i < n; ++i) row(static_cast<double>(x[i * x_stride]), out + i * out_row_stride);
}

}  // namespace

void check_basis_params(const BasisParams& p) {
  require(p.K > 0, "embed: K must be positive, got " + std::to_string(p.K));
  require(std::isfinite(p.K_base) && p.K_base > 0.0, "embed: K_base must be positive");
  const bool uses_param = p.kind != Basis::impulse && p.kind != Basis::random;
  require(!uses_param || (std::isfinite(p.param) && p.param > 0.0),
          "embed: the width/frequency parameter must be a positive finite number");
  require(p.kind != Basis::bspline || (p.degree >= 0 && p.degree <= kMaxBsplineDegree),
          "embed: B-spline degree must be in 0.." + std::to_string(kMaxBsplineDegree));
}

void check_fourier_params(const FourierParams& p) {
  require(p.F >= 0, "embed: the number of frequencies must be non-negative");
  require(p.F == 0 || p.omega != nullptr, "embed: null frequency array");
  require(std::isfinite(p.amplitude), "embed: amplitude must be finite");
  for (index_t j = 0; j < p.F; ++j)
    require(std::isfinite(p.omega[j]), "embed: frequencies must be finite");
}

template <typename T>
void embed_basis(const BasisParams& p, index_t n, const T* x, index_t x_stride, T* out,
                 index_t out_row_stride, index_t out_col_stride) {
  check_basis_params(p);
  require(n >= 0, "embed: negative number of points");
  checked_mul(n, p.K, "embed: output size");
  if (n == 0) return;
  const index_t K = p.K;
  const index_t cs = out_col_stride;
  if (p.kind == Basis::impulse) {
    for_each_row(n, K, x, x_stride, out, out_row_stride, [&](double xi, T* row) {
      for (index_t k = 0; k < K; ++k) row[k * cs] = T(0);
      row[embed_math::impulse_column(p, xi) * cs] = T(1);
    });
  } else if (p.kind == Basis::random) {
    for_each_row(n, K, x, x_stride, out, out_row_stride, [&](double xi, T* row) {
      for (index_t k = 0; k < K; ++k) row[k * cs] = embed_math::stored<T>(embed_math::random_value(p.seed, xi, k));
    });
  } else {
    // Only the columns whose centre lies within the support of psi are evaluated (one column
    // of slack on each side absorbs rounding); the others are exactly zero.
    const double radius = embed_math::support_radius(p.kind, p.param, p.degree);
    const bool compact = std::isfinite(radius) && radius * p.K_base < 0.25 * static_cast<double>(K);
    for_each_row(n, K, x, x_stride, out, out_row_stride, [&](double xi, T* row) {
      index_t lo = 0, hi = K;
      if (compact && std::isfinite(xi)) {
        const double first = static_cast<double>(p.first_index);
        const double a = std::floor((xi - radius) * p.K_base) - first - 1.0;
        const double b = std::ceil((xi + radius) * p.K_base) - first + 2.0;
        lo = a <= 0.0 ? 0 : (a >= static_cast<double>(K) ? K : static_cast<index_t>(a));
        hi = b <= 0.0 ? 0 : (b >= static_cast<double>(K) ? K : static_cast<index_t>(b));
        if (hi < lo) hi = lo;
        for (index_t k = 0; k < lo; ++k) row[k * cs] = T(0);
        for (index_t k = hi; k < K; ++k) row[k * cs] = T(0);
      }
      for (index_t k = lo; k < hi; ++k) {
        const double t = static_cast<double>(k + p.first_index) / p.K_base;
        row[k * cs] = embed_math::stored<T>(embed_math::shifted_value(p.kind, p.param, p.degree, xi, t));
      }
    });
  }
}

template <typename T>
void embed_fourier(const FourierParams& p, index_t n, const T* x, index_t x_stride, T* out,
                   index_t out_row_stride, index_t out_col_stride) {
  check_fourier_params(p);
  require(n >= 0, "embed: negative number of points");
  const index_t width = fourier_width(p);
  checked_mul(n, width, "embed: output size");
  if (n == 0 || width == 0) return;
  const index_t cs = out_col_stride;
  const index_t first = p.include_input ? 1 : 0;
  for_each_row(n, width, x, x_stride, out, out_row_stride, [&](double xi, T* row) {
    if (p.include_input) row[0] = T(xi);
    for (index_t j = 0; j < p.F; ++j) {
      const double a = p.omega[j] * xi;
      const double c = p.amplitude * std::cos(a);
      const double s = p.amplitude * std::sin(a);
      row[(first + embed_math::fourier_slot(p.layout, p.F, j, true)) * cs] = embed_math::stored<T>(c);
      row[(first + embed_math::fourier_slot(p.layout, p.F, j, false)) * cs] = embed_math::stored<T>(s);
    }
  });
}

template void embed_basis<float>(const BasisParams&, index_t, const float*, index_t, float*,
                                 index_t, index_t);
template void embed_basis<double>(const BasisParams&, index_t, const double*, index_t, double*,
                                  index_t, index_t);
template void embed_fourier<float>(const FourierParams&, index_t, const float*, index_t, float*,
                                   index_t, index_t);
template void embed_fourier<double>(const FourierParams&, index_t, const double*, index_t,
                                    double*, index_t, index_t);

}  // namespace kronpe
