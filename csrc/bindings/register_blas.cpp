// Bindings of the CPU BLAS (kronpe/blas.h): the library's addresses in, a checked row-major GEMM
// on descriptors out (internal, for tests).
#include <algorithm>
#include <cstdint>

#include "common.h"
#include "kronpe/blas.h"
#include "kronpe/packed_gemm.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;

namespace {

// Row stride of a row-major 2-D host matrix whose rows are contiguous and lie apart, in order (a
// row stride of at least a row: a broadcast or reversed view would be read as other memory).
index_t leading(const Array& a, const char* name) {
  bindings::require_host(a, name);
  require(a.ndim() == 2 && a.strides.size() == 2, std::string(name) + " must be 2-D");
  require(a.strides[1] == 1 || a.shape[1] <= 1 || a.shape[0] == 0,
          std::string(name) + " must have contiguous rows");
  require(a.shape[0] <= 1 || a.shape[1] == 0 || a.strides[0] >= a.shape[1],
          std::string(name) + "'s rows must not overlap (a row stride of at least the row length, not reversed)");
  return std::max<index_t>(a.strides[0], std::max<index_t>(a.shape[1], 1));
}

// Whether two row-major matrices of `item`-byte entries (their row strides ld from `leading`)
// share an entry. Exact where both have one row stride (column blocks of one array interleave
// without sharing: both may be used), else whether their spans of memory meet.
bool share(const void* p, const Array& a, index_t lda, const void* q, const Array& b, index_t ldb,
           index_t item) {
  const index_t ar = a.shape[0], ac = a.shape[1], br = b.shape[0], bc = b.shape[1];
  if (ar == 0 || ac == 0 || br == 0 || bc == 0) return false;
  if (!bindings::overlap(p, q, ((ar - 1) * lda + ac) * item, ((br - 1) * ldb + bc) * item)) return false;
  const index_t L = ar == 1 ? ldb : lda;  // (a single row's stride is free)
  const auto diff = std::intptr_t(reinterpret_cast<std::uintptr_t>(q) - reinterpret_cast<std::uintptr_t>(p));
  if ((br > 1 && ldb != L) || L < std::max(ac, bc) || diff % item != 0) return true;
  // b's row k meets a's row i where m = i - k (in [1 - br, ar - 1]) has m L - d in [1 - ac, bc - 1]
  // (d: b's offset in entries); that range is shorter than 2 L, so at most m1 and m1 - 1 qualify
  const index_t d = index_t(diff / item), hi = d + bc - 1;
  const index_t m1 = hi >= 0 ? hi / L : -((-hi + L - 1) / L);  // floor(hi / L)
  for (index_t m : {m1, m1 - 1})
    if (m * L - d >= 1 - ac && m >= 1 - br && m <= ar - 1) return true;
  return false;
}

// Checks c = op(a) op(b) on row-major host matrices of one dtype T, then calls
// run(T{}, m, n, k, a, lda, b, ldb, c, ldc) with the GIL released.
template <typename Run>
void gemm_call(const char* name, const Array& a, const Array& b, const Array& c, bool trans_a,
               bool trans_b, Run run) {
  const index_t lda = leading(a, "a"), ldb = leading(b, "b"), ldc = leading(c, "c");
  const index_t mm = c.shape[0], n = c.shape[1], k = trans_a ? a.shape[0] : a.shape[1];
  require((trans_a ? a.shape[1] : a.shape[0]) == mm && (trans_b ? b.shape[0] : b.shape[1]) == n &&
              (trans_b ? b.shape[1] : b.shape[0]) == k,
          std::string(name) + ": the shapes of a, b and c do not match");
  require(a.dtype == b.dtype && a.dtype == c.dtype,
          std::string(name) + ": a, b and c differ in dtype");
  bindings::dispatch1(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* ap = bindings::data<const T>(a, "a");
    const T* bp = bindings::data<const T>(b, "b");
    T* cp = bindings::data<T>(c, "c");
    const index_t item = index_t(sizeof(T));
    require(!share(cp, c, ldc, ap, a, lda, item),
            std::string(name) + ": c must not overlap a (the product is written while a is read)");
    require(!share(cp, c, ldc, bp, b, ldb, item),
            std::string(name) + ": c must not overlap b (the product is written while b is read)");
    py::gil_scoped_release release;
    run(t, mm, n, k, ap, lda, bp, ldb, cp, ldc);
  });
}

}  // namespace

