// kronpe C++ core: blending-matrix kernels on the CPU (see kronpe/blend.h for the conventions).
#include "kronpe/blend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::blend {
namespace {

int resolve_threads(int threads) {
#ifdef KRONPE_OPENMP
  return threads > 0 ? threads : omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

inline bool bad_index(index_t idx, index_t size) {
  return static_cast<std::uint64_t>(idx) >= static_cast<std::uint64_t>(size);
}

void check_matrix(index_t rows, index_t cols, const char* what, index_t want_rows,
                  index_t want_cols) {
  require(rows == want_rows && cols == want_cols,
          std::string(what) + ": expected shape (" + std::to_string(want_rows) + ", " +
              std::to_string(want_cols) + "), got (" + std::to_string(rows) + ", " +
              std::to_string(cols) + ")");
}

// Stable bucketing of P items by slab: perm lists the items slab by slab, each slab in item
// order, whatever the number of threads (only the chunking of the work depends on it).
template <typename SlabOf>
void bucket(index_t P, TransposeLayout lay, SlabOf slab_of, index_t* perm, index_t* ptr,
            int threads) {
  const index_t NS = lay.slabs;
  const int nt = int(std::max<index_t>(1, std::min<index_t>(resolve_threads(threads), P)));
  std::vector<index_t> sid(static_cast<size_t>(P));
  std::vector<index_t> hist(size_t(nt) * size_t(NS) + 1, 0);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(| : bad)
  for (int c = 0; c < nt; ++c) {
    const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
    index_t* h = hist.data() + size_t(c) * size_t(NS);
    for (index_t p = p0; p < p1; ++p) {
      const index_t s = slab_of(p);
      if (bad_index(s, NS)) {
        bad = 1;
        sid[p] = 0;
        continue;
      }
      sid[p] = s;
      ++h[s];
    }
  }
  require(!bad, "blend_transpose: an index lies outside the grid");
  // offsets: slab-major, then chunk order (= item order)
  index_t run = 0;
  for (index_t s = 0; s < NS; ++s) {
    ptr[s] = run;
    for (int c = 0; c < nt; ++c) {
      index_t& h = hist[size_t(c) * size_t(NS) + size_t(s)];
      const index_t n = h;
      h = run;
      run += n;
    }
  }
  ptr[NS] = run;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
  for (int c = 0; c < nt; ++c) {
    const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
    index_t* h = hist.data() + size_t(c) * size_t(NS);
    for (index_t p = p0; p < p1; ++p) perm[h[sid[p]]++] = p;
  }
}

// Runs body(p) for every point of the plan, slab by slab in two phases (even, odd slabs).
template <typename Body>
void for_slabs(TransposeLayout lay, const index_t* perm, const index_t* ptr, int threads,
               Body body) {
  const int nt = resolve_threads(threads);
  for (index_t phase = 0; phase < 2; ++phase) {
    const index_t count = (lay.slabs - phase + 1) / 2;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (index_t k = 0; k < count; ++k) {
      const index_t s = phase + 2 * k;
      for (index_t e = ptr[s]; e < ptr[s + 1]; ++e) body(s, perm[e]);
    }
  }
}

template <typename T>
void zero(MatrixView<T> out, int threads) {
  const int nt = resolve_threads(threads);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (index_t r = 0; r < out.rows; ++r)
    for (index_t c = 0; c < out.cols; ++c) out(r, c) = T(0);
}

}  // namespace

double distance(Kernel kind, double param, double d) {
  d = std::fabs(d);
  switch (kind) {
    case Kernel::gaussian:
      return std::exp(-param * d * d);
    case Kernel::bspline3: {
      const double u = d * param;
      if (u <= 1.0) return 2.0 / 3.0 - u * u + 0.5 * u * u * u;
      if (u <= 2.0) {
        const double t = 2.0 - u;
        return t * t * t / 6.0;
      }
      return 0.0;
    }
    case Kernel::tri: {
      const double u = 1.0 - d * param;
      return u > 0.0 ? u : 0.0;
    }
    case Kernel::tri_sq: {
      const double u = 1.0 - d * param;
      return u > 0.0 ? u * u : 0.0;
    }
    case Kernel::linear:
    default:
      return 0.0;
  }
}

WeightFunction::WeightFunction(const std::vector<AxisSpec>& axes, bool normalize)
    : normalize_(normalize) {
  const int D = int(axes.size());
  require(D >= 1 && D <= kMaxDims,
          "blend: the number of axes must be in [1, " + std::to_string(kMaxDims) + "], got " +
              std::to_string(D));
  axes_.resize(size_t(D));
  strides_.assign(size_t(D), 1);
  for (int i = 0; i < D; ++i) {
    const AxisSpec& s = axes[size_t(i)];
    require(s.M >= 2, "blend: every axis needs at least 2 grid nodes, axis " + std::to_string(i) +
                          " has " + std::to_string(s.M));
    require(int(s.kind) >= 0 && int(s.kind) <= 4, "blend: unknown weight kind");
    require(std::isfinite(s.param), "blend: the weight parameter must be finite");
    Axis& a = axes_[size_t(i)];
    a.nodes.assign(s.nodes, s.nodes + s.M);
    for (index_t k = 0; k < s.M; ++k)
      require(std::isfinite(a.nodes[size_t(k)]), "blend: grid nodes must be finite");
    for (index_t k = 0; k + 1 < s.M; ++k)
      require(a.nodes[size_t(k)] < a.nodes[size_t(k + 1)],
              "blend: grid nodes must be strictly increasing along axis " + std::to_string(i));
    a.kind = s.kind;
    a.param = s.param;
    a.lo = a.nodes.front();
    a.hi = a.nodes.back();
    const double h = (a.hi - a.lo) / double(s.M - 1);
    a.inv_h = 1.0 / h;
    double dev = 0.0;
    for (index_t k = 0; k < s.M; ++k)
      dev = std::max(dev, std::fabs(a.nodes[size_t(k)] - (a.lo + double(k) * h)));
    a.uniform = dev <= h;  // the cell guess is then off by at most a couple of cells
    a.D0 = distance(a.kind, a.param, 0.0);
    a.Dh.resize(size_t(s.M - 1));
    a.det.resize(size_t(s.M - 1));
    a.singular.resize(size_t(s.M - 1));
    for (index_t k = 0; k + 1 < s.M; ++k) {
      const double hk = a.nodes[size_t(k + 1)] - a.nodes[size_t(k)];
      const double Dh = distance(a.kind, a.param, hk);
      const double det = a.D0 * a.D0 - Dh * Dh;
      a.Dh[size_t(k)] = Dh;
      a.det[size_t(k)] = det;
      a.singular[size_t(k)] =
          a.kind == Kernel::linear || !(det > kSingularRcond * a.D0 * a.D0) ? 1 : 0;
    }
  }
  for (int i = D - 2; i >= 0; --i)
    strides_[size_t(i)] =
        checked_mul(strides_[size_t(i + 1)], axes[size_t(i + 1)].M, "blend: grid size");
  grid_size_ = checked_mul(strides_[0], axes[0].M, "blend: grid size");
  span_ = 0;
  for (int i = 0; i < D; ++i) span_ += strides_[size_t(i)];
  const index_t nc = index_t(1) << D;
  corner_offsets_.assign(size_t(nc), 0);
  for (index_t c = 0; c < nc; ++c)
    for (int i = 0; i < D; ++i)
      if ((c >> (D - 1 - i)) & 1) corner_offsets_[size_t(c)] += strides_[size_t(i)];
}

index_t WeightFunction::cell(int i, double q) const {
  const Axis& a = axes_[size_t(i)];
  const index_t last = index_t(a.nodes.size()) - 2;  // last cell
  if (!(q > a.lo)) return 0;                          // below, on the first node, or NaN
  if (q >= a.hi) return last;
  index_t j;
  if (a.uniform) {
    j = std::min(last, std::max<index_t>(0, index_t((q - a.lo) * a.inv_h)));
    while (j > 0 && q < a.nodes[size_t(j)]) --j;
    while (j < last && q >= a.nodes[size_t(j + 1)]) ++j;
  } else {
    j = index_t(std::upper_bound(a.nodes.begin(), a.nodes.end(), q) - a.nodes.begin()) - 1;
    j = std::min(last, std::max<index_t>(0, j));
  }
  return j;
}

void WeightFunction::axis(int i, double q, index_t& j, double& w0, double& w1) const {
  const Axis& a = axes_[size_t(i)];
  if (!(q >= a.lo)) q = a.lo;  // clamp; NaN goes to the first node
  if (q > a.hi) q = a.hi;
  j = cell(i, q);
  const double g0 = a.nodes[size_t(j)];
  const double h = a.nodes[size_t(j + 1)] - g0;
  const double beta = (q - g0) / h;
  if (a.singular[size_t(j)]) {
    w0 = 1.0 - beta;
    w1 = beta;
    return;
  }
  const double r0 = distance(a.kind, a.param, beta * h);
  const double r1 = distance(a.kind, a.param, (1.0 - beta) * h);
  const double D0 = a.D0, Dh = a.Dh[size_t(j)], det = a.det[size_t(j)];
  // numerators first: a point on a node gets exactly (1, 0) or (0, 1)
  w0 = (D0 * r0 - Dh * r1) / det;
  w1 = (D0 * r1 - Dh * r0) / det;
  if (normalize_) {
    const double s = w0 + w1;
    if (!(std::fabs(s) > kTinySum)) {
      w0 = 1.0 - beta;
      w1 = beta;
    } else {
      w0 /= s;
      w1 /= s;
    }
  }
}

TransposeLayout transpose_layout(index_t grid_size, index_t span) {
  require(grid_size >= 0 && span >= 0, "blend_transpose: negative grid size or span");
  TransposeLayout lay;
  if (grid_size == 0) return lay;
  lay.slab = std::max<index_t>(span + 1, (grid_size + kTargetSlabs - 1) / kTargetSlabs);
  lay.slabs = (grid_size + lay.slab - 1) / lay.slab;
  return lay;
}

template <typename Q>
void plan_transpose_fly(const WeightFunction& wf, MatrixView<const Q> points, TransposeLayout lay,
                        index_t* perm, index_t* ptr, int threads) {
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  const index_t L = lay.slab;
  bucket(
      points.rows, lay,
      [&](index_t p) { return wf.base_index(points.data + p * points.stride_r, points.stride_c) / L; },
      perm, ptr, threads);
}

void plan_transpose_stored(MatrixView<const index_t> indices, TransposeLayout lay, index_t* perm,
                           index_t* ptr, int threads) {
  const index_t L = lay.slab;
  const index_t nnz = indices.cols;
  bucket(
      indices.rows, lay,
      [&](index_t p) {
        index_t lo = nnz > 0 ? indices(p, 0) : 0;
        for (index_t k = 1; k < nnz; ++k) lo = std::min(lo, indices(p, k));
        return lo < 0 ? index_t(-1) : lo / L;
      },
      perm, ptr, threads);
}

namespace {
// Runs body(p, base, w) for every point in parallel, w the point's 2^D corner weights.
template <typename Q, typename Body>
void for_points(const WeightFunction& wf, MatrixView<const Q> points, int threads, Body body) {
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  const index_t P = points.rows;
  const int nt = resolve_threads(threads);
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> w(static_cast<size_t>(wf.corners()));
#pragma omp for schedule(static)
    for (index_t p = 0; p < P; ++p)
      body(p, wf.point(points.data + p * points.stride_r, points.stride_c, w.data()), w.data());
  }
}
}  // namespace

