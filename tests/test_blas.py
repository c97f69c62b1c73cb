"""The CPU BLAS wired into the core: the gemm kernels against NumPy, over the cases of
tests/_samples.py (gemm_cases)."""
import json
import os
import sys

import numpy as np
import pytest

import kronpe
from kronpe import _core, reference
from kronpe._adapters.arrays import Array, describe
from _samples import CPU, LAYOUTS, PACKED_GEMM_SHAPES, gemm_cases, ids, out_view

CASES = list(gemm_cases())
PACKED_CASES = list(gemm_cases(PACKED_GEMM_SHAPES))


def _gemm(a, b, ta, tb, alpha=1.0, beta=0.0, c=None):
    m = a.shape[1] if ta else a.shape[0]
    k = a.shape[0] if ta else a.shape[1]
    n = b.shape[0] if tb else b.shape[1]
    c = np.zeros((m, n), a.dtype) if c is None else c
    _core.gemm(describe(a), describe(b), describe(c), ta, tb, alpha, beta)
    return c


def test_blas_is_loaded():
    assert _core._tuning.blas_ready()
    info = kronpe.build_info()
    assert "openblas" in info["blas"].lower() or "mkl" in info["blas"].lower() or info["blas"]
    assert set(info) >= {"version", "compiler", "blas", "cuda"}
    assert isinstance(info["cuda"], bool)


def _case_product(kernel, case, rng, dtype, *args):
    """The case's product by ``kernel`` (gemm or packed_gemm) with operands and C in its layout, C
    filled with -7 first (every element must be written, nothing around it), and its reference."""
    a, b = case.operands(rng, dtype)
    c, outside = out_view(CPU, (case.m, case.n), dtype, case.layout)
    kernel(describe(CPU.view(a, case.layout)), describe(CPU.view(b, case.layout)), describe(c), case.ta, case.tb,
           *args)
    assert (outside() == -7).all()
    return c, reference.gemm(a, b, case.ta, case.tb)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_gemm_matches_numpy(rng, dtype, case):
    c, ref = _case_product(_core.gemm, case, rng, dtype, 1.0, 0.0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, ref, rtol=tol, atol=tol * max(1, case.k))


@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS if lay not in ("contiguous", "padded", "broadcast")])
def test_gemm_refuses_rows_that_are_not_contiguous(rng, layout):
    """The GEMMs take operands whose rows are contiguous in memory (any leading dimension): other
    layouts are a named error, not a wrong product."""
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    for kernel, args in ((_core.gemm, (1.0, 0.0)), (_core.packed_gemm, (1,))):
        with pytest.raises(ValueError, match="a must have contiguous rows"):
            kernel(describe(CPU.view(a, layout)), describe(b), describe(np.zeros((5, 3))), False, False, *args)


@pytest.mark.parametrize("kernel,args", [(_core.gemm, (False, False, 1.0, 0.0)), (_core.packed_gemm, (False, False, 1))],
                         ids=["gemm", "packed_gemm"])
