// The packed GEMM of the CPU chains (kronpe/packed_gemm.h): dispatch, and the vector traits of
// the AVX-512 and AVX2 kernels; packing, blocking and the micro-kernels are packed_gemm_body.h,
// compiled once for each.
#include "kronpe/simd.h"
#include "kronpe/packed_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>

#include "kronpe/avx512.h"
#include "kronpe/blas.h"
#include "kronpe/threads.h"

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif


namespace kronpe {

#if KRONPE_AVX512
bool cpu_has_avx512(bool full) {
  static const bool f = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  static const bool all = f && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  if (simd_cap() < 2) return false;  // KRONPE_SIMD=avx2|generic (kronpe/simd.h)
  return full ? all : f;
}
#endif

namespace {

// Vec<T>::in_place_panels for a kernel that reads A in place whatever B's width
constexpr index_t kAnyPanels = index_t(1) << 40;

std::atomic<int> g_chain_gemm{int(ChainGemm::automatic)};
std::atomic<int> g_active_calls{0};  // packed_gemm calls running now
std::atomic<long long> g_in_place_panels{-1};

// Scratch for packed operands, one per thread, kept between calls (64-byte aligned).
struct PackBuffer {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data;
  std::size_t bytes = 0;
  void* get(std::size_t need) {
    if (need > bytes) {
      data.reset();
      need = (need + 4095) / 4096 * 4096;
      data.reset(std::aligned_alloc(64, need));
      if (!data) throw BackendError("packed gemm: out of memory for packing buffers");
      bytes = need;
    }
    return data.get();
  }
};

thread_local PackBuffer t_big;    // a block of the large operand (per thread)
thread_local PackBuffer t_small;  // the small operand, packed whole (the calling thread's)

// The kernels the packed GEMM runs here: 2 the AVX-512 ones (F, DQ, BW, VL), 1 the AVX2 and FMA
// ones, 0 none (another CPU or compiler); KRONPE_SIMD lowers it (kronpe/simd.h).
int packed_isa() {
#if KRONPE_AVX512
  static const int isa = [] {
    const int level = simd_level();
    if (level >= 2) return 2;
    __builtin_cpu_init();
    return level == 1 && __builtin_cpu_supports("fma") ? 1 : 0;
  }();
  return isa;
#else
  return 0;
#endif
}

constexpr const char* kNeeds = "an x86-64 CPU with AVX2 and FMA, or AVX-512 (F, DQ, BW, VL)";

}  // namespace

void set_chain_gemm(ChainGemm which) {
  if (which == ChainGemm::packed && !packed_gemm_supported())
    throw ArgumentError(std::string("the packed GEMM needs ") + kNeeds);
  g_chain_gemm.store(int(which));
}

ChainGemm chain_gemm_setting() { return ChainGemm(g_chain_gemm.load()); }

void set_in_place_panels(long long n) {
  require(n >= -1, "in-place panels must be -1 (each kernel's own) or a count >= 0");
  g_in_place_panels.store(n);
}

long long in_place_panels_setting() { return g_in_place_panels.load(); }

bool packed_gemm_supported() { return packed_isa() > 0; }

int packed_gemm_isa() { return packed_isa(); }

bool chain_uses_packed_gemm() {
  const ChainGemm w = chain_gemm_setting();
  return w == ChainGemm::packed || (w == ChainGemm::automatic && packed_gemm_supported());
}

#if KRONPE_AVX512
// ---- The kernels, one region per instruction set: its vector traits and kernel shape (kMR rows x
// kNV vectors), then the algorithm (packed_gemm_body.h). Each runs only after packed_isa() chose
// it. ----
namespace {

// AVX-512: 12 x 2 vectors (24 accumulators, 2 panel loads and 12 broadcasts per step of k).
KRONPE_AVX512_BEGIN("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2")
namespace avx512 {

// the 64-bit halves of a and b, interleaved per 128-bit lane (low halves, high halves)
inline __m512 lo64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 hi64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// ROWS x 16 floats transposed (ROWS <= 16): rows rs floats apart (row r of the block at src + r * rs,
// its 16 values contiguous) to dst[j * ds + r] (j = 0..15, r < ROWS): three rounds of in-lane and
// across-lane shuffles, ROWS loads and 16 stores (masked to ROWS lanes when ROWS < 16).
template <int ROWS>
inline void transpose16(const float* src, index_t rs, float* dst, index_t ds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < ROWS ? _mm512_loadu_ps(src + i * rs) : _mm512_setzero_ps();
  for (int i = 0; i < 16; i += 2) {  // lane k: [a(4k), b(4k), a(4k+1), b(4k+1)], [... 4k+2, 4k+3]
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // r[i + q], lane k: column 4k + q of rows i..i+3
    r[i] = lo64(t[i], t[i + 2]);
    r[i + 1] = hi64(t[i], t[i + 2]);
    r[i + 2] = lo64(t[i + 1], t[i + 3]);
    r[i + 3] = hi64(t[i + 1], t[i + 3]);
  }
  const __mmask16 m = ROWS >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << ROWS) - 1);
  auto put = [&](index_t j, __m512 v) {
    if constexpr (ROWS >= 16)
      _mm512_storeu_ps(dst + j * ds, v);
    else
      _mm512_mask_storeu_ps(dst + j * ds, m, v);
  };
  for (int q = 0; q < 4; ++q) {  // column 4k + q: lane k of r[q], r[4 + q], r[8 + q], r[12 + q]
    const __m512 v0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), w0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xdd);
    const __m512 v1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88),
                 w1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xdd);
    put(q, _mm512_shuffle_f32x4(v0, v1, 0x88));
    put(4 + q, _mm512_shuffle_f32x4(w0, w1, 0x88));
    put(8 + q, _mm512_shuffle_f32x4(v0, v1, 0xdd));
    put(12 + q, _mm512_shuffle_f32x4(w0, w1, 0xdd));
  }
}

