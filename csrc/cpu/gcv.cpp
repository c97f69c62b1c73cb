// kronpe C++ core: the GCV scores of a separable fit at many ridges on the CPU (kronpe/gcv.h),
// summed in the blocks of the inner products (reductions.cpp) so that they do not depend on the
// thread count.
#include "kronpe/gcv.h"

#include <algorithm>
#include <type_traits>

#include "smooth_teams.h"

namespace kronpe::smooth {

using detail::blocked_sums;

namespace {

// sum f c and sum f^2 w over one block for G ridges at once (one pass over m, c and w: the
// curve is read from memory once per G ridges), f = lam / (m + lam): eight partial sums per sum,
// as dot_block adds them, without fused multiply-adds, so that every ridge's sums are the same
// bits whatever G and the CPU.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
template <int G>
KRONPE_CLONES void gcv_block(index_t n, const double* lam, const double* __restrict m,
                             const double* __restrict c, const double* __restrict w, double* part) {
  double a[G][8] = {}, b[G][8] = {};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int g = 0; g < G; ++g)
      for (int k = 0; k < 8; ++k) {
        const double f = lam[g] / (m[i + k] + lam[g]);
        a[g][k] += f * c[i + k];
        b[g][k] += f * f * w[i + k];
      }
  for (int g = 0; g < G; ++g) {
    double ta = 0.0, tb = 0.0;
    for (index_t j = i; j < n; ++j) {
      const double f = lam[g] / (m[j] + lam[g]);
      ta += f * c[j];
      tb += f * f * w[j];
    }
    part[2 * g] = ((a[g][0] + a[g][1]) + (a[g][2] + a[g][3])) + ((a[g][4] + a[g][5]) + (a[g][6] + a[g][7])) + ta;
    part[2 * g + 1] = ((b[g][0] + b[g][1]) + (b[g][2] + b[g][3])) + ((b[g][4] + b[g][5]) + (b[g][6] + b[g][7])) + tb;
  }
}
#pragma GCC pop_options

}  // namespace

void gcv_scores(index_t r, const double* m, const double* c, const double* w, index_t L,
                const double* ridges, double rss0, double n, double total, double* scores,
                int threads) {
  require(r >= 0 && L >= 0, "gcv_scores: negative length");
  constexpr int G = 4;  // ridges per pass
  for (index_t l0 = 0; l0 < L; l0 += G) {
    const int g = int(std::min<index_t>(G, L - l0));
    double lam[G], s[2 * G];
    for (int k = 0; k < G; ++k) lam[k] = ridges[l0 + std::min(k, g - 1)];  // a short group repeats its last
    auto pass = [&](auto width) {  // one ridge alone (the golden section's steps), or G
      constexpr int W = decltype(width)::value;
      blocked_sums<2 * W>(r, threads, s, [&](index_t lo, index_t len, double* part) {
        gcv_block<W>(len, lam, m + lo, c + lo, w + lo, part);
      });
    };
    if (g == 1) pass(std::integral_constant<int, 1>{});
    else pass(std::integral_constant<int, G>{});
    for (int k = 0; k < g; ++k) {
      const double rss = rss0 + s[2 * k + 1];
      const double dof = std::max(n - (total - s[2 * k]), 1e-300);
      scores[l0 + k] = n * rss / (dof * dof);
    }
  }
}

}  // namespace kronpe::smooth