def test_gemm_refuses_an_output_that_shares_an_operand(rng, kernel, args):
    """c is written while a and b are read: a c that shares an entry with either (an aliased view)
    is a named error, as are operands whose rows overlap (a broadcast view, read as other memory);
    column blocks of one array that interleave without sharing an entry are taken."""
    buf = rng.standard_normal((6, 9))
    a, b = buf[:, :3], buf[:3, 3:6]  # (6, 3) @ (3, 3)
    before = buf.copy()
    with pytest.raises(ValueError, match="c must not overlap a"):
        kernel(a, b, buf[:, 2:5], *args)
    with pytest.raises(ValueError, match="c must not overlap b"):
        kernel(a, b, buf[:, 5:8], *args)
    square = buf[:3, :3]
    with pytest.raises(ValueError, match="c must not overlap a"):
        kernel(square, square.copy(), square, *args)
    with pytest.raises(ValueError, match="c must not overlap b"):
        kernel(square.copy(), square, square, *args)
    with pytest.raises(ValueError, match="a's rows must not overlap"):
        kernel(np.broadcast_to(buf[0, :3], (6, 3)), b.copy(), np.zeros((6, 3)), *args)
    np.testing.assert_array_equal(buf, before)  # nothing written
    if kernel is _core.gemm or _core._tuning.packed_gemm_supported():
        kernel(a, b, buf[:, 6:9], *args)  # beside a's columns, below b's rows: no entry shared
        np.testing.assert_allclose(buf[:, 6:9], before[:, :3] @ before[:3, 3:6], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(buf[:, :6], before[:, :6])


needs_packed = pytest.mark.skipif(not _core._tuning.packed_gemm_supported(),
                                  reason="neither AVX-512 nor AVX2 and FMA on this CPU")


def _packed(a, b, ta, tb, threads=1):
    """op(a) op(b) by kronpe's packed GEMM."""
    m = a.shape[1] if ta else a.shape[0]
    n = b.shape[0] if tb else b.shape[1]
    c = np.full((m, n), np.nan, a.dtype)  # NaNs: every element must be written
    _core.packed_gemm(describe(a), describe(b), describe(c), ta, tb, threads)
    return c


@needs_packed
@pytest.mark.parametrize("case", PACKED_CASES, ids=ids(PACKED_CASES))
def test_packed_gemm_matches_numpy(rng, dtype, case):
    """The packed GEMM against float64 NumPy (tests/_samples.py: PACKED_GEMM_SHAPES), packed and
    padded rows; its AVX2 kernels too (test_packed_gemm_tests_pass_on_avx2)."""
    c, ref = _case_product(_core.packed_gemm, case, rng, dtype, 1)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, ref, rtol=tol, atol=tol * max(1, case.k) ** 0.5 * 4)


@needs_packed
@pytest.mark.parametrize("shape", [(1000, 70, 45), (45, 70, 1000), (300, 700, 290), (700, 20, 700)])
def test_packed_gemm_threads_give_the_same_bits(rng, dtype, shape):
    """Large products (many blocks of the big operand, several k blocks) on one and two threads:
    the same bits, and the reference values."""
    m, k, n = shape
    for ta, tb in [(False, False), (True, True), (False, True)]:
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        one = _packed(a, b, ta, tb, threads=1)
        two = _packed(a, b, ta, tb, threads=2)
        np.testing.assert_array_equal(one, two)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(one, reference.gemm(a, b, ta, tb), rtol=tol, atol=tol * k**0.5 * 4)


def _aligned_c(m, ldc, dtype, offset):
    """An (m, ldc) NaN-filled C whose data starts `offset` bytes past a 64-byte boundary."""
    item = np.dtype(dtype).itemsize
    raw = np.full(m * ldc * item + 128, 0, np.uint8)
    skip = -raw.ctypes.data % 64 + offset
    c = raw[skip:skip + m * ldc * item].view(dtype).reshape(m, ldc)
    c[...] = np.nan
    return c


@needs_packed
@pytest.mark.parametrize("big", ["rows", "columns"])
@pytest.mark.parametrize("offset", [0, 16])
def test_packed_gemm_from_memory(rng, dtype, big, offset):
    """Operands and results of 16 MiB or more, where the kernel prefetches an A read in place
    (a chain step's X^T) and writes whole tiles of C with streaming stores when C's rows are
    64-byte aligned (offset 0; offset 16: ordinary stores): the reference values, partial tiles
    included, and the same bits on one and two threads."""
    item = np.dtype(dtype).itemsize
    long_side = (16 << 20) // (64 * item) + 9  # 64 x long_side: just over 16 MiB
    if big == "rows":  # M large: A read in place along its columns (ta), C (M x 80)
        m, k, n, ta, tb = long_side, 64, 80, True, True
        ldc = n
    else:  # N large: B packed block by block, C (72 x N)
        m, k, n, ta, tb = 72, 64, long_side + 7, False, False
        ldc = (n + 15) // 16 * 16
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    ref = reference.gemm(a, b, ta, tb)
    out = []
    for threads in (1, 2):
        c = _aligned_c(m, ldc, dtype, offset)
        _core.packed_gemm(describe(a), describe(b), describe(c[:, :n]), ta, tb, threads)
        assert np.isnan(c[:, n:]).all()  # the padding of C's rows untouched
        out.append(c[:, :n])
    np.testing.assert_array_equal(out[0], out[1])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[0], ref, rtol=tol, atol=tol * k**0.5 * 4)


