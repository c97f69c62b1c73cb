// kronpe C++ core: mix_channels (kronpe/channels.h). Built without FP
// contraction (CMakeLists.txt), so that a mix gives the bits of the NumPy multiply-adds it replaced.
#include "kronpe/channels.h"

#include "kronpe/threads.h"

#include <algorithm>
#include <vector>

namespace kronpe {
namespace {

constexpr index_t kTile = 256;                            // nodes mixed together
constexpr index_t kMinValuesPerThread = index_t(1) << 16;  // below: one thread

// Nodes [begin, end): every output channel of a tile at a time.
template <typename T>
KRONPE_CLONES index_t mix_range(index_t begin, index_t end, int cin, const T* const* in, int cout, const T* v,
                                T* const* out, index_t out_stride, const T* lo, const T* hi) {
  T acc[kTile];
  index_t outside = 0;
  for (index_t t0 = begin; t0 < end; t0 += kTile) {
    const index_t m = std::min(kTile, end - t0);
    for (int c = 0; c < cout; ++c) {
      const T v0 = v[c];
      const T* __restrict a = in[0] + t0;
      for (index_t i = 0; i < m; ++i) acc[i] = a[i] * v0;
      for (int k = 1; k < cin; ++k) {
        const T vk = v[k * cout + c];
        const T* __restrict b = in[k] + t0;
        for (index_t i = 0; i < m; ++i) acc[i] = acc[i] + b[i] * vk;
      }
      if (lo) {  // (an int count per tile and a select: an index_t count kept the loop scalar, 3x slower)
        const T l = lo[c], h = hi[c];
        int count = 0;
        for (index_t i = 0; i < m; ++i) {
          const T a = acc[i];
          count += int(a < l) + int(a > h);
          acc[i] = a < l ? l : (a > h ? h : a);
        }
        outside += count;
      }
      T* __restrict o = out[c] + t0 * out_stride;
      if (out_stride == 1) std::copy(acc, acc + m, o);
      else
        for (index_t i = 0; i < m; ++i) o[i * out_stride] = acc[i];
    }
  }
  return outside;
}

int threads_for(index_t values) {
  return int(std::max<index_t>(1, std::min<index_t>(kernel_threads(), values / kMinValuesPerThread)));
}

}  // namespace

template <typename T>
index_t mix_channels(index_t n, int cin, const T* const* in, int cout, const T* v, T* const* out,
                     index_t out_stride, const T* lo, const T* hi) {
  require(n >= 0 && cin >= 1 && cout >= 1 && out_stride >= 1, "mix_channels: bad sizes");
  require((lo == nullptr) == (hi == nullptr), "mix_channels: lo and hi go together");
  if (n == 0) return 0;
  const int nt = threads_for(checked_mul(n, index_t(cin + cout), "mix_channels"));
  std::vector<index_t> outside(static_cast<std::size_t>(nt), 0);
  run_team(nt, [&](int t, int count) {
    // tile-aligned blocks of nodes
    const index_t tiles = (n + kTile - 1) / kTile;
    const index_t b = std::min(n, tiles * t / count * kTile), e = std::min(n, tiles * (t + 1) / count * kTile);
    outside[std::size_t(t)] = mix_range(b, e, cin, in, cout, v, out, out_stride, lo, hi);
  });
  index_t total = 0;
  for (index_t o : outside) total += o;
  return total;
}

template index_t mix_channels<float>(index_t, int, const float* const*, int, const float*, float* const*, index_t,
                                     const float*, const float*);
template index_t mix_channels<double>(index_t, int, const double* const*, int, const double*, double* const*,
                                      index_t, const double*, const double*);

}  // namespace kronpe
