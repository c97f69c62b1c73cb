// The CUDA kernels of the thin-plate multigrid solver, included by csrc/cuda/multigrid.cu alone (an
// unnamed namespace: internal linkage, as if written there): the penalty applied from
// per-axis band tables, one thread per node in a fixed order; the smoother's steps; the grid
// transfers; the coarsest grid's factorisation and solve; the Krylov vectors' updates and their
// dot products reduced in float64 by blocks in a fixed order (no atomics: the same bits run to
// run).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kronpe/common.h"

namespace kronpe::cuda {
namespace {

constexpr int kBlock = 256;

// A level's grid and penalty as the kernels see it (passed by value).
struct Stencil {
  int n[3];
  int s[3];            // strides (row-major)
  const float* b2[3];  // (n[a], 5): B_a's band, columns j - 2 .. j + 2 (0 outside the axis)
  const float* b1[3];  // (n[a], 3): L_a's band, columns j - 1 .. j + 1
  int size;
};

__device__ __forceinline__ void node_of(const Stencil& S, int i, int j[3]) {
  j[2] = i % S.n[2];
  const int t = i / S.n[2];
  j[1] = t % S.n[1];
  j[0] = t / S.n[1];
}

// sum_k c[k + H] x[i + k stride] over k in [-H, H] within an axis of n nodes (j: i's index along
// it): one node's row of a band of 2 H + 1
template <int H>
__device__ __forceinline__ float band_at(const float* __restrict__ c, const float* __restrict__ x, int i, int j, int n,
                                         int stride) {
  float acc = 0.f;
#pragma unroll
  for (int k = -H; k <= H; ++k) {
    const int q = j + k;
    if (q >= 0 && q < n) acc += c[k + H] * x[i + k * stride];
  }
  return acc;
}

// sum_a (B_a x)[i] over the axes of 2 nodes or more, bands[a] (n_a, 2 H + 1)
template <int H>
__device__ __forceinline__ float axes_at(const Stencil& S, const float* const* bands, const float* __restrict__ x, int i,
                                         const int j[3]) {
  float acc = 0.f;
#pragma unroll
  for (int a = 0; a < 3; ++a)
    if (S.n[a] >= 2) acc += band_at<H>(bands[a] + (2 * H + 1) * j[a], x, i, j[a], S.n[a], S.s[a]);
  return acc;
}

// (R x)[i]
__device__ __forceinline__ float penalty_at(const Stencil& S, const float* __restrict__ x, int i, const int j[3]) {
  float acc = axes_at<2>(S, S.b2, x, i, j);
#pragma unroll
  for (int a = 0; a < 3; ++a) {
#pragma unroll
    for (int b = a + 1; b < 3; ++b) {
      if (S.n[a] < 2 || S.n[b] < 2) continue;
      const float* ca = S.b1[a] + 3 * j[a];
      const float* cb = S.b1[b] + 3 * j[b];
      float t = 0.f;
#pragma unroll
      for (int k = -1; k <= 1; ++k) {
        const int qa = j[a] + k;
        if (qa >= 0 && qa < S.n[a]) t += ca[k + 1] * band_at<1>(cb, x, i + k * S.s[a], j[b], S.n[b], S.s[b]);
      }
      acc += 2.f * t;
    }
  }
  return acc;
}

// (L x)[i], L = sum_a L_a
__device__ __forceinline__ float laplacian_at(const Stencil& S, const float* __restrict__ x, int i, const int j[3]) {
  return axes_at<1>(S, S.b1, x, i, j);
}

#define KRONPE_NODES(S) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (S).size; i += gridDim.x * blockDim.x)

// Kernels captured in the V-cycles' graphs read the level's lambda from device memory (lamp), so
// that a graph outlives set_lambda.

// out = m x + lam R x; with b: out = b - (m x + lam R x)
__global__ void apply_kernel(Stencil S, const float* __restrict__ x, const float* __restrict__ m,
                             const float* __restrict__ lamp, const float* __restrict__ b, float* __restrict__ out) {
  const float lam = *lamp;
  KRONPE_NODES(S) {
    int j[3];
    node_of(S, i, j);
    const float ax = m[i] * x[i] + lam * penalty_at(S, x, i, j);
    out[i] = b ? b[i] - ax : ax;
  }
}

// The smoother's first step from x0 (null: 0): r = (b - A x0) w, d = r / theta; x = x0 (when x is
// not x0's array), save = x0 (when given).
__global__ void cheb_start_kernel(Stencil S, const float* __restrict__ x0, const float* __restrict__ b,
                                  const float* __restrict__ m, const float* __restrict__ w,
                                  const float* __restrict__ lamp, float theta, float* __restrict__ r,
                                  float* __restrict__ d, float* x, float* __restrict__ save) {
  const float lam = *lamp;
  KRONPE_NODES(S) {
    float res = b[i];
    float xi = 0.f;
    if (x0) {
      int j[3];
      node_of(S, i, j);
      xi = x0[i];
      res -= m[i] * xi + lam * penalty_at(S, x0, i, j);
    }
    const float ri = res * w[i];
    r[i] = ri;
    d[i] = ri / theta;
    if (x != x0) x[i] = xi;
    if (save) save[i] = xi;
  }
}

// A later step: x += d, r -= (A d) w, d2 = c1 d + c2 r
__global__ void cheb_step_kernel(Stencil S, const float* __restrict__ d, float* __restrict__ r, float* __restrict__ x,
                                 const float* __restrict__ m, const float* __restrict__ w,
                                 const float* __restrict__ lamp, float c1, float c2, float* __restrict__ d2) {
  const float lam = *lamp;
  KRONPE_NODES(S) {
    int j[3];
    node_of(S, i, j);
    const float di = d[i];
    x[i] += di;
    const float ri = r[i] - (m[i] * di + lam * penalty_at(S, d, i, j)) * w[i];
    r[i] = ri;
    d2[i] = c1 * di + c2 * ri;
  }
}

// The last: x += d; with `from`: x = from + omega (x - from)
__global__ void cheb_finish_kernel(int n, const float* __restrict__ d, float* __restrict__ x,
                                   const float* __restrict__ from, float omega) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float xs = x[i] + d[i];
    x[i] = from ? from[i] + omega * (xs - from[i]) : xs;
  }
}

