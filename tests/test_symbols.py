"""The compiled module shares nothing with the other libraries of the process: it exports
PyInit__core and no process-wide unique symbols (a statically linked C++ runtime's locale facet
ids would otherwise capture those of a libstdc++ loaded later), and torch imported after kronpe
formats numbers in its operator schemas."""
import shutil
import subprocess
import sys

import pytest

import kronpe


def _dynamic_symbols():
    if not sys.platform.startswith("linux"):
        pytest.skip("ELF dynamic symbols (Linux)")
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs binutils' nm")
    out = subprocess.run([nm, "-D", "--defined-only", kronpe._core.__file__], capture_output=True, text=True,
                         check=True).stdout
    return [line.split() for line in out.splitlines() if len(line.split()) == 3]


def test_module_exports_its_init():
    names = {name for _, _, name in _dynamic_symbols()}
    assert "PyInit__core" in names


# GCC makes an inline function's static local from a standard header a unique symbol even in a
# hidden-visibility module; make_shared's type tag is one, and sharing it across libraries is its
# purpose (every libstdc++ compares it by address)
SHARED_BY_DESIGN = {"_ZZNSt19_Sp_make_shared_tag5_S_tiEvE5__tag"}


def test_module_exports_no_unique_or_runtime_symbols():
    rows = _dynamic_symbols()
    unique = [name for _, kind, name in rows if kind == "u" and name not in SHARED_BY_DESIGN]
    runtime = [name for _, _, name in rows if name.startswith(("__cxa_", "_Unwind_", "cuda", "GOMP_", "omp_"))]
    assert unique == [], unique[:5]
    assert runtime == [], runtime[:5]


def test_torch_imported_after_kronpe_formats_numbers():
    pytest.importorskip("torch")
    code = ("import kronpe, torch; s = str(torch.ops.aten.add.Tensor._schema); "
            "assert s.endswith('alpha=1) -> Tensor'), s")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
