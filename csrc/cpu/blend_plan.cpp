// kronpe C++ core: the plans of the blending matrix's transpose on the CPU (kronpe/blend.h): the
// points sorted stably by their cell's first corner, bucketed by output slab, the same order for
// any thread count.
#include "kronpe/blend.h"

#include "blend_internal.h"

#include <algorithm>
#include <vector>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::blend {

using detail::bad_index;
using detail::pick_threads;
using detail::resolve_threads;

namespace {

// Sorts a slab's items [first, last) of perm stably by key (key[item] in [lo, lo + L)): nothing
// to do when they are in order already (e.g. points that were sorted before), a counting sort
// when the slab's key range is small next to its item count, a stable comparison sort otherwise.
void sort_slab(index_t* first, index_t* last, const index_t* key, index_t lo, index_t L,
               std::vector<index_t>& count, std::vector<index_t>& tmp) {
  const index_t n = last - first;
  bool sorted = true;
  for (index_t e = 1; e < n && sorted; ++e) sorted = key[first[e - 1]] <= key[first[e]];
  if (sorted) return;
  if (L > 8 * n + 256) {
    std::stable_sort(first, last, [key](index_t a, index_t b) { return key[a] < key[b]; });
    return;
  }
  count.assign(size_t(L) + 1, 0);
  for (index_t e = 0; e < n; ++e) ++count[size_t(key[first[e]] - lo + 1)];
  for (index_t k = 0; k < L; ++k) count[size_t(k + 1)] += count[size_t(k)];
  tmp.assign(first, last);
  for (index_t e = 0; e < n; ++e) first[count[size_t(key[tmp[size_t(e)]] - lo)]++] = tmp[size_t(e)];
}

// The points in grid order: perm lists the P items sorted stably by key (the flat index of the
// first corner of their cell, i.e. their smallest index), ptr (NS + 1) the offsets of the
// slabs of nodes [s L, (s + 1) L) in that order. The order is the same whatever the number of
// threads (only the chunking of the work depends on it): the items are bucketed by slab
// (stable), then each slab is sorted by key (stable).
template <typename KeyOf>
void sort_by_cell(index_t P, TransposeLayout lay, KeyOf key_of, index_t* perm, index_t* ptr,
                  int threads) {
  const index_t NS = lay.slabs, L = lay.slab;
  const int nt = int(std::max<index_t>(1, std::min<index_t>(resolve_threads(threads), P)));
  std::vector<index_t> key(static_cast<size_t>(P));
  std::vector<index_t> hist(size_t(nt) * size_t(NS) + 1, 0);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(| : bad)
  for (int c = 0; c < nt; ++c) {
    const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
    index_t* h = hist.data() + size_t(c) * size_t(NS);
    for (index_t p = p0; p < p1; ++p) {
      const index_t k = key_of(p);
      const index_t s = k < 0 ? index_t(-1) : k / L;
      if (bad_index(s, NS)) {
        bad = 1;
        key[p] = 0;
        continue;
      }
      key[p] = k;
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
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static, 1)
    for (int c = 0; c < nt; ++c) {
      const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
      index_t* h = hist.data() + size_t(c) * size_t(NS);
      for (index_t p = p0; p < p1; ++p) perm[h[key[p] / L]++] = p;
    }
    std::vector<index_t> count, tmp;
#pragma omp for schedule(dynamic, 1)
    for (index_t s = 0; s < NS; ++s)
      sort_slab(perm + ptr[s], perm + ptr[s + 1], key.data(), s * L, L, count, tmp);
  }
}

}  // namespace

TransposeLayout transpose_layout(index_t grid_size, index_t span) {
  require(grid_size >= 0 && span >= 0, "blend_transpose: negative grid size or span");
  TransposeLayout lay;
  if (grid_size == 0) return lay;
  lay.slab = std::max<index_t>(span + 1, (grid_size + kTargetSlabs - 1) / kTargetSlabs);
  lay.slabs = (grid_size + lay.slab - 1) / lay.slab;
  return lay;
}

template <typename Q>
void plan_fly(const WeightFunction& wf, MatrixView<const Q> points, TransposeLayout lay,
              index_t* perm, index_t* ptr, int threads) {
  threads = pick_threads(threads, saturating_mul(points.rows, wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  sort_by_cell(
      points.rows, lay,
      [&](index_t p) { return wf.base_index(points.data + p * points.stride_r, points.stride_c); },
      perm, ptr, threads);
}

void plan_stored(MatrixView<const index_t> indices, TransposeLayout lay, index_t* perm,
                 index_t* ptr, int threads) {
  threads = pick_threads(threads, saturating_mul(indices.rows, indices.cols));
  const index_t nnz = indices.cols;
  sort_by_cell(
      indices.rows, lay,
      [&](index_t p) {
        index_t lo = nnz > 0 ? indices(p, 0) : 0;
        for (index_t k = 1; k < nnz; ++k) lo = std::min(lo, indices(p, k));
        return lo;
      },
      perm, ptr, threads);
}

namespace detail {

void plan_bases(MatrixView<const index_t> base, TransposeLayout lay, index_t* perm, index_t* ptr,
                int threads) {
  sort_by_cell(base.rows, lay, [&](index_t p) { return base(p, 0); }, perm, ptr, threads);
}

}  // namespace detail

#define KRONPE_PLAN_Q(Q)                                                                       \
  template void plan_fly<Q>(const WeightFunction&, MatrixView<const Q>, TransposeLayout,       \
                            index_t*, index_t*, int);
KRONPE_PLAN_Q(float)
KRONPE_PLAN_Q(double)

}  // namespace kronpe::blend
