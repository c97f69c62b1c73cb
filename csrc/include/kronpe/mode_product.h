// kronpe C++ core: mode-n products (docs/math/encodings.rst).
//
// T x_k A multiplies every mode-k fibre of a tensor T by a matrix A of shape (m, n_k). A chain
// of such products over several modes is planned once (contraction order and memory layout by a
// small cost model), then run as a handful of row-major GEMMs (kronpe::chain_gemm: the packed
// AVX-512 GEMM of kronpe/packed_gemm.h where the CPU has AVX-512, else kronpe::gemm) on two
// ping-pong workspaces (one of them in the destination when it fits there). The Kronecker
// product is never formed.
//
// Layout model. The tensor between two steps is one dense buffer whose axes sit in some
// physical order (a "deque"). The axis to contract next is:
//   - at the front (everything after it merges into one axis of length `post`):
//       FrontKeep    Y (m x post) = A X            new axis stays at the front
//       FrontRotate  Y (post x m) = X^T A^T        new axis moves to the back
//   - at the back (everything before it merges into one axis of length `pre`):
//       BackKeep     Y (pre x m)  = X A^T          new axis stays at the back
//       BackRotate   Y (m x pre)  = A X^T          new axis moves to the front
//   - in the middle: `pre` GEMMs (m x n)(n x post) on a strided batch (Batched), or one
//     permuting copy that brings it to the back first.
// Every choice is one large GEMM or a batch of GEMMs on the buffer as it lies: no transposed
// copies unless the plan finds them cheaper than many small products. When the final physical
// order is not the logical one, one permuting copy writes the result; otherwise the last GEMM
// writes straight into the destination.
#pragma once
#include <array>
#include <vector>

#include "kronpe/common.h"
#include "kronpe/mode_product_plan.h"

namespace kronpe {

// dst = src x_{modes[0]} mats[0] ... x_{modes[nmodes-1]} mats[nmodes-1], the output shape being
// `shape` with shape[modes[j]] replaced by mats[j].rows. mats[j].cols must equal
// shape[modes[j]]. dst (out_size elements) must not overlap src or the matrices.
// out_order == nullptr: dst is written in C order. Otherwise dst may be written in any dense
// axis order, returned in out_order[0..ndim) (logical axes, outermost first): element
// (i_0..i_{d-1}) then lies at sum_k i_{out_order[k]} * prod_{l>k} out_shape[out_order[l]].
template <typename T>
void multi_mode_product(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                        int nmodes, const int* modes, const MatrixRef<T>* mats, T* dst,
                        int* out_order = nullptr);

// dst[i] = src[i] over a strided box (strides in elements, any sign); cache-blocked when the
// two arrays' unit-stride axes differ. Single-threaded on purpose: OpenMP worker threads that
// spin after a region starve the BLAS threads that run next on a small machine.
template <typename T>
void strided_copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
                  T* dst, const index_t* dst_strides);

// The CPU planner's GEMM layouts, measured: on, each step's layout cost comes from a short
// timing of the four layouts per shape class (extents rounded to powers of two), taken the
// first time a plan needs that class and kept for the process; off, the fixed penalties of
// ModeCostModel. Either way plans are cached and deterministic for a given table.
void set_mode_layout_measured(bool on);
// The measurements so far: (m, k, rest, element size, then time / fastest for FrontKeep,
// FrontRotate, BackKeep, BackRotate) per class.
std::vector<std::array<double, 8>> mode_layout_table();
// Forget the measurements (the next plans measure again).
void clear_mode_layout_table();
// The cost model the CPU chains plan with now: the packed GEMM's kernels' (AVX-512 or AVX2)
// where the chains run it, else the BLAS's.
const ModeCostModel& chain_cost_model();

}  // namespace kronpe