__global__ void laplacian_kernel(Stencil S, const float* __restrict__ x, float* __restrict__ out) {
  KRONPE_NODES(S) {
    int j[3];
    node_of(S, i, j);
    out[i] = laplacian_at(S, x, i, j);
  }
}

// out = [b -] (m x + lam (top L t2 + tail t2)), t2 = L^2 x (the higher-order system)
__global__ void power_final_kernel(Stencil S, const float* __restrict__ x, const float* __restrict__ t2,
                                   const float* __restrict__ m, const float* __restrict__ lamp, float top,
                                   float tail, const float* __restrict__ b, float* __restrict__ out) {
  const float lam = *lamp;
  KRONPE_NODES(S) {
    int j[3];
    node_of(S, i, j);
    const float ax = m[i] * x[i] + lam * (top * laplacian_at(S, t2, i, j) + tail * t2[i]);
    out[i] = b ? b[i] - ax : ax;
  }
}

// diag(R) of a level (its bands' diagonals)
__global__ void penalty_diag_kernel(Stencil S, float* __restrict__ rd) {
  KRONPE_NODES(S) {
    int j[3];
    node_of(S, i, j);
    float acc = 0.f;
    for (int a = 0; a < 3; ++a)
      if (S.n[a] >= 2) acc += S.b2[a][5 * j[a] + 2];
    for (int a = 0; a < 3; ++a)
      for (int b = a + 1; b < 3; ++b)
        if (S.n[a] >= 2 && S.n[b] >= 2) acc += 2.f * (S.b1[a][3 * j[a] + 1] * S.b1[b][3 * j[b] + 1]);
    rd[i] = acc;
  }
}