void register_blas(py::module_& m, py::module_& tuning) {
  // set_blas / set_blas64: two addresses in, checked non-null, handed to `set` as `Fn`s.
  auto setter = [&m](const char* name, auto set, const char* doc) {
    using S = decltype(set);
    m.def(
        name,
        [name, set](std::uintptr_t sgemm, std::uintptr_t dgemm) {
          require(sgemm != 0 && dgemm != 0, std::string(name) + ": null BLAS function address");
          S::apply(sgemm, dgemm);
        },
        py::arg("sgemm"), py::arg("dgemm"), doc);
  };
  struct Lp64 {
    static void apply(std::uintptr_t s, std::uintptr_t d) {
      set_blas(reinterpret_cast<sgemm_fn>(s), reinterpret_cast<dgemm_fn>(d));
    }
  };
  struct Ilp64 {
    static void apply(std::uintptr_t s, std::uintptr_t d) {
      set_blas64(reinterpret_cast<sgemm64_fn>(s), reinterpret_cast<dgemm64_fn>(d));
    }
  };
  setter("set_blas", Lp64{}, "Hand over the addresses of the Fortran BLAS sgemm and dgemm (internal).");
  setter("set_blas64", Ilp64{},
         "Hand over the addresses of an ILP64 Fortran BLAS sgemm and dgemm (64-bit integers; "
         "internal).");
  tuning.def("blas_ready", &blas_ready, "Whether set_blas or set_blas64 was called.");
  tuning.def("blas_int_bits", &blas_int_bits,
        "64 (ILP64 BLAS), 32 (LP64) or 0 (none set): the integers of the BLAS in use.");
  m.def(
      "gemm",
      [](const Array& a, const Array& b, const Array& c, bool trans_a, bool trans_b,
         double alpha, double beta) {
        gemm_call("gemm", a, b, c, trans_a, trans_b,
                  [&](auto t, index_t mm, index_t n, index_t k, const auto* ap, index_t lda,
                      const auto* bp, index_t ldb, auto* cp, index_t ldc) {
                    using T = decltype(t);
                    gemm<T>(trans_a, trans_b, mm, n, k, T(alpha), ap, lda, bp, ldb, T(beta), cp,
                            ldc);
                  });
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("trans_a") = false,
      py::arg("trans_b") = false, py::arg("alpha") = 1.0, py::arg("beta") = 0.0,
      "c = alpha op(a) op(b) + beta c, row-major host matrices (internal).");
  m.def(
      "packed_gemm",
      [](const Array& a, const Array& b, const Array& c, bool trans_a, bool trans_b,
         int threads) {
        gemm_call("packed_gemm", a, b, c, trans_a, trans_b,
                  [&](auto t, index_t mm, index_t n, index_t k, const auto* ap, index_t lda,
                      const auto* bp, index_t ldb, auto* cp, index_t ldc) {
                    using T = decltype(t);
                    packed_gemm<T>(trans_a, trans_b, mm, n, k, ap, lda, bp, ldb, cp, ldc, threads);
                  });
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("trans_a") = false,
      py::arg("trans_b") = false, py::arg("threads") = 0,
      "c = op(a) op(b) with kronpe's packed AVX-512 or AVX2 GEMM, row-major host matrices (internal).");
  m.def(
      "packed_gemm_blocks",
      [](const Array& a, const Array& b, const Array& c, const Array& blocks, bool trans_a, bool trans_b,
         int threads) {
        bindings::require_host(blocks, "blocks");
        require(blocks.dtype == "int64" && blocks.ndim() == 2 && blocks.shape[1] == 4 &&
                    (blocks.shape[0] <= 1 || blocks.strides[0] == 4) && blocks.strides[1] == 1,
                "blocks must be a C-contiguous (nblocks, 4) int64 array of (r0, r1, c0, c1)");
        const index_t* bl = bindings::data<const index_t>(blocks, "blocks");
        const index_t nb = blocks.shape[0];
        gemm_call("packed_gemm_blocks", a, b, c, trans_a, trans_b,
                  [&](auto t, index_t mm, index_t n, index_t k, const auto* ap, index_t lda,
                      const auto* bp, index_t ldb, auto* cp, index_t ldc) {
                    using T = decltype(t);
                    packed_gemm_blocks<T>(trans_a, trans_b, mm, n, k, ap, lda, bp, ldb, cp, ldc, bl, nb, threads);
                  });
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("blocks"), py::arg("trans_a") = false,
      py::arg("trans_b") = false, py::arg("threads") = 0,
      "c[r0:r1] = op(a)[r0:r1, c0:c1] op(b)[c0:c1] for each row of blocks, one team of "
      "single-threaded packed GEMMs (internal).");
  tuning.def("packed_gemm_supported", &packed_gemm_supported,
        "Whether this build and CPU run kronpe's packed GEMM (AVX-512, or AVX2 and FMA).");
  tuning.def(
      "set_chain_gemm",
      [](const std::string& which) {
        require(which == "auto" || which == "blas" || which == "packed",
                "chain gemm must be 'auto', 'blas' or 'packed', got '" + which + "'");
        set_chain_gemm(which == "blas"     ? ChainGemm::blas
                       : which == "packed" ? ChainGemm::packed
                                           : ChainGemm::automatic);
      },
      py::arg("which"),
      "The GEMM of the CPU mode-product chains: 'auto' (packed where it runs, else the "
      "BLAS), 'blas' or 'packed' (internal: tests and measurements).");
  tuning.def(
      "set_in_place_panels", [](long long n) { set_in_place_panels(n); }, py::arg("n"),
      "Up to how many B panels the packed GEMM reads a column-contiguous A in place (n >= 0), or "
      "-1: each kernel's own limit (internal: measurements).");
  tuning.def("in_place_panels", &in_place_panels_setting, "The in-place panels setting (-1: the kernels' own).");
  m.def(
      "invert_in_place",
      [](const Array& a) {
        const index_t lda = leading(a, "a");
        require(a.shape[0] == a.shape[1], "invert_in_place: a must be square");
        bool ok = false;
        bindings::dispatch1(a.dtype, [&](auto t) {
          using T = decltype(t);
          T* ap = bindings::data<T>(a, "a");
          py::gil_scoped_release release;
          ok = invert_in_place<T>(a.shape[0], ap, lda);
        });
        return ok;
      },
      py::arg("a"),
      "a (square, row-major host matrix) replaced by its inverse: blocked Gauss-Jordan with row "
      "pivoting; False when a pivot is exactly zero (internal).");
  m.def(
      "chain_gemm",
      []() { return std::string(chain_uses_packed_gemm() ? "packed" : "blas"); },
      "The GEMM the CPU chains run now: 'packed' or 'blas' (internal).");
}
