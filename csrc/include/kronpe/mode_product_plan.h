// kronpe C++ core: the mode-product planner, shared by the CPU and CUDA executors
// (csrc/common/mode_product_plan.cpp). A chain of mode-n products (see kronpe/mode_product.h for
// the layout model) is planned by a cost model, lowered to a ChainProgram of strided copies and
// (batched) row-major GEMMs on four buffers, and run by kronpe/mode_product_exec.h with a
// backend's GEMM, copy and workspace. Host-only code; no Python, no CUDA.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kronpe/common.h"

namespace kronpe {

// A matrix operand: rows x cols, element strides (either may be 1; other strides are copied).
template <typename T>
struct MatrixRef {
  const T* data;
  index_t rows;
  index_t cols;
  index_t row_stride;
  index_t col_stride;
};

enum class StepKind { FrontKeep, FrontRotate, BackKeep, BackRotate, Batched };

struct ModeStep {
  int mode;        // logical axis contracted
  int move;        // a permuting copy first moves the axis: 0 none, 1 to the front, 2 to the back
  StepKind kind;
};

struct ModePlan {
  bool copy_input = false;       // first copy the input into the dense layout `input_order`
  std::vector<int> input_order;  // physical order (outermost first) of the input axes used by
                                 // step 0, axes of extent 1 left out
  std::vector<ModeStep> steps;
  bool copy_output = false;      // a final permuting copy writes the destination in C order
  double cost = 0.0;             // model cost, seconds-like units
  std::string describe() const;
};

// The planner's cost model, in seconds-like units (only ratios matter). A GEMM (M, N, K) runs at
// `rate_f32` flop/s (half of it for float64) scaled by e(M) e(N) e(K), e(x) = x / (x + half),
// plus `call` per call; a permuting copy costs `copy_f32` per element (1.6x for float64). With
// `batched_one_call` a strided batch of GEMMs is one call (cuBLAS), else one call per matrix.
struct ModeCostModel {
  double rate_f32 = 150e9;
  double half = 12.0;
  double call = 1.5e-6;
  double copy_f32 = 1.5e-9;
  bool batched_one_call = false;
  int id = 0;  // distinguishes models in the plan caches (0: the CPU model)
  // Per StepKind (FrontKeep, FrontRotate, BackKeep, BackRotate, Batched): a GEMM of that layout
  // takes 1 + penalty * 64 / k times as long, k the contracted extent. These defaults were
  // measured with OpenBLAS on a 2-core AVX Xeon (X A^T fastest; at k = 64 the others at 0.55 (A X),
  // 0.7 (X^T A^T) and 0.75 (A X^T) of its rate); they differ between machines and BLAS kernels,
  // so kronpe.ops measures them on first use and sets them with set_mode_layout_penalty.
  double layout_penalty[5] = {0.85, 0.45, 0.0, 0.3, 0.85};
  // When set, replaces the penalties: how many times longer than the fastest of the four
  // layouts a GEMM of layout `kind` takes (>= 1) when an (m x k) matrix meets a buffer with
  // `rest` columns (Batched: one matrix of the batch, read as FrontKeep). The CPU backend
  // measures these once per shape class (kronpe::set_mode_layout_measured).
  double (*layout_factor)(StepKind kind, index_t m, index_t k, index_t rest, int elem_size) =
      nullptr;
  // A band of steps with penalties of their own (band_penalty instead of layout_penalty): k in
  // [band_k_lo, band_k_hi] and at least band_rest columns of the buffer; none where band_k_hi <
  // band_k_lo. A kernel whose fastest layout changes with k has one (the AVX2 packed GEMM).
  index_t band_k_lo = 1, band_k_hi = 0, band_rest = 0;
  double band_penalty[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
};

// The CPU model of chains on the BLAS (calibrated on a 2-core AVX2 machine with OpenBLAS).
const ModeCostModel& cpu_cost_model();
// The CPU model of chains on kronpe's packed GEMM (kronpe/packed_gemm.h), for its AVX-512
// kernels or (avx2) its AVX2 ones; it shares the measured layout factors
// (set_mode_layout_factor) with cpu_cost_model().
const ModeCostModel& packed_cpu_cost_model(bool avx2 = false);

// The model of a host executor outside the core that runs each program op as one call of
// another library (kronpe.torch's: torch.mm / torch.bmm / copy_ from Python): a strided batch is
// one call, and every call costs a few microseconds of dispatch.
const ModeCostModel& library_cost_model();

// Plan a chain. shape/strides: the input tensor (strides in elements, any sign); modes: the
// logical axes contracted, distinct; out_rows: m for each mode; elem_size: 4 or 8;
// any_layout: the result may be left in any dense axis order (no final permuting copy);
// model: the cost model (default: the CPU one).
ModePlan plan_mode_chain(int ndim, const index_t* shape, const index_t* strides, int nmodes,
                         const int* modes, const index_t* out_rows, int elem_size,
                         bool any_layout = false, const ModeCostModel* model = nullptr);

// ---- lowering: a plan as buffer operations, shared by the CPU and CUDA executors -----------
// Buffers: the input tensor, two work buffers of `ChainProgram::workspace` elements each, and
// the destination.
enum class ChainBuffer : int { input = 0, work0 = 1, work1 = 2, output = 3 };

struct ChainOp {
  enum Kind { copy, gemm } kind = copy;
  ChainBuffer src = ChainBuffer::input, dst = ChainBuffer::output;
  // copy: dst[i] = src[i] over a strided box (strides in elements)
  std::vector<index_t> shape, src_strides, dst_strides;
  // gemm, row-major and batched: for b < batch,
  //   C_b (M x N) = op(L) (M x K) op(R) (K x N),   C_b at dst + b * stride_c (row stride ldc),
  // where one of L, R is matrix `matrix` of the chain and the other the buffer at
  // src + b * stride_buffer (row stride ld_buffer).
  int matrix = -1;
  bool matrix_left = true;    // L is the matrix (else R is)
  bool matrix_trans = false;  // the matrix enters as A^T (to be combined with how it is stored)
  bool buffer_trans = false;  // the buffer enters transposed
  index_t M = 0, N = 0, K = 0, ld_buffer = 0, ldc = 0, batch = 1, stride_buffer = 0, stride_c = 0;
};

struct ChainProgram {
  std::vector<ChainOp> ops;
  index_t workspace = 0;       // elements of each work buffer
  std::vector<int> out_order;  // physical order of the result's axes, outermost first
  index_t in_size = 0, out_size = 0;
};

// The program of a chain: planned with `model` (cached per thread: plans depend on sizes,
// strides, modes and the model only), then lowered. in_size == 0 or out_size == 0 give no ops
// (the executor zero-fills a non-empty output); no modes give one copy into the destination.
// any_layout as in plan_mode_chain (out_order then tells the layout written).
ChainProgram mode_chain_program(int ndim, const index_t* shape, const index_t* strides,
                                int nmodes, const int* modes, const index_t* out_rows,
                                int elem_size, bool any_layout, const ModeCostModel& model);

// Forgets the calling thread's cached programs (the next chains are planned anew).
void mode_chain_programs_clear();

// How a matrix operand (rows x cols, element strides) can be read by a row-major GEMM without a
// copy: as stored (ld = row stride), as the transposed matrix (ld = column stride), or not.
struct OperandLayout {
  bool in_place;
  bool stored_transposed;  // the memory holds A^T (cols x rows), row-major with row stride ld
  index_t ld;
};
OperandLayout operand_layout(index_t rows, index_t cols, index_t row_stride, index_t col_stride);

// The result's shape: `shape` with shape[modes[j]] replaced by rows[j]. Checks that the modes are
// distinct axes and that cols[j] == shape[modes[j]] (ArgumentError naming matrices[j] if not).
std::vector<index_t> mode_chain_shape(int ndim, const index_t* shape, int nmodes, const int* modes,
                                      const index_t* rows, const index_t* cols);

// The axes of a strided copy, for copy kernels: extents > 1 with their source and destination
// strides, sorted by |destination stride| (outermost first), neighbours contiguous in both arrays
// merged. False (and no axes) when the box is empty; no axes for a single element.
struct CopyDim {
  index_t n, s, d;
};
bool copy_dims(int ndim, const index_t* shape, const index_t* src_strides,
               const index_t* dst_strides, std::vector<CopyDim>& dims);

// Replace the CPU planner's cost model (for tuning): GEMM flop rate (float32), the
// half-efficiency extent, the fixed cost of one GEMM call (seconds) and of copying one float32
// element (seconds).
void set_mode_cost_model(double rate_f32, double half, double call, double copy_f32);
// Replace the CPU model's layout penalties (5 values in StepKind order, each >= 0). Plans are
// deterministic for given penalties: every thread's cached programs are dropped.
void set_mode_layout_penalty(const double* penalty);
// Install (or, with nullptr, remove) the CPU model's measured layout factors (see
// ModeCostModel::layout_factor); every thread's cached programs are dropped.
void set_mode_layout_factor(double (*factor)(StepKind, index_t, index_t, index_t, int));

// Scratch of an executor: pieces aligned to kChainAlign bytes (the base too).
constexpr std::size_t kChainAlign = 256;
inline std::size_t chain_aligned(std::size_t bytes) {
  return (bytes + kChainAlign - 1) / kChainAlign * kChainAlign;
}

// The work buffer (0 or 1) that may live in the destination, or -1: one whose ops never pair it
// with the destination (no op reads one and writes the other) when a work buffer is no larger
// than the destination. The chain then needs one work buffer, not two (a 64 MB square chain:
// 64 MB of scratch instead of 128 MB, which a CPU executor keeps between calls).
int chain_work_in_output(const ChainProgram& prog);

// Bytes of scratch that running `prog` takes (kronpe/mode_product_exec.h): its work buffers
// (one of them in the destination where chain_work_in_output allows)
// and a dense row-major copy of every matrix a GEMM cannot read in place. rows/cols: the
// matrices' extents; mat_strides: 2 per matrix (row, column), as in MatrixRef.
std::size_t chain_workspace_bytes(const ChainProgram& prog, int nmodes, const index_t* rows,
                                  const index_t* cols, const index_t* mat_strides, int elem_size);

}  // namespace kronpe
