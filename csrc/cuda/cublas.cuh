// cuBLAS, loaded at run time (see kronpe/cuda.h): the few entry points kronpe uses, a handle per
// (device, stream), and a row-major strided-batched GEMM on top of the column-major API.
#pragma once
#include <cublas_api.h>

#include "common.cuh"

namespace kronpe::cuda::detail {

struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasGetProperty) get_property = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  decltype(&::cublasGemmStridedBatchedEx_64) gemm_strided_batched = nullptr;
};

// The loaded library (loads it on first use); BackendError saying why when it cannot be loaded.
const CublasApi& cublas();

// A handle for the current device and `stream`, created on first use and kept (one per device
// and stream, shared by threads, so that concurrent streams never share a cuBLAS workspace); a
// stream under CUDA graph capture gets one made ahead (BackendError if none is ready).
cublasHandle_t cublas_handle(int device, cudaStream_t stream);

void check_cublas(cublasStatus_t status, const char* what);

// Row-major, strided-batched: for b < batch, C_b (m x n) = op(A_b) (m x k) op(B_b) (k x n),
// X_b = X + b * stride_X; lda/ldb/ldc are row strides of the matrices as stored (before op).
// float32 computes in float32 (TF32 only if allowed), float64 in float64.
template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, index_t m, index_t n, index_t k,
          const T* a, index_t lda, index_t stride_a, const T* b, index_t ldb, index_t stride_b,
          T* c, index_t ldc, index_t stride_c, index_t batch);

}  // namespace kronpe::cuda::detail