def _banded(rng, m, k, dtype, rows=5, width=4):
    """A block-banded m x k matrix (zero outside its blocks) and its (nblocks, 4) table: blocks of
    `rows` rows, each with a window of columns around its diagonal, one block of empty windows."""
    blocks = []
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        c0 = max(0, min(k, r0 * k // max(m, 1) - width))
        c1 = min(k, c0 + 2 * width)
        blocks.append((r0, r1, c0, c1))
    if len(blocks) > 2:
        r0, r1, _, _ = blocks[1]
        blocks[1] = (r0, r1, 0, 0)  # rows of zeros
    a = np.zeros((m, k), dtype)
    for r0, r1, c0, c1 in blocks:
        a[r0:r1, c0:c1] = rng.standard_normal((r1 - r0, c1 - c0))
    return a, np.array(blocks, dtype=np.int64).reshape(-1, 4)


@needs_packed
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,k,n", [(37, 29, 300), (64, 64, 1000), (7, 3, 5), (0, 4, 6), (5, 4, 0)])
def test_packed_gemm_blocks_matches_the_reference(rng, dtype, ta, tb, m, k, n):
    """Each block's rows get op(a)'s window times op(b)'s rows (reference.gemm_blocks), on strided
    operands and output, on one and two threads with the same bits; a block with an empty window
    zeroes its rows."""
    a, blocks = _banded(rng, m, k, dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    av = np.ascontiguousarray(a.T) if ta else a
    c = np.full((m, n + 3), np.nan, dtype)[:, 1:n + 1]  # a row stride longer than a row
    want = reference.gemm_blocks(av, b, blocks, np.zeros((m, n)), ta, tb)
    got = []
    for threads in (1, 2):
        c[...] = np.nan
        _core.packed_gemm_blocks(av, b, c, blocks, ta, tb, threads)
        got.append(c.copy())
    np.testing.assert_array_equal(got[0], got[1])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol * 4)
    # a is zero outside its blocks: the whole product
    np.testing.assert_allclose(got[0], reference.gemm(a, b, False, tb), rtol=tol, atol=tol * 4)


@needs_packed
def test_packed_gemm_blocks_refuses_bad_tables(rng):
    a, blocks = _banded(rng, 10, 8, np.float64)
    b, c = rng.standard_normal((8, 6)), np.zeros((10, 6))
    bad = {"rows out of order": [[5, 10, 0, 2], [0, 5, 0, 2]], "rows past c": [[0, 11, 0, 2]],
           "window past a": [[0, 5, 3, 9]], "reversed": [[0, 5, 4, 2]]}
    for name, table in bad.items():
        with pytest.raises(ValueError, match="blocks must be row ranges"):
            _core.packed_gemm_blocks(a, b, c, np.array(table, np.int64), False, False, 1)
    with pytest.raises(ValueError, match="int32"):
        _core.packed_gemm_blocks(a, b, c, blocks.astype(np.int32), False, False, 1)
    with pytest.raises(ValueError, match=r"\(nblocks, 4\) int64"):
        _core.packed_gemm_blocks(a, b, c, blocks.astype(np.float64), False, False, 1)
    with pytest.raises(ValueError, match=r"\(nblocks, 4\) int64"):
        _core.packed_gemm_blocks(a, b, c, blocks[:, :3], False, False, 1)
    with pytest.raises(ValueError, match="c must not overlap"):
        _core.packed_gemm_blocks(a, b, a[:, :6], blocks, False, False, 1)


def _packed_products():
    """A few products of the packed GEMM (odd sizes, every transpose, several k blocks, two
    threads), as bytes."""
    rng = np.random.default_rng(5)
    out = []
    for dtype in (np.float32, np.float64):
        for m, k, n in [(13, 33, 47), (300, 700, 290), (45, 70, 1000), (253, 70, 40)]:
            for ta, tb in [(False, False), (True, True), (True, False)]:
                a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
                b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
                out.append(_packed(a, b, ta, tb, threads=2).tobytes())
    return b"".join(out)


@needs_packed
def test_packed_gemm_tests_pass_on_avx2():
    """The packed GEMM's tests of this file again with KRONPE_SIMD=avx2 (read once per process):
    the AVX2 kernels, which CPUs without AVX-512 run, against NumPy and on one and two threads;
    and their products have the bits of this process's kernels (every element of C gets the same
    FMAs in the same order)."""
    import hashlib
    import subprocess

    env = dict(os.environ, KRONPE_SIMD="avx2")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kronpe.__file__)), env.get("PYTHONPATH", "")])
    tests = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "(packed_gemm or chain_gemm) and not avx2"], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(tests), timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " skipped" not in r.stdout, r.stdout[-2000:]
    code = "import hashlib, test_blas; print(hashlib.sha256(test_blas._packed_products()).hexdigest())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tests,
                       timeout=600, check=True)
    assert r.stdout.split()[-1] == hashlib.sha256(_packed_products()).hexdigest()


