// kronpe C++ core: the blending matrix B of scattered points on a virtual grid (docs/math/scattered.rst).
//
// Row p of B holds the 2^D products of per-axis interpolation weights at the corners of the grid
// cell that contains point p (row-major flat index sum_i j_i * prod_{l>i} M_l; corner c takes
// node j_i + bit_i(c) along axis i, with axis 0 the most significant bit of c). Along one axis,
// between nodes g0 <= q <= g1 with spacing h and q = g0 + beta h,
//
//     alpha = [[D(0), D(h)], [D(h), D(0)]]^-1 [D(beta h), D((1 - beta) h)]
//
// with D the embedder's distance function. The kernels come in two forms:
//   * on the fly: the weights are recomputed from the points and a compact per-axis description
//     (node coordinates + a closed-form distance, `AxisSpec`); nothing is stored per point;
//   * stored: (indices, weights) arrays of shape (P, nnz), e.g. from `compute_weights`, or from
//     the Python layer for embedders without a closed form here.
//
// Memory order: a plan (plan_fly / plan_stored, computed once per matrix) sorts the points
// stably by their smallest index, the flat index of their cell's first corner. Gathers and
// scatters that follow it walk the grid in order (neighbouring points share corners, rows of the
// grid are read and written as streams) instead of jumping to a random cell per point.
// Dense rows (values and results row-major, C channels next to each other; stored rows dense)
// take kernels compiled per corner count (2, 4, 8) and channel count, with the same sums in the
// same order as the strided loops (same bits); in plan order they fetch the largest corner's
// stream ahead (the only one not visited a row or plane earlier) and the P-side rows.
//
// Determinism: `blend` (gather) is parallel over points and exact-order per point, in any
// visiting order: its result does not depend on the plan or the thread count. The scatter
// `blend_transpose` never uses atomics: the flat grid is cut into slabs of L consecutive nodes (L
// depends on the grid size and the row span only, never on the thread count); in the plan's
// order the points of a slab (by their smallest index) are contiguous, and the slabs are
// processed in two phases (even slabs, then odd slabs) so that slabs running at the same time
// never write the same node. Every node therefore sums its contributions in one fixed order
// (phase, then plan order): the result is bitwise identical for any number of threads.
//
// Values are (rows, channels) matrices with strides in elements; float and double. Points are
// (P, D) with strides; float or double (weights are always computed in double). Indices are 64-bit.
#pragma once
#include <cstdint>
#include <vector>

#include "kronpe/blend_math.h"
#include "kronpe/common.h"

namespace kronpe::blend {

// The slab count the transpose aims at (the actual count depends on the grid size and row span).
constexpr index_t kTargetSlabs = 256;
// Points per block in the kernels (weights of a block are computed, then used).
constexpr index_t kBlock = 64;

// One axis of the virtual grid and its weight function.
struct AxisSpec {
  const double* nodes = nullptr;  // (M,) strictly increasing node coordinates
  index_t M = 0;                  // number of nodes, >= 2
  Kernel kind = Kernel::linear;
  double param = 0.0;
};

// A strided (rows, cols) matrix.
template <typename T>
struct MatrixView {
  T* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t stride_r = 0;  // elements between rows
  index_t stride_c = 0;  // elements between columns
  KRONPE_HD T& operator()(index_t r, index_t c) const { return data[r * stride_r + c * stride_c]; }
};

// The per-point weight function: per-axis cell search, 2x2 inverse per cell (precomputed), and
// the 2^D corner products.
class WeightFunction {
 public:
  WeightFunction(const std::vector<AxisSpec>& axes, bool normalize);

  int dims() const { return int(axes_.size()); }
  index_t corners() const { return index_t(1) << axes_.size(); }
  index_t grid_size() const { return grid_size_; }
  // row-major strides of the virtual grid, one per axis
  const std::vector<index_t>& strides() const { return strides_; }
  // flat offsets of the 2^D corners relative to the cell's first corner
  const std::vector<index_t>& corner_offsets() const { return corner_offsets_; }
  // largest index difference within a row: sum of the strides
  index_t span() const { return span_; }
  bool normalize() const { return normalize_; }

