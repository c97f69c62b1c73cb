// kronpe C++ core: a packed GEMM of kronpe's own for the mode-product chains on x86-64 CPUs with
// AVX-512 or AVX2 and FMA (csrc/cpu/packed_gemm.cpp).
//
// Why: the BLAS kronpe calls (SciPy's OpenBLAS) may run kernels below the machine's vector width
// (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU: AVX2 kernels at half the FMA width), and the
// chains' GEMMs are skinny (one side is a small matrix, the other the whole tensor). The packed
// GEMM follows the BLIS design: the small operand is packed once into micro-panels, the tensor
// operand block by block into slivers (any strides: transposed operands cost no extra pass), and
// a register-blocked micro-kernel of vector FMAs multiplies a sliver by a panel into a tile of C
// held in registers. Tiles of C belong to one thread each and are summed in a fixed order, so
// results do not depend on the thread count.
//
// The algorithm is written once (csrc/cpu/packed_gemm_body.h) and compiled for every x86-64 build
// twice, with function-level target attributes: 512-bit kernels (12 rows x 2 vectors) that run
// where the CPU reports AVX-512F/DQ/BW/VL, and 256-bit ones (6 rows x 2 vectors) where it reports
// AVX2 and FMA only, or KRONPE_SIMD=avx2 caps it there (kronpe/simd.h). Both give the same bits:
// every element of C gets the same FMAs in the same order (the same k blocks), whatever the tile.
// Elsewhere (KRONPE_SIMD=generic, other CPUs) the chains call kronpe::gemm.
#pragma once
#include "kronpe/common.h"

namespace kronpe {

// Which GEMM the CPU mode-product chain runs: `automatic` (the packed one where the CPU
// supports it, else the BLAS), `blas` (always kronpe::gemm) or `packed` (always the packed one;
// an error where unsupported). For tests and measurements; the default is automatic.
enum class ChainGemm { automatic = 0, blas = 1, packed = 2 };
void set_chain_gemm(ChainGemm which);
ChainGemm chain_gemm_setting();
// Whether the chains run the packed GEMM now (the setting resolved on this CPU).
bool chain_uses_packed_gemm();

// Whether this build and CPU can run the packed GEMM.
bool packed_gemm_supported();
// The packed GEMM's kernels here: 2 the AVX-512 ones, 1 AVX2 and FMA, 0 none (KRONPE_SIMD caps it).
int packed_gemm_isa();

// Up to how many panels of B (of the kernel's width) an A with contiguous columns is read in
// place rather than packed: n >= 0 for every kernel, or -1 (the default) for each kernel's own
// limit. For measurements on other CPUs; the bits of C do not depend on it.
void set_in_place_panels(long long n);
long long in_place_panels_setting();

// The flops per thread of a packed GEMM's team: a product of f flops runs on at most
// max(1, f / kPackedFlopsPerThread) threads (below that a team costs more than it saves).
constexpr double kPackedFlopsPerThread = 4e6;

// Row-major C (m x n, row stride ldc) = op(A) (m x k) op(B) (k x n); lda/ldb are the row
// strides of A and B as stored (before op). C must not overlap A or B. Runs on up to `threads`
// OpenMP threads (fewer for small products, one while another call runs; 0: kronpe's
// default). BackendError where packed_gemm_supported() is false.
template <typename T>
void packed_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                 index_t lda, const T* b, index_t ldb, T* c, index_t ldc, int threads = 0);

// The product of a block-banded op(A) (m x k) and op(B) (k x n) into C (m x n): for each block
// (r0, r1, c0, c1) of `blocks` (nblocks x 4, row ranges in order and apart), C[r0:r1, :] =
// op(A)[r0:r1, c0:c1] op(B)[c0:c1, :] (zero where c0 == c1); A's entries outside the windows are
// taken as zero and rows of C outside every block are left alone. One team for the whole product:
// each task (a block's rows times a run of C's columns) is a single-threaded packed GEMM, so a
// matrix of many small blocks pays one team's start, not one per block. Same support as
// packed_gemm; results do not depend on the thread count.
template <typename T>
void packed_gemm_blocks(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                        index_t lda, const T* b, index_t ldb, T* c, index_t ldc, const index_t* blocks,
                        index_t nblocks, int threads = 0);

// The GEMM of the CPU chains: packed_gemm where chain_uses_packed_gemm(), else kronpe::gemm
// (alpha 1, beta 0).
template <typename T>
void chain_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                index_t lda, const T* b, index_t ldb, T* c, index_t ldc);

}  // namespace kronpe