template <typename Q>
void compute_weights(const WeightFunction& wf, MatrixView<const Q> points,
                     MatrixView<index_t> indices, MatrixView<double> weights, int threads) {
  const index_t P = points.rows, nc = wf.corners();
  check_matrix(indices.rows, indices.cols, "blend: indices", P, nc);
  check_matrix(weights.rows, weights.cols, "blend: weights", P, nc);
  const index_t* off = wf.corner_offsets().data();
  for_points(wf, points, threads, [&](index_t p, index_t base, const double* w) {
    for (index_t k = 0; k < nc; ++k) {
      indices(p, k) = base + off[k];
      weights(p, k) = w[k];
    }
  });
}

template <typename T, typename Q>
void blend_fly(const WeightFunction& wf, MatrixView<const Q> points, MatrixView<const T> grid,
               MatrixView<T> out, int threads) {
  const index_t P = points.rows, C = grid.cols, nc = wf.corners();
  check_matrix(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  check_matrix(out.rows, out.cols, "blend: output", P, C);
  const index_t* off = wf.corner_offsets().data();
  for_points(wf, points, threads, [&](index_t p, index_t base, const double* w) {
    for (index_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (index_t k = 0; k < nc; ++k) acc += w[k] * double(grid(base + off[k], c));
      out(p, c) = T(acc);
    }
  });
}

template <typename T, typename Q>
void blend_transpose_fly(const WeightFunction& wf, MatrixView<const Q> points,
                         MatrixView<const T> values, MatrixView<T> out, int threads,
                         const index_t* perm, const index_t* ptr) {
  const index_t P = points.rows, C = values.cols, nc = wf.corners();
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  check_matrix(values.rows, values.cols, "blend_transpose: values", P, C);
  check_matrix(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  const TransposeLayout lay = transpose_layout(wf.grid_size(), wf.span());
  std::vector<index_t> own_perm, own_ptr;
  if (perm == nullptr || ptr == nullptr) {
    own_perm.resize(size_t(P));
    own_ptr.resize(size_t(lay.slabs + 1));
    plan_transpose_fly(wf, points, lay, own_perm.data(), own_ptr.data(), threads);
    perm = own_perm.data();
    ptr = own_ptr.data();
  }
  zero(out, threads);
  const index_t* off = wf.corner_offsets().data();
  const int nt = resolve_threads(threads);
  // per-thread scratch for the weights, indexed by the OpenMP thread number
  std::vector<std::vector<double>> scratch(static_cast<size_t>(nt),
                                           std::vector<double>(static_cast<size_t>(nc)));
  for_slabs(lay, perm, ptr, threads, [&](index_t, index_t p) {
#ifdef KRONPE_OPENMP
    double* w = scratch[size_t(omp_get_thread_num())].data();
#else
    double* w = scratch[0].data();
#endif
    const index_t base = wf.point(points.data + p * points.stride_r, points.stride_c, w);
    for (index_t k = 0; k < nc; ++k) {
      const index_t row = base + off[k];
      const double wk = w[size_t(k)];
      for (index_t c = 0; c < C; ++c) out(row, c) += T(wk * double(values(p, c)));
    }
  });
}

template <typename T>
void blend_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                  MatrixView<const T> grid, MatrixView<T> out, int threads) {
  const index_t P = indices.rows, nnz = indices.cols, C = grid.cols, G = grid.rows;
  check_matrix(weights.rows, weights.cols, "blend: weights", P, nnz);
  check_matrix(out.rows, out.cols, "blend: output", P, C);
  const int nt = resolve_threads(threads);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(| : bad)
  for (index_t p = 0; p < P; ++p) {
    for (index_t k = 0; k < nnz; ++k) bad |= bad_index(indices(p, k), G) ? 1 : 0;
    if (bad) continue;
    for (index_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (index_t k = 0; k < nnz; ++k) acc += weights(p, k) * double(grid(indices(p, k), c));
      out(p, c) = T(acc);
    }
  }
  require(!bad, "blend: an index lies outside the grid");
}

template <typename T>
void blend_transpose_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                            MatrixView<const T> values, MatrixView<T> out, index_t span,
                            int threads, const index_t* perm, const index_t* ptr) {
  const index_t P = indices.rows, nnz = indices.cols, C = values.cols, G = out.rows;
  check_matrix(weights.rows, weights.cols, "blend_transpose: weights", P, nnz);
  check_matrix(values.rows, values.cols, "blend_transpose: values", P, C);
  require(out.cols == C, "blend_transpose: output must have as many channels as values");
  const TransposeLayout lay = transpose_layout(G, span);
  std::vector<index_t> own_perm, own_ptr;
  if (perm == nullptr || ptr == nullptr) {
    own_perm.resize(size_t(P));
    own_ptr.resize(size_t(lay.slabs + 1));
    plan_transpose_stored(indices, lay, own_perm.data(), own_ptr.data(), threads);
    perm = own_perm.data();
    ptr = own_ptr.data();
  }
  zero(out, threads);
  const index_t L = lay.slab;
  int bad = 0;
  // a row whose entries leave [s L, (s + 2) L) would race with the neighbouring slab: refused
  for_slabs(lay, perm, ptr, threads, [&](index_t s, index_t p) {
    const index_t lo = s * L, hi = std::min(G, (s + 2) * L);
    for (index_t k = 0; k < nnz; ++k) {
      const index_t row = indices(p, k);
      if (row < lo || row >= hi) {
#pragma omp atomic write
        bad = 1;
        continue;
      }
      const double wk = weights(p, k);
      for (index_t c = 0; c < C; ++c) out(row, c) += T(wk * double(values(p, c)));
    }
  });
  require(!bad, "blend_transpose: an index lies outside the grid or beyond the declared span");
}

