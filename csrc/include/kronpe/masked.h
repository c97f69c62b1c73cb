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

}  // namespace kronpe