// ROWS x 8 doubles transposed (ROWS = 4 or 8; as transpose16): pairs of rows interleaved per
// 128-bit lane, then lanes gathered across registers in two rounds; ROWS loads and 8 stores
// (masked to ROWS lanes when ROWS < 8).
template <int ROWS>
inline void transpose8d(const double* src, index_t rs, double* dst, index_t ds) {
  static_assert(ROWS == 8 || ROWS == 4, "transpose8d: 4 or 8 rows");
  __m512d r[8], lo[4], hi[4];
  for (int i = 0; i < 8; ++i) r[i] = i < ROWS ? _mm512_loadu_pd(src + i * rs) : _mm512_setzero_pd();
  for (int k = 0; k < 4; ++k) {  // lane q: rows 2k, 2k + 1 at column 2q (lo) and 2q + 1 (hi)
    lo[k] = _mm512_unpacklo_pd(r[2 * k], r[2 * k + 1]);
    hi[k] = _mm512_unpackhi_pd(r[2 * k], r[2 * k + 1]);
  }
  const __mmask8 m = ROWS >= 8 ? __mmask8(0xFF) : __mmask8((1u << ROWS) - 1);
  auto put = [&](int j, __m512d v) {
    if constexpr (ROWS >= 8)
      _mm512_storeu_pd(dst + j * ds, v);
    else
      _mm512_mask_storeu_pd(dst + j * ds, m, v);
  };
  for (int odd = 0; odd < 2; ++odd) {
    const __m512d* x = odd ? hi : lo;
    // rows 0..3 and 4..7: columns 4c + odd (0x88) and 4c + 2 + odd (0xdd) in lanes (c, c + 1)
    const __m512d a0 = _mm512_shuffle_f64x2(x[0], x[1], 0x88), a1 = _mm512_shuffle_f64x2(x[0], x[1], 0xdd);
    const __m512d b0 = _mm512_shuffle_f64x2(x[2], x[3], 0x88), b1 = _mm512_shuffle_f64x2(x[2], x[3], 0xdd);
    put(odd, _mm512_shuffle_f64x2(a0, b0, 0x88));
    put(4 + odd, _mm512_shuffle_f64x2(a0, b0, 0xdd));
    put(2 + odd, _mm512_shuffle_f64x2(a1, b1, 0x88));
    put(6 + odd, _mm512_shuffle_f64x2(a1, b1, 0xdd));
  }
}