#define KRONPE_BLEND_Q(Q)                                                                      \
  template void plan_transpose_fly<Q>(const WeightFunction&, MatrixView<const Q>,              \
                                      TransposeLayout, index_t*, index_t*, int);               \
  template void compute_weights<Q>(const WeightFunction&, MatrixView<const Q>,                 \
                                   MatrixView<index_t>, MatrixView<double>, int);
#define KRONPE_BLEND_TQ(T, Q)                                                                  \
  template void blend_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,                    \
                                MatrixView<const T>, MatrixView<T>, int);                      \
  template void blend_transpose_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,          \
                                          MatrixView<const T>, MatrixView<T>, int,             \
                                          const index_t*, const index_t*);
#define KRONPE_BLEND_T(T)                                                                      \
  template void blend_stored<T>(MatrixView<const index_t>, MatrixView<const double>,           \
                                MatrixView<const T>, MatrixView<T>, int);                      \
  template void blend_transpose_stored<T>(MatrixView<const index_t>, MatrixView<const double>, \
                                          MatrixView<const T>, MatrixView<T>, index_t, int,    \
                                          const index_t*, const index_t*);
KRONPE_BLEND_Q(float)
KRONPE_BLEND_Q(double)
KRONPE_BLEND_TQ(float, float)
KRONPE_BLEND_TQ(float, double)
KRONPE_BLEND_TQ(double, float)
KRONPE_BLEND_TQ(double, double)
KRONPE_BLEND_T(float)
KRONPE_BLEND_T(double)

}  // namespace kronpe::blend