def test_chain_gemm_setting():
    """The chains' GEMM: 'auto' resolves to the packed one exactly where it runs (AVX-512, or AVX2
    and FMA: build_info names the kernels); 'packed' is refused elsewhere; bad names are named."""
    try:
        _core._tuning.set_chain_gemm("blas")
        assert _core.chain_gemm() == "blas"
        assert kronpe.build_info()["chain_gemm"] == "BLAS"
        _core._tuning.set_chain_gemm("auto")
        assert _core.chain_gemm() == ("packed" if _core._tuning.packed_gemm_supported() else "blas")
        kernels = {"avx512": "packed AVX-512", "avx2": "packed AVX2"}.get(kronpe.build_info()["simd"], "BLAS")
        assert kronpe.build_info()["chain_gemm"] == (kernels if _core._tuning.packed_gemm_supported() else "BLAS")
        if _core._tuning.packed_gemm_supported():
            _core._tuning.set_chain_gemm("packed")
            assert _core.chain_gemm() == "packed"
        else:
            with pytest.raises(ValueError, match="AVX-512"):
                _core._tuning.set_chain_gemm("packed")
        with pytest.raises(ValueError, match="'auto', 'blas' or 'packed'"):
            _core._tuning.set_chain_gemm("fast")
    finally:
        _core._tuning.set_chain_gemm("auto")


@needs_packed
@pytest.mark.parametrize("n", [16, 64, 100, 300])
def test_packed_gemm_in_place_or_packed_gives_the_same_bits(rng, dtype, n):
    """A chain step's X^T (columns contiguous) read in place or packed first (the in-place panels
    setting: every kernel, none, each kernel's own): the same bits, on one and two threads."""
    m, k = 700, 96
    a = rng.standard_normal((k, m)).astype(dtype)
    b = rng.standard_normal((n, k)).astype(dtype)
    assert _core._tuning.in_place_panels() == -1
    try:
        out = []
        for panels in (-1, 0, 1 << 20):
            _core._tuning.set_in_place_panels(panels)
            out += [_packed(a, b, True, True, threads=t) for t in (1, 2)]
    finally:
        _core._tuning.set_in_place_panels(-1)
    for c in out[1:]:
        np.testing.assert_array_equal(c, out[0])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[0], reference.gemm(a, b, True, True), rtol=tol, atol=tol * k**0.5 * 4)
    with pytest.raises(ValueError, match="in-place panels must be -1"):
        _core._tuning.set_in_place_panels(-2)


def test_gemm_alpha_beta(rng):
    a = rng.standard_normal((4, 6))
    b = rng.standard_normal((6, 5))
    c0 = rng.standard_normal((4, 5))
    c = _gemm(a, b, False, False, alpha=2.0, beta=0.5, c=c0.copy())
    np.testing.assert_allclose(c, 2.0 * a @ b + 0.5 * c0, rtol=1e-12)


def test_gemm_bad_dtype():
    x = np.zeros((1, 1))
    a = Array(x.ctypes.data, (1, 1), (1, 1), "int32", -1, 0)  # a descriptor of the wrong dtype
    with pytest.raises(ValueError, match="dtype"):
        _core.gemm(a, a, a)
    with pytest.raises(ValueError, match="float32 or float64"):  # a NumPy array is its own
        _core.gemm(np.zeros((1, 1), np.int32), x, x)