// Every level's lambda into device memory (read by the graphs' kernels)
struct Lambdas {
  float lam[32];
  int levels;
};
__global__ void set_lambdas_kernel(Lambdas L, float* __restrict__ out) {
  if (int(threadIdx.x) < L.levels) out[threadIdx.x] = L.lam[threadIdx.x];
}

// The coarsest A = diag(m) + lam R (+ a relative 1e-10 on the diagonal) factorised A = L L^T as
// on the host (ThinPlateHierarchy::set_lambda), then inverted column by column into inv; one
// block, chol: n x n scratch.
__global__ void coarsest_factor_kernel(int n, const double* __restrict__ R, const float* __restrict__ m, float lam,
                                       double* __restrict__ chol, double* __restrict__ inv) {
  __shared__ double red[kBlock];
  __shared__ double shared_d;
  const double lam_c = double(lam);
  double amax = 0.0;
  for (int t = threadIdx.x; t < n * n; t += blockDim.x) {
    double v = lam_c * R[t];
    if (t / n == t % n) v += double(m[t / n]);
    chol[t] = v;
    amax = fmax(amax, fabs(v));
  }
  red[threadIdx.x] = amax;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  const double eps = 1e-10 * fmax(red[0], 2.2250738585072014e-308);
  for (int i = threadIdx.x; i < n; i += blockDim.x) chol[i * n + i] += eps;
  __syncthreads();
  for (int j = 0; j < n; ++j) {
    if (threadIdx.x == 0) {
      double d = chol[j * n + j];
      for (int k = 0; k < j; ++k) d -= chol[j * n + k] * chol[j * n + k];
      d = sqrt(fmax(d, eps));
      chol[j * n + j] = d;
      shared_d = d;
    }
    __syncthreads();
    const double d = shared_d;
    for (int i = j + 1 + threadIdx.x; i < n; i += blockDim.x) {
      double s = chol[i * n + j];
      for (int k = 0; k < j; ++k) s -= chol[i * n + k] * chol[j * n + k];
      chol[i * n + j] = s / d;
    }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < n; c += blockDim.x) {  // column c of A^-1: L y = e_c, L^T x = y
    for (int i = 0; i < n; ++i) {
      double s = i == c ? 1.0 : 0.0;
      for (int k = 0; k < i; ++k) s -= chol[i * n + k] * inv[k * n + c];
      inv[i * n + c] = s / chol[i * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {
      double s = inv[i * n + c];
      for (int k = i + 1; k < n; ++k) s -= chol[k * n + i] * inv[k * n + c];
      inv[i * n + c] = s / chol[i * n + i];
    }
  }
}

// w = 1 / (m + lam rd), 0 where that is 0
__global__ void inverse_diag_kernel(int n, const float* __restrict__ m, float lam, const float* __restrict__ rd,
                                    float* __restrict__ w) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float a = m[i] + lam * rd[i];
    w[i] = a != 0.f ? 1.f / a : 0.f;
  }
}

// The transfers along one axis of an (outer, n, inner) array (kronpe/smooth.h): coarse node j at
// fine node 2 j, a fine node beyond the axis counting 0. Restriction (src fine, dst coarse) or,
// with prolong, prolongation (src coarse, dst fine; add: dst += P src).
__global__ void transfer_kernel(int outer, int n, int inner, const float* __restrict__ src, float* __restrict__ dst,
                                bool prolong, bool add) {
  const int nc = n / 2 + 1;
  const int len = prolong ? n : nc;  // (the output's axis)
  const int total = outer * len * inner;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int i = t % inner;
    const int jo = t / inner;
    const int j = jo % len, o = jo / len;
    const float* a = src + std::size_t(o) * (prolong ? nc : n) * inner + i;
    if (prolong) {
      const float v = j % 2 == 0 ? a[std::size_t(j / 2) * inner]
                                 : 0.5f * (a[std::size_t(j / 2) * inner] + a[std::size_t(j / 2 + 1) * inner]);
      dst[t] = add ? dst[t] + v : v;
    } else {
      const int k = 2 * j;
      float v = k < n ? a[std::size_t(k) * inner] : 0.f;
      if (k - 1 >= 0) v += 0.5f * a[std::size_t(k - 1) * inner];
      if (k + 1 < n) v += 0.5f * a[std::size_t(k + 1) * inner];
      dst[t] = v;
    }
  }
}

