// kronpe C++ core: the generalised cross-validation scores of a separable ridge fit, many
// ridges in one pass over the curve. CPU: csrc/cpu/gcv.cpp.
#pragma once
#include "kronpe/common.h"

namespace kronpe::smooth {

// GCV scores of a separable fit at L ridges (docs/math/encodings.rst, GCV; kronpe.solvers.gcv): over the r
// products m of squared singular values (counts c, squared projections w), f = lam / (m + lam),
// rss = rss0 + sum f^2 w, dof = n - (total - sum f c), scores[l] = n rss / max(dof, 1e-300)^2;
// each sum in dot's blocks, added in order (the same result for any thread count).
void gcv_scores(index_t r, const double* m, const double* c, const double* w, index_t L,
                const double* ridges, double rss0, double n, double total, double* scores,
                int threads = 0);

}  // namespace kronpe::smooth