def test_numpy_array_is_its_own_descriptor():
    # the binding reads a NumPy array's buffer directly: strides in elements, any layout
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 4))[::2]  # every second row: a leading dimension of 8
    b = rng.standard_normal((4, 5))
    c = np.zeros((3, 5))
    _core.gemm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    odd = np.zeros(3, dtype=[("x", np.float64), ("y", np.int8)])["x"]  # strides of 9 bytes
    with pytest.raises(ValueError, match="strides"):
        _core.gemm(odd.reshape(3, 1), np.zeros((1, 1)), np.zeros((3, 1)))


def test_core_stubs_cover_the_module():
    # python/kronpe/_core.pyi (shipped in the wheel) names every function and class of the compiled module,
    # and in its class _tuning every function of the submodule _core._tuning
    import ast
    import pathlib

    stub = pathlib.Path(kronpe.__file__).with_name("_core.pyi")
    body = ast.parse(stub.read_text()).body
    names = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert names - {"_tuning"} == {n for n in dir(_core) if not n.startswith("_")}
    tuning = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == "_tuning")
    hooks = {n.name for n in tuning.body if isinstance(n, ast.FunctionDef)}
    assert hooks == {n for n in dir(_core._tuning) if not n.startswith("_")}


def test_numpy_blas_is_preferred():
    """With NumPy's ILP64 OpenBLAS loaded, kronpe calls it (one BLAS thread pool per process)."""
    from kronpe._adapters import blas

    if blas._numpy_ilp64() is None:
        pytest.skip("NumPy is not linked to an ILP64 OpenBLAS here")
    assert blas.which() == "numpy" and _core._tuning.blas_int_bits() == 64
    assert "NumPy's" in kronpe.build_info()["blas"]


@pytest.mark.parametrize("choice", ["scipy", "numpy", "mkl"])
def test_kronpe_blas_variable(choice):
    """KRONPE_BLAS=scipy forces SciPy's LP64 BLAS and gives the same products; a bad value is a
    named ValueError at import."""
    import os
    import subprocess
    import sys
    import textwrap

    from kronpe._adapters import blas

    if choice == "numpy" and blas._numpy_ilp64() is None:
        pytest.skip("NumPy is not linked to an ILP64 OpenBLAS here")
    code = textwrap.dedent("""
        import numpy as np, kronpe
        from kronpe import _core
        from kronpe._adapters import blas
        rng = np.random.default_rng(0)
        T = rng.standard_normal((9, 8, 7)); A = [rng.standard_normal((5, 9)), rng.standard_normal((6, 8))]
        err = np.abs(kronpe.multi_mode_product(T, A) - np.einsum("abc,xa,yb->xyc", T, *A)).max()
        print(blas.which(), _core._tuning.blas_int_bits(), err)
    """)
    env = dict(os.environ, KRONPE_BLAS=choice)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kronpe.__file__)), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if choice == "mkl":
        assert r.returncode != 0 and "ValueError: KRONPE_BLAS must be" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    which, bits, err = r.stdout.split()
    assert which == choice and int(bits) == (32 if choice == "scipy" else 64)
    assert float(err) < 1e-12


@pytest.mark.parametrize("value,want", [("avx2", {"avx2", "generic"}), ("generic", {"generic"}),
                                        ("bogus", {"avx512", "avx2", "generic"})])
def test_kronpe_simd_caps_the_vector_paths(value, want):
    """KRONPE_SIMD lowers the vector paths for the whole process (read once at load); a value it does
    not know is named on stderr and ignored."""
    import subprocess

    code = "import kronpe, json; from kronpe import _core; print(json.dumps([kronpe.build_info()['simd'], " \
           "_core._tuning.blend_set_simd(2)]))"
    env = dict(os.environ, KRONPE_SIMD=value)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    simd, blend_level = json.loads(out.stdout.strip().splitlines()[-1])
    assert simd in want
    assert blend_level <= {"avx512": 2, "avx2": 1, "generic": 0}[simd]
    if value == "bogus":
        assert "KRONPE_SIMD=bogus is not one of avx512, avx2, generic" in out.stderr
