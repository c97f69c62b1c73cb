// kronpe C++ core: one-dimensional embedders (docs/math/embedders.rst).
//
// Every embedder maps N coordinates to an (N, K) matrix written into caller-provided memory with
// arbitrary strides (in elements). Values are computed in double precision and rounded once to
// the output type, so float32 and float64 outputs agree with the NumPy reference
// (python/kronpe/reference.py, embedder section) to rounding. The parameter structs and the
// per-element math, written once for host and device, are in kronpe/embed_math.h.
#pragma once
#include "kronpe/common.h"
#include "kronpe/embed_math.h"

namespace kronpe {

// Validates p (ArgumentError on a bad value).
void check_basis_params(const BasisParams& p);
void check_fourier_params(const FourierParams& p);

// out[i * out_row_stride + k * out_col_stride] = Psi(x[i * x_stride])_k for i < n, k < p.K.
template <typename T>
void embed_basis(const BasisParams& p, index_t n, const T* x, index_t x_stride, T* out,
                 index_t out_row_stride, index_t out_col_stride);

// The same for the Fourier families; the row has fourier_width(p) columns.
template <typename T>
void embed_fourier(const FourierParams& p, index_t n, const T* x, index_t x_stride, T* out,
                   index_t out_row_stride, index_t out_col_stride);

}  // namespace kronpe
