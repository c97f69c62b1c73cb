// kronpe C++ core: the vector kernels of the Krylov solvers (kronpe/multigrid.h's PCG, the
// channels' second moments): inner products accumulated in double in fixed blocks, so that
// every result is the same for any thread count, and the split of elementwise updates among
// threads. CPU: csrc/cpu/reductions.cpp.
#pragma once
#include <functional>

#include "kronpe/common.h"

namespace kronpe::smooth {

// sum_i a[i] b[i] over n contiguous values, accumulated in double (the Krylov solvers' inner
// products: no BLAS call, whose threads would spin against the kernels), in blocks of 32k values
// whose sums are added in order: the same result for any thread count.
template <typename T>
double dot(index_t n, const T* a, const T* b, int threads = 0);
// Every inner product of c arrays of n values (S[i * c + j] = S[j * c + i] = dot(n, a_i, a_j)),
// one pass over each block of them, with dot's sums (the same values).
template <typename T>
void dots(index_t n, int c, const T* const* a, double* S, int threads = 0);

// a . b and c . d in one pass over the four arrays, into out[0], out[1]: the same blocks and the
// same bits as two calls of dot (CG's (r, z) and (z, z) after each V-cycle).
template <typename T>
void dot2(index_t n, const T* a, const T* b, const T* c, const T* d, double out[2], int threads = 0);

// CG's update x += alpha p, r -= alpha q, and x . x after it in the same pass (the same bits as
// dot(n, x, x) after the update).
template <typename T>
double cg_update_norm(index_t n, T alpha, const T* p, const T* q, T* x, T* r, int threads = 0);

// f(lo, hi) over [0, n) split into contiguous ranges among threads (one range below 32k elements
// per thread): the elementwise vector updates of the Krylov loops.
void for_range(index_t n, int threads, const std::function<void(index_t, index_t)>& f);

}  // namespace kronpe::smooth