  // The precomputed tables of axis i (for other backends, e.g. the CUDA kernels). Pointers stay
  // valid as long as this object.
  struct AxisTable {
    const double* nodes;  // (M,)
    const double* Dh;     // (M - 1,) D(h) per cell
    const double* det;    // (M - 1,) D(0)^2 - D(h)^2 per cell
    const char* singular; // (M - 1,) 1 where the cell falls back to linear weights
    index_t M;
    Kernel kind;
    double param, lo, hi, inv_h, D0;
    bool uniform;
  };
  AxisTable axis_table(int i) const;

  // Cells j (0 <= j <= M-2) and weight pairs (w0, w1) of n contiguous coordinates q along axis
  // i. q is clamped onto [nodes[0], nodes[M-1]] (NaN goes to nodes[0]); the Python layer
  // validates before.
  void axis(int i, const double* q, index_t n, index_t* j, double* w0, double* w1) const;
  // Flat index of the first corner of a point's cell (coordinates q[i * stride]).
  template <typename Q>
  index_t base_index(const Q* q, index_t stride) const {
    index_t base = 0;
    for (int i = 0; i < dims(); ++i) base += axes_[size_t(i)].cell(double(q[i * stride])) * strides_[size_t(i)];
    return base;
  }

  // Flat indices of the first corner (base, n values) and the 2^D corner weights (w, n * 2^D
  // values, point-major) of n points, and with idx the corners' flat indices (n * 2^D values,
  // point-major). Point b is row rows[b] of `points` when rows is given, row start + b otherwise.
  // Coordinates are clamped as in axis().
  template <typename Q>
  void block(const MatrixView<const Q>& points, const index_t* rows, index_t start, index_t n,
             index_t* base, double* w, index_t* idx = nullptr) const;
  // block()'s first step along one axis: the cells j and weight pairs (a0, a1) of n points
  // (points as in block()).
  template <typename Q>
  void axis_block(int i, const MatrixView<const Q>& points, const index_t* rows, index_t start,
                  index_t n, index_t* j, double* a0, double* a1) const;
  // block() from factors (see compute_factors): point b is row rows[b] of (fbase, pairs), row
  // start + b without rows. The same bits as block() of the points the factors came from.
  void block_factored(MatrixView<const index_t> fbase, MatrixView<const double> pairs,
                      const index_t* rows, index_t start, index_t n, index_t* base, double* w,
                      index_t* idx = nullptr) const;