// x = A_c^-1 b on the coarsest grid (inv: A_c^-1 in float64, n x n)
__global__ void coarsest_kernel(int n, const double* __restrict__ inv, const float* __restrict__ b,
                                float* __restrict__ x) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    double s = 0.0;
    for (int k = 0; k < n; ++k) s += inv[std::size_t(i) * n + k] * double(b[k]);
    x[i] = float(s);
  }
}

// ---- vectors ----------------------------------------------------------------------------------

__global__ void cg_update_kernel(int n, float a, const float* __restrict__ p, const float* __restrict__ q,
                                 float* __restrict__ x, float* __restrict__ r) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] += a * p[i];
    r[i] -= a * q[i];
  }
}

__global__ void cg_direction_kernel(int n, float beta, const float* __restrict__ z, float* __restrict__ p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = z[i] + beta * p[i];
}

// x = old + omega (x - old)
__global__ void relax_kernel(int n, float omega, const float* __restrict__ old, float* __restrict__ x) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = old[i] + omega * (x[i] - old[i]);
}

// The held-out nodes' values y / m into y_hold, then m and y zeroed there (the training term)
__global__ void holdout_kernel(int nhold, const int* __restrict__ hold, float* __restrict__ m, float* __restrict__ y,
                               float* __restrict__ y_hold) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nhold; i += gridDim.x * blockDim.x) {
    const int h = hold[i];
    y_hold[i] = y[h] / m[h];
    m[h] = 0.f;
    y[h] = 0.f;
  }
}

// z = z omega + x
__global__ void step_from_kernel(int n, float omega, const float* __restrict__ x, float* __restrict__ z) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) z[i] = z[i] * omega + x[i];
}

// Block sums of K products (a_k . b_k), or of the squared held-out errors (hold given: one sum,
// (a[hold[i]] - y[i])^2 over i < n), into part[block * K + k]
template <int K>
__global__ void partial_sums_kernel(int n, const float* __restrict__ a0, const float* __restrict__ b0,
                                    const float* __restrict__ a1, const float* __restrict__ b1,
                                    const int* __restrict__ hold, double* __restrict__ part) {
  __shared__ double sh[K][kBlock];
  double s[K];
  for (int k = 0; k < K; ++k) s[k] = 0.0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (hold) {
      const double e = double(a0[hold[i]] - b0[i]);
      s[0] += e * e;
    } else {
      s[0] += double(a0[i]) * double(b0[i]);
      if (K > 1) s[K - 1] += double(a1[i]) * double(b1[i]);
    }
  }
  for (int k = 0; k < K; ++k) sh[k][threadIdx.x] = s[k];
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w)
      for (int k = 0; k < K; ++k) sh[k][threadIdx.x] += sh[k][threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int k = 0; k < K; ++k) part[blockIdx.x * K + k] = sh[k][0];
}

// The blocks' sums added in block order, by one thread per sum
template <int K>
__global__ void final_sums_kernel(int blocks, const double* __restrict__ part, double* __restrict__ out) {
  const int k = threadIdx.x;
  if (k >= K) return;
  double s = 0.0;
  for (int b = 0; b < blocks; ++b) s += part[b * K + k];
  out[k] = s;
}

}  // namespace
}  // namespace kronpe::cuda