// 256-bit vectors with AVX-512VL's lane masks: the Half of the 512-bit traits below.
struct HalfFloat {
  using reg = __m256;
  using mask = __mmask8;
  static constexpr int W = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg bcast(const float* p) { return _mm256_set1_ps(*p); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, reg v) { _mm256_stream_ps(p, v); }
  static reg mload(const float* p, mask m) { return _mm256_maskz_loadu_ps(m, p); }
  static void mstore(float* p, mask m, reg v) { _mm256_mask_storeu_ps(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static mask first(int n) { return n <= 0 ? mask(0) : n >= W ? mask(0xFF) : mask((1u << n) - 1); }
};

struct HalfDouble {
  using reg = __m256d;
  using mask = __mmask8;
  static constexpr int W = 4;
  static reg zero() { return _mm256_setzero_pd(); }
  static reg bcast(const double* p) { return _mm256_set1_pd(*p); }
  static reg load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, reg v) { _mm256_storeu_pd(p, v); }
  static void stream(double* p, reg v) { _mm256_stream_pd(p, v); }
  static reg mload(const double* p, mask m) { return _mm256_maskz_loadu_pd(m, p); }
  static void mstore(double* p, mask m, reg v) { _mm256_mask_storeu_pd(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  static mask first(int n) { return n <= 0 ? mask(0) : n >= W ? mask(0xF) : mask((1u << n) - 1); }
};

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  using reg = __m512;
  using Half = HalfFloat;
  using mask = __mmask16;
  static constexpr int W = 16, TB = 16;
  static constexpr index_t in_place_panels = kAnyPanels;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, reg v) { _mm512_stream_ps(p, v); }
  static reg mload(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void mstore(float* p, mask m, reg v) { _mm512_mask_storeu_ps(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static mask first(int n) {
    return n <= 0 ? mask(0) : n >= W ? mask(0xFFFF) : mask((1u << n) - 1);
  }
  template <int ROWS>
  static void transpose(const float* src, index_t rs, float* dst, index_t ds) {
    transpose16<ROWS>(src, rs, dst, ds);
  }
};

template <>
struct Vec<double> {
  using reg = __m512d;
  using Half = HalfDouble;
  using mask = __mmask8;
  static constexpr int W = 8, TB = 8;
  static constexpr index_t in_place_panels = kAnyPanels;
  static reg zero() { return _mm512_setzero_pd(); }
  static reg bcast(const double* p) { return _mm512_set1_pd(*p); }
  static reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, reg v) { _mm512_storeu_pd(p, v); }
  static void stream(double* p, reg v) { _mm512_stream_pd(p, v); }
  static reg mload(const double* p, mask m) { return _mm512_maskz_loadu_pd(m, p); }
  static void mstore(double* p, mask m, reg v) { _mm512_mask_storeu_pd(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static mask first(int n) {
    return n <= 0 ? mask(0) : n >= W ? mask(0xFF) : mask((1u << n) - 1);
  }
  template <int ROWS>
  static void transpose(const double* src, index_t rs, double* dst, index_t ds) {
    transpose8d<ROWS>(src, rs, dst, ds);
  }
};

constexpr int kMR = 12, kNV = 2;
#include "packed_gemm_body.h"

}  // namespace avx512
KRONPE_AVX512_END

// AVX2 and FMA: 6 x 2 vectors (6 rows x 16 floats or 8 doubles: 12 accumulators, 2 panel loads
// and a broadcast, 15 of the 16 ymm registers). Partial tiles load and store through lane masks.
KRONPE_AVX512_BEGIN("avx2,fma")
namespace avx2 {

// ROWS x 8 floats transposed (as transpose16 above, ROWS <= 8): in-lane unpacks and shuffles,
// then the 128-bit halves swapped across registers; ROWS loads and 8 stores. Short rows (ROWS < 8)
// need ds == ROWS: the columns are stored in order, each with whole vectors whose lanes past ROWS
// land where the next column goes and are overwritten by it, and the last one with its ROWS lanes
// only (AVX2's masked stores are microcoded on AMD's cores: a 128-bit and a 64-bit store).
template <int ROWS>
inline void transpose8(const float* src, index_t rs, float* dst, index_t ds) {
  static_assert(ROWS == 8 || ROWS == 6 || ROWS == 4, "transpose8: 4, 6 or 8 rows");
  __m256 r[8], t[8], o[8];
  for (int i = 0; i < 8; ++i) r[i] = i < ROWS ? _mm256_loadu_ps(src + i * rs) : _mm256_setzero_ps();
  for (int i = 0; i < 8; i += 2) {  // half h: [a(4h), b(4h), a(4h+1), b(4h+1)], [... 4h+2, 4h+3]
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // r[i + q], half h: column 4h + q of rows i..i+3
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int q = 0; q < 4; ++q) {  // column q: low halves of rows 0..3 and 4..7; column 4 + q: high
    o[q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x20);
    o[4 + q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x31);
  }
  for (int j = 0; j < 7; ++j) _mm256_storeu_ps(dst + j * ds, o[j]);
  if constexpr (ROWS == 8) {
    _mm256_storeu_ps(dst + 7 * ds, o[7]);
  } else {
    _mm_storeu_ps(dst + 7 * ds, _mm256_castps256_ps128(o[7]));
    if constexpr (ROWS == 6) _mm_storel_pi(reinterpret_cast<__m64*>(dst + 7 * ds + 4), _mm256_extractf128_ps(o[7], 1));
  }
}

// ROWS x 4 doubles transposed (ROWS = 2 or 4): pairs of rows interleaved per 128-bit half, then
// the halves gathered; ROWS loads and 4 stores (of two doubles when ROWS = 2).
template <int ROWS>
inline void transpose4d(const double* src, index_t rs, double* dst, index_t ds) {
  static_assert(ROWS == 4 || ROWS == 2, "transpose4d: 2 or 4 rows");
  __m256d r[4];
  for (int i = 0; i < 4; ++i) r[i] = i < ROWS ? _mm256_loadu_pd(src + i * rs) : _mm256_setzero_pd();
  // half h: rows 0, 1 (t0, t1) and 2, 3 (t2, t3) at column 2h (t0, t2) and 2h + 1 (t1, t3)
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  if constexpr (ROWS == 4) {
    _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(dst + ds, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(dst + 2 * ds, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(dst + 3 * ds, _mm256_permute2f128_pd(t1, t3, 0x31));
  } else {
    _mm_storeu_pd(dst, _mm256_castpd256_pd128(t0));
    _mm_storeu_pd(dst + ds, _mm256_castpd256_pd128(t1));
    _mm_storeu_pd(dst + 2 * ds, _mm256_extractf128_pd(t0, 1));
    _mm_storeu_pd(dst + 3 * ds, _mm256_extractf128_pd(t1, 1));
  }
}

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  using reg = __m256;
  using mask = __m256i;  // a lane is stored where its sign bit is set
  static constexpr int W = 8, TB = 8;
  // A sliver's row of k, 6 floats, gets 12 FMAs per pass: read in place by more than 4 panels
  // it costs more than the pack pass. One thread, against packing: 65536 x 96 x 96 1.4x slower
  // in place, 16384 x 128 x 128 1.05x; 65536 x 64 x 64 (4 panels) 0.85x.
  static constexpr index_t in_place_panels = 4;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg bcast(const float* p) { return _mm256_set1_ps(*p); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, reg v) { _mm256_stream_ps(p, v); }
  static reg mload(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
  static void mstore(float* p, mask m, reg v) { _mm256_maskstore_ps(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static mask first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  template <int ROWS>
  static void transpose(const float* src, index_t rs, float* dst, index_t ds) {
    transpose8<ROWS>(src, rs, dst, ds);
  }
};

template <>
struct Vec<double> {
  using reg = __m256d;
  using mask = __m256i;
  static constexpr int W = 4, TB = 4;
  // A sliver's row of k, 6 doubles (48 bytes), straddles cache lines every other sliver: read in
  // place it left a 65536 x 64 x 64 float64 product with A transposed 1.4x slower than packed.
  static constexpr index_t in_place_panels = 0;
  static reg zero() { return _mm256_setzero_pd(); }
  static reg bcast(const double* p) { return _mm256_set1_pd(*p); }
  static reg load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, reg v) { _mm256_storeu_pd(p, v); }
  static void stream(double* p, reg v) { _mm256_stream_pd(p, v); }
  static reg mload(const double* p, mask m) { return _mm256_maskload_pd(p, m); }
  static void mstore(double* p, mask m, reg v) { _mm256_maskstore_pd(p, m, v); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  static mask first(int n) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  template <int ROWS>
  static void transpose(const double* src, index_t rs, double* dst, index_t ds) {
    transpose4d<ROWS>(src, rs, dst, ds);
  }
};

constexpr int kMR = 6, kNV = 2;
#include "packed_gemm_body.h"

}  // namespace avx2
KRONPE_AVX512_END

}  // namespace
#endif  // KRONPE_AVX512


template <typename T>
void packed_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                 index_t lda, const T* b, index_t ldb, T* c, index_t ldc, int threads) {
  if (!packed_gemm_supported())
    throw BackendError(std::string("kronpe: the packed GEMM needs ") + kNeeds);
  require(m >= 0 && n >= 0 && k >= 0, "packed gemm: negative extent");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (index_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  int nt = threads > 0 ? std::min(checked_threads(threads), kMaxThreads) : kernel_threads();
  // Calls that overlap (chains on several user threads, e.g. dask's) run on one thread each
  // rather than a team each on the same cores.
  struct Active {
    int before = g_active_calls.fetch_add(1);
    ~Active() { g_active_calls.fetch_sub(1); }
  } active;
  if (active.before > 0) nt = 1;
#if KRONPE_AVX512
  const index_t rsa = trans_a ? 1 : lda, csa = trans_a ? lda : 1;
  const index_t rsb = trans_b ? 1 : ldb, csb = trans_b ? ldb : 1;
  if (packed_isa() == 2)
    avx512::packed_gemm_impl<T, avx512::kMR, avx512::kNV>(m, n, k, a, rsa, csa, b, rsb, csb, c, ldc, nt);
  else
    avx2::packed_gemm_impl<T, avx2::kMR, avx2::kNV>(m, n, k, a, rsa, csa, b, rsb, csb, c, ldc, nt);
#else
  (void)nt, (void)a, (void)lda, (void)b, (void)ldb, (void)trans_a, (void)trans_b;
#endif
}

template <typename T>
void packed_gemm_blocks(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                        index_t lda, const T* b, index_t ldb, T* c, index_t ldc, const index_t* blocks,
                        index_t nblocks, int threads) {
  if (!packed_gemm_supported())
    throw BackendError(std::string("kronpe: the packed GEMM needs ") + kNeeds);
  require(m >= 0 && n >= 0 && k >= 0 && nblocks >= 0, "packed gemm blocks: negative extent");
  index_t macs = 0, rows = 0;
  for (index_t q = 0; q < nblocks; ++q) {
    const index_t* bl = blocks + 4 * q;
    require(bl[0] >= rows && bl[0] <= bl[1] && bl[1] <= m && bl[2] >= 0 && bl[2] <= bl[3] && bl[3] <= k,
            "blocks must be row ranges in order, apart, within c's rows, with column windows within a's "
            "columns (r0 <= r1 <= next r0, 0 <= c0 <= c1 <= k)");
    rows = bl[1];
    macs = saturating_mul(saturating_mul(bl[1] - bl[0], bl[3] - bl[2]), n) + macs;
  }
  if (n == 0 || nblocks == 0) return;
  int nt = threads > 0 ? std::min(checked_threads(threads), kMaxThreads) : kernel_threads();
  nt = int(std::min<index_t>(nt, std::max<index_t>(1, index_t(2.0 * double(macs) / kPackedFlopsPerThread))));
  // tasks: each block's rows times a run of columns, enough of them for a dynamic schedule to even
  // out (about four per thread); every task is one single-threaded packed GEMM
  const index_t per_block = nt > 1 ? std::max<index_t>(1, (4 * nt + nblocks - 1) / nblocks) : 1;
  const index_t width = std::max<index_t>(64, ((n + per_block - 1) / per_block + 63) / 64 * 64);
  const index_t chunks = (n + width - 1) / width, tasks = nblocks * chunks;
  auto task = [&](index_t t) {
    const index_t* bl = blocks + 4 * (t / chunks);
    const index_t j0 = t % chunks * width, w = std::min(width, n - j0);
    const index_t r0 = bl[0], h = bl[1] - bl[0], c0 = bl[2], kk = bl[3] - bl[2];
    if (h == 0) return;
    T* ct = c + r0 * ldc + j0;
    if (kk == 0) {
      for (index_t i = 0; i < h; ++i) std::fill(ct + i * ldc, ct + i * ldc + w, T(0));
      return;
    }
    const T* at = trans_a ? a + c0 * lda + r0 : a + r0 * lda + c0;
    const T* bt = trans_b ? b + j0 * ldb + c0 : b + c0 * ldb + j0;
    packed_gemm<T>(trans_a, trans_b, h, w, kk, at, lda, bt, ldb, ct, ldc, 1);
  };
#ifdef KRONPE_OPENMP
  if (nt > 1 && tasks > 1) {
    const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
    {
      clock.started();
#pragma omp for schedule(dynamic, 1)
      for (index_t t = 0; t < tasks; ++t) task(t);
      clock.finished();
    }
    return;
  }
#endif
  for (index_t t = 0; t < tasks; ++t) task(t);
}

template <typename T>
void chain_gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, const T* a,
                index_t lda, const T* b, index_t ldb, T* c, index_t ldc) {
  if (chain_uses_packed_gemm())
    packed_gemm<T>(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, 0);
  else
    gemm<T>(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
}

#define KRONPE_PACKED_GEMM_INSTANTIATE(T)                                                      \
  template void packed_gemm<T>(bool, bool, index_t, index_t, index_t, const T*, index_t,      \
                               const T*, index_t, T*, index_t, int);                          \
  template void chain_gemm<T>(bool, bool, index_t, index_t, index_t, const T*, index_t,       \
                              const T*, index_t, T*, index_t);                                \
  template void packed_gemm_blocks<T>(bool, bool, index_t, index_t, index_t, const T*, index_t, \
                                      const T*, index_t, T*, index_t, const index_t*, index_t, int);
KRONPE_PACKED_GEMM_INSTANTIATE(float)
KRONPE_PACKED_GEMM_INSTANTIATE(double)
#undef KRONPE_PACKED_GEMM_INSTANTIATE

}  // namespace kronpe