 private:
  struct Axis {
    template <Kernel K, bool Normalize, typename Q>
    void weights(const Q* q, index_t stride, const index_t* rows, index_t start, index_t n,
                 index_t* j, double* w0, double* w1) const;
    template <typename Q>
    void weights(bool normalize, const Q* q, index_t stride, const index_t* rows, index_t start,
                 index_t n, index_t* j, double* w0, double* w1) const;
    index_t cell(double q) const;  // q already clamped, or anything: NaN and below give 0
    std::vector<double> nodes;
    Kernel kind;
    double param;
    double lo, hi, inv_h;  // range and mean inverse spacing (cell guess)
    bool uniform;
    double D0;
    std::vector<double> Dh, det;  // per cell: D(h), D(0)^2 - D(h)^2
    std::vector<char> singular;   // per cell
    std::vector<double> cell_dt;  // per cell: det, or 0 where singular (math::pair's dt)
    std::vector<double> cells4;   // per cell: nodes[j], nodes[j + 1], Dh[j], cell_dt[j]
  };
  std::vector<Axis> axes_;
  std::vector<index_t> strides_, corner_offsets_;
  index_t grid_size_ = 1, span_ = 0;
  bool normalize_;
};

// D(d) of a closed-form kind (d may be negative).
double distance(Kernel kind, double param, double d);

// ArgumentError "<what>: expected shape (want_rows, want_cols), got (rows, cols)" on a mismatch.
void require_shape(index_t rows, index_t cols, const char* what, index_t want_rows,
                   index_t want_cols);

// The vector paths the blend kernels take, at most what the CPU has (the default): 2 AVX-512 (the
// cell search of uniform axes, the gathers of 2-4 channels), 1 AVX2 (the cell search), 0 the
// portable loops; every level gives the same bits. Returns the previous level.
int set_simd(int level);

// The stable bucketing of points by output slab used by blend_transpose (see the top comment).
struct TransposeLayout {
  index_t slab = 1;   // L: nodes per slab
  index_t slabs = 0;  // NS: number of slabs
};
TransposeLayout transpose_layout(index_t grid_size, index_t span);

// Plans: perm (P,) receives the points sorted stably by their smallest index (the cell's first
// corner; for stored rows the smallest entry), ptr (NS + 1,) the offsets of the slabs in that
// order. The same for any thread count; points already in that order cost one pass.
template <typename Q>
void plan_fly(const WeightFunction& wf, MatrixView<const Q> points, TransposeLayout lay,
              index_t* perm, index_t* ptr, int threads);
void plan_stored(MatrixView<const index_t> indices, TransposeLayout lay, index_t* perm,
                 index_t* ptr, int threads);

// Stored form of B: indices (P, 2^D) and weights (P, 2^D) of every point.
template <typename Q>
void compute_weights(const WeightFunction& wf, MatrixView<const Q> points,
                     MatrixView<index_t> indices, MatrixView<double> weights, int threads);

// The factored form of B: per point the flat index of its cell's first corner (base, (P, 1)) and
// its D per-axis weight pairs (pairs, (P, 2D): a0 then a1 of axis 0, then of axis 1, ...), i.e.
// what the on-the-fly kernels compute before they form the 2^D corner weights; 8 + 16 D bytes per
// point where the stored form takes 16 * 2^D. Products from them (blend_factored,
// blend_transpose_factored) form the corners with the same products in the same order: the bits
// of the on-the-fly products, without computing a weight. Row e of the factors is point rows[e]
// (point e without rows): factors in a plan's order come from rows = its perm.
template <typename Q>
void compute_factors(const WeightFunction& wf, MatrixView<const Q> points, const index_t* rows,
                     MatrixView<index_t> base, MatrixView<double> pairs, int threads);

// out (P, C) = B grid (G, C), weights computed on the fly. With `rows` (a permutation of [0, P))
// point p gives row rows[p] of out: points given in a plan's order (points[perm], rows = perm)
// are gathered in memory order, with the same bits as in any other order.
template <typename T, typename Q>
void blend_fly(const WeightFunction& wf, MatrixView<const Q> points, MatrixView<const T> grid,
               MatrixView<T> out, int threads, const index_t* rows = nullptr);
// out (G, C) = B^T values (P, C), weights computed on the fly. The plan (perm, ptr) may be null
// (then it is computed here); otherwise it must come from plan_fly on the same points and
// layout. With `sorted`, `points` are given in the plan's order (point e of them is point
// perm[e], whose value is values row perm[e]): the points are then read as a stream.
template <typename T, typename Q>
void blend_transpose_fly(const WeightFunction& wf, MatrixView<const Q> points,
                         MatrixView<const T> values, MatrixView<T> out, int threads,
                         const index_t* perm, const index_t* ptr, bool sorted = false);

// The same from factors (compute_factors) of P points: rows and (perm, ptr, sorted) as in
// blend_fly and blend_transpose_fly, with row e of the factors standing for point e there. Every
// corner must lie in the grid (and, in the transpose, in its slab's range): checked.
template <typename T>
void blend_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                    MatrixView<const double> pairs, MatrixView<const T> grid, MatrixView<T> out,
                    int threads, const index_t* rows = nullptr);
template <typename T>
void blend_transpose_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                              MatrixView<const double> pairs, MatrixView<const T> values,
                              MatrixView<T> out, int threads, const index_t* perm,
                              const index_t* ptr, bool sorted = false);

// The same from stored (indices, weights) of shape (P, nnz); every index must be in [0, G).
template <typename T>
void blend_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                  MatrixView<const T> grid, MatrixView<T> out, int threads,
                  const index_t* rows = nullptr);
template <typename T>
void blend_transpose_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                            MatrixView<const T> values, MatrixView<T> out, index_t span,
                            int threads, const index_t* perm, const index_t* ptr,
                            bool sorted = false);

// out (G,) += B^T K B v for one plane v (G,), K = diag(keep) (keep (P,), null: the identity), from
// stored (indices, weights) in any row order (a plan's order keeps the grid's reads and writes
// close together): each row's B v summed in double and rounded to T (as blend_stored's), times
// keep, scattered back in the rows' order. One pass on one thread, no grid-sized temporary: the
// normal equations' data term of a fit off the nodes (kronpe.solvers.smooth).
template <typename T>
void blend_normal_add(MatrixView<const index_t> indices, MatrixView<const double> weights,
                      const T* v, T* out, index_t G, const T* keep);

}  // namespace kronpe::blend
