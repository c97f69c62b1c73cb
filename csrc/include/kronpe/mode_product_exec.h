// kronpe C++ core: the one executor of mode-product chains, for every backend. The chain is
// planned and lowered by the shared planner (kronpe/mode_product_plan.h) with the backend's cost
// model, then its ChainProgram runs on the backend:
//
//   struct Backend {
//     const ModeCostModel& model() const;     // the planner's cost model for this backend
//     void start();                           // once, before the first operation below
//     void zero(T* dst, index_t n);           // dst[0..n) = 0
//     unsigned char* scratch(std::size_t);    // memory for the call, kChainAlign-aligned
//     void copy(int ndim, const index_t* shape, const T* src, const index_t* src_strides,
//               T* dst, const index_t* dst_strides);              // strided copy
//     void gemm(bool ta, bool tb, index_t M, index_t N, index_t K,   // row-major, batched:
//               const T* a, index_t lda, index_t stride_a,           // C_b = op(A_b) op(B_b)
//               const T* b, index_t ldb, index_t stride_b,
//               T* c, index_t ldc, index_t stride_c, index_t batch);
//     template <typename F>                   // the program's ops, in order: step(b, op) runs
//     void run_ops(const ChainProgram&, F&&); //   op on backend b (this one, or a part of it)
//   };
//
// The CPU backend (csrc/cpu/mode_product.cpp) runs kronpe::gemm and a cache-blocked copy on a
// per-thread workspace; the CUDA backend (csrc/cuda/mode_product.cu) runs cuBLAS and copy kernels
// on the caller's stream and scratch memory. Host-only code: it enqueues, it never touches data.
#pragma once
#include <cstddef>
#include <vector>

#include "kronpe/common.h"
#include "kronpe/mode_product_plan.h"

namespace kronpe {

// dst = src x_{modes[0]} mats[0] ... on `backend` (see kronpe/mode_product.h for the contract).
template <typename T, typename Backend>
void run_mode_chain(Backend& backend, int ndim, const index_t* shape, const T* src,
                    const index_t* src_strides, int nmodes, const int* modes,
                    const MatrixRef<T>* mats, T* dst, int* out_order) {
  require(nmodes >= 0, "mode product: negative number of modes");
  const size_t k = static_cast<size_t>(nmodes);
  std::vector<index_t> rows(k), cols(k), mstrides(2 * k);
  for (size_t j = 0; j < k; ++j) {
    rows[j] = mats[j].rows;
    cols[j] = mats[j].cols;
    mstrides[2 * j] = mats[j].row_stride;
    mstrides[2 * j + 1] = mats[j].col_stride;
  }
  mode_chain_shape(ndim, shape, nmodes, modes, rows.data(), cols.data());  // checks
  const ChainProgram prog =
      mode_chain_program(ndim, shape, src_strides, nmodes, modes, rows.data(), int(sizeof(T)),
                         out_order != nullptr, backend.model());
  if (out_order)
    for (int i = 0; i < ndim; ++i) out_order[i] = prog.out_order[size_t(i)];
  if (prog.out_size == 0) return;
  backend.start();
  if (prog.in_size == 0) {  // sums over empty axes
    backend.zero(dst, prog.out_size);
    return;
  }
  unsigned char* scratch = backend.scratch(chain_workspace_bytes(
      prog, nmodes, rows.data(), cols.data(), mstrides.data(), int(sizeof(T))));
  auto take = [&scratch](std::size_t count) {
    T* p = reinterpret_cast<T*>(scratch);
    scratch += chain_aligned(count * sizeof(T));
    return p;
  };
  T* work[2] = {nullptr, nullptr};
  if (prog.workspace > 0) {
    // a work buffer never paired with the destination in one op may live there
    const int in_output = chain_work_in_output(prog);
    work[0] = in_output == 0 ? dst : take(size_t(prog.workspace));
    work[1] = in_output == 1 ? dst : take(size_t(prog.workspace));
  }
  // matrices: read in place when a GEMM can, else a dense row-major copy
  std::vector<OperandLayout> lay(k);
  std::vector<const T*> mdata(k);
  for (size_t j = 0; j < k; ++j) {
    const MatrixRef<T>& a = mats[j];
    lay[j] = operand_layout(a.rows, a.cols, a.row_stride, a.col_stride);
    mdata[j] = a.data;
    if (!lay[j].in_place) {
      T* c = take(size_t(a.rows * a.cols));
      const index_t shp[2] = {a.rows, a.cols}, ss[2] = {a.row_stride, a.col_stride},
                    ds[2] = {a.cols, 1};
      backend.copy(2, shp, a.data, ss, c, ds);
      mdata[j] = c;
    }
  }
  auto pointer = [&](ChainBuffer b) -> T* {
    switch (b) {
      case ChainBuffer::input: return const_cast<T*>(src);  // only ever read
      case ChainBuffer::work0: return work[0];
      case ChainBuffer::work1: return work[1];
      default: return dst;
    }
  };
  backend.run_ops(prog, [&](Backend& be, const ChainOp& op) {
    const T* x = pointer(op.src);
    T* y = pointer(op.dst);
    if (op.kind == ChainOp::copy) {
      be.copy(int(op.shape.size()), op.shape.data(), x, op.src_strides.data(), y,
              op.dst_strides.data());
      return;
    }
    const OperandLayout& A = lay[size_t(op.matrix)];
    const bool ta = op.matrix_trans != A.stored_transposed;
    const T* a = mdata[size_t(op.matrix)];
    if (op.matrix_left)
      be.gemm(ta, op.buffer_trans, op.M, op.N, op.K, a, A.ld, 0, x, op.ld_buffer,
              op.stride_buffer, y, op.ldc, op.stride_c, op.batch);
    else
      be.gemm(op.buffer_trans, ta, op.M, op.N, op.K, x, op.ld_buffer, op.stride_buffer, a,
              A.ld, 0, y, op.ldc, op.stride_c, op.batch);
  });
}

}  // namespace kronpe
