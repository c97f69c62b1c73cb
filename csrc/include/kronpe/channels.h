// kronpe C++ core: the channels of a grid mixed by a small matrix (the default fill's change to the
// channels' principal basis and back, with the clip to the samples' range on the way back), one
// pass over the nodes (their second moments: kronpe::smooth::dots).
#pragma once
#include "kronpe/common.h"

namespace kronpe {

// out_c[i * out_stride] = sum_k v[k * cout + c] in_k[i] for c < cout, i < n (in: cin arrays of n
// contiguous values; out: cout pointers whose element i lies at out_c + i * out_stride: planes,
// stride 1, or the columns of one interleaved (n, cout) array, stride cout), the terms added in k
// order in T; lo, hi (cout values each, or null): output c clipped to [lo_c, hi_c]. Returns how
// many outputs were outside that range before the clip. Outputs must not overlap inputs.
template <typename T>
index_t mix_channels(index_t n, int cin, const T* const* in, int cout, const T* v, T* const* out,
                     index_t out_stride, const T* lo, const T* hi);

}  // namespace kronpe
