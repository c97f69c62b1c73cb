// kronpe C++ core: the observed values of a grid with holes, gathered in one pass (the fill of a
// grid with a mask: its right-hand side and the range its result is clipped to).
#pragma once
#include "kronpe/common.h"

namespace kronpe {

// s (n, C) row-major, mask (n) (non-zero = observed): out = s where observed, 0 elsewhere (out
// (n, C), or (C, n) with planar: one contiguous plane per channel, as the solver takes them; out
// must not overlap s); lo[c], hi[c] = the min and max of channel c over the observed values
// (+inf and -inf when none is). Returns how many observed values are NaN or Inf (copied as they
// are; lo and hi are then meaningless).
template <typename T>
index_t masked_fill(index_t n, index_t C, const T* s, const unsigned char* mask, T* out, T* lo,
                    T* hi, bool planar = false);

// Points on a lattice (the default fit of scattered samples that lie on one, and the prediction
// of such a fit at lattice points). Point p's coordinate along axis a (0 <= a < D) is
// points[p * sp + a * sa]; axis a has n[a] >= 1 nodes; its node index is k = rint((x - origin[a])
// * scale[a]) clamped to [0, n[a] - 1] (NaN: 0), and flat[p] = sum_a k_a prod_{b > a} n[b] (C
// order). With `nodes` (per axis, n[a] values) a point passes only when every coordinate equals
// its node's value exactly: returns the first p that does not (flat[0..p) written), else P.
// Without `nodes` every point passes (returns P).
template <typename T>
index_t lattice_index(index_t P, int D, const T* points, index_t sp, index_t sa, const index_t* n,
                      const double* origin, const double* scale, const double* const* nodes,
                      index_t* flat);

// The lattice of one axis's coordinates x[p * sx] (p < P) (kronpe.solvers.smooth.lattice_grid):
// n >= 1 when every coordinate is a multiple k h (0 <= k <= n) of h = 1 / n, h the smallest gap between
// distinct coordinates, else 0. h is the smallest positive gap of the sorted coordinates, kept when
// 1 / h is within rtol (1 / h) of an integer n and every |x / h - rint(x / h)| <= tol. With
// P > 2 probe it is first read off the subset x[0], x[s], x[2 s], ... (s = P / probe) and kept
// when, besides, no two distinct coordinates round to the same multiple (then no gap of the whole
// set is smaller); else read off all of them (in double, also for float coordinates). Any
// non-finite coordinate: 0.
template <typename T>
index_t lattice_count(index_t P, const T* x, index_t sx, index_t probe, double rtol, double tol);

// counts[g] = how many p have flat[p] == g, sums[c * G + g] = the sum of their values[p * vp +
// c * vc] (c < C), added in the points' order in T; counts and sums (G and C * G values) are
// overwritten. Every flat[p] must lie in [0, G) (an index outside throws before anything is
// written).
template <typename T>
void lattice_sums(index_t P, index_t C, const index_t* flat, const T* values, index_t vp,
                  index_t vc, index_t G, T* counts, T* sums);

}  // namespace kronpe
