"""The package's structure: every module imports on its own, the modules import each other without
a cycle, the layers keep their direction, private names stay home, and no source file grows past
MAX_LINES.

The import graph is read from the source with ``ast`` (nothing is imported to build it). An
arrow A -> B is any ``import`` or ``from ... import`` in A that names B, at module level or inside
a function or class: an import deferred into a function still runs, so it closes a cycle as surely
as one at the top. Only the imports under ``if TYPE_CHECKING:`` are left out (they never run).
Importing ``kronpe.x.y`` also runs the packages' ``__init__`` files; those implicit arrows are not
drawn (every module would then import ``kronpe`` and everything it imports). Optional
dependencies (torch, CuPy, dask, xarray) are imported inside the functions that need them or by
the modules that wrap them (``kronpe.torch``, ``kronpe.dask``); that is no exception to the rule
above: their arrows are drawn like any other, and ``kronpe.dask`` is reached from below only
through the function that ``kronpe/__init__.py`` hands to ``_adapters.arrays.set_dask_module``.
"""
import ast
import functools
import importlib.util
import os
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

import kronpe

PACKAGE = Path(kronpe.__path__[0])
CSRC = Path(__file__).resolve().parents[1] / "csrc"
MAX_LINES = 900
LONG_ALLOWED = {"reference.py"}  # the NumPy oracles of every kernel: one file, read as a whole
OPTIONAL = ("torch", "cupy", "dask", "xarray")  # third-party packages a module may need
# Private names a module may import from another: the shared internal module, the compiled core
# and the adapters; besides these, a package's own private submodules (kronpe.torch._cpu from
# kronpe.torch.modules, say).
PRIVATE_HOMES = ("kronpe._shared", "kronpe._core", "kronpe._adapters")
# kronpe.torch still imports these under their old names (aliases kept beside their new homes
# until it imports them from kronpe._shared and kronpe.operators.blending)
TRANSITIONAL: set = set()


# ---- the modules and their imports, from the source -----------------------------------------------


def _modules() -> Dict[str, Optional[Path]]:
    """Every module of kronpe (name -> source file; a package by its __init__.py), found as
    pkgutil.walk_packages finds them but without importing the packages to do so."""
    out = {}

    def walk(folder: Path, name: str) -> None:
        out[name] = folder / "__init__.py"
        for info in pkgutil.iter_modules([str(folder)]):
            if info.ispkg:
                walk(folder / info.name, f"{name}.{info.name}")
            else:  # a compiled module (kronpe._core) has no source: None
                source = folder / f"{info.name}.py"
                out[f"{name}.{info.name}"] = source if source.is_file() else None

    walk(PACKAGE, "kronpe")
    return out


KNOWN = _modules()  # with the compiled modules
MODULES = {m: p for m, p in KNOWN.items() if p is not None}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """(node, at module level) for every import statement but those under ``if TYPE_CHECKING:``."""
    def visit(node, top):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, top
            return
        if isinstance(node, ast.If) and _type_checking(node):
            children = node.orelse  # the branch that runs
        else:
            children = list(ast.iter_child_nodes(node))
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        for child in children:
            yield from visit(child, inner)

    yield from visit(tree, True)


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (its relative dots resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if MODULES.get(module, Path()).name == "__init__.py" else parts[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _known(name: str) -> Optional[str]:
    """The longest prefix of ``name`` that is a kronpe module (None outside kronpe)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in KNOWN:
            return cand
    return None


def _imports(module: str) -> List[Tuple[str, Optional[str], bool]]:
    """(target module, private name taken from it or None, at module level) of each import."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out = []
    for node, top in _import_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
                if target:
                    out.append((target, None, top))
                elif alias.name.split(".")[0] in OPTIONAL:
                    out.append((alias.name.split(".")[0], None, top))
            continue
        base = _base(module, node)
        if base.split(".")[0] in OPTIONAL:
            out.append((base.split(".")[0], None, top))
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in KNOWN:
                out.append((sub, None, top))
                continue
            target = _known(base)
            if target:
                private = alias.name if alias.name.startswith("_") and not alias.name.startswith("__") else None
                out.append((target, private, top))
    return out


IMPORTS = {m: _imports(m) for m in MODULES}
GRAPH = {m: sorted({t for t, _, _ in IMPORTS[m] if t in MODULES and t != m}) for m in MODULES}


def _cycle(graph: Dict[str, List[str]]) -> Optional[List[str]]:
    """A cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _needs(module: str, seen: Optional[Set[str]] = None) -> Set[str]:
    """The optional packages that importing ``module`` needs (its module-level imports, followed)."""
    seen = set() if seen is None else seen
    if module in seen:
        return set()
    seen.add(module)
    out = {"torch"} if module == "kronpe.torch" or module.startswith("kronpe.torch.") else set()
    for target, _, top in IMPORTS.get(module, ()):
        if not top:
            continue
        if target in OPTIONAL:
            out.add(target)
        else:
            out |= _needs(target, seen)
    return out


# ---- (a) every module imports on its own ----------------------------------------------------------


IMPORTABLE = sorted(m for m in MODULES if m != "kronpe.__main__")  # (__main__ runs the command line)


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE.parent)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _missing(module: str) -> List[str]:
    return sorted(p for p in _needs(module) if importlib.util.find_spec(p) is None)


@functools.lru_cache(maxsize=None)
def _import_results() -> Dict[str, Tuple[int, str]]:
    """(exit status, stderr) of ``python -c "import kronpe.X"`` for every module that can be
    imported here, each in a fresh process, a few processes at a time."""
    def run(module: str) -> Tuple[int, str]:
        r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=_env(),
                           timeout=600)
        return r.returncode, r.stderr

    todo = [m for m in IMPORTABLE if not _missing(m)]
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        return dict(zip(todo, pool.map(run, todo)))


@pytest.mark.parametrize("module", IMPORTABLE)
def test_module_imports_on_its_own(module):
    """``python -c "import kronpe.X"`` in a fresh process, for every module (skipped where an
    optional package it needs is missing)."""
    missing = _missing(module)
    if missing:
        pytest.skip(f"{module} needs {', '.join(missing)}")
    code, err = _import_results()[module]
    assert code == 0, f"import {module} failed:\n{err[-3000:]}"


def test_command_line_module_runs():
    """kronpe.__main__, which runs the command line when imported: ``python -m kronpe --help``."""
    r = subprocess.run([sys.executable, "-m", "kronpe", "--help"], capture_output=True, text=True, env=_env(),
                       timeout=600)
    assert r.returncode == 0 and "usage: kronpe" in r.stdout, r.stderr[-3000:]


# ---- (b) no import cycle, the layers' direction ------------------------------------------------------


def test_graph_was_read():
    """The graph holds what is known to be there (a guard against a parser that reads nothing)."""
    assert len(MODULES) > 40
    assert "kronpe.solvers.grid_plan" in GRAPH["kronpe.solvers.fit"]
    assert "kronpe.operators.blending" in GRAPH["kronpe.solvers.points"]
    assert "kronpe.dask" in GRAPH["kronpe"]  # a function-level import is an arrow too


def test_no_import_cycle():
    cycle = _cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_search_finds_one():
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) in (["a", "b", "c", "a"],)
    assert _cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def _importers(target_prefix: str) -> Set[str]:
    return {m for m, targets in GRAPH.items() for t in targets
            if t == target_prefix or t.startswith(target_prefix + ".")}


def test_dask_is_wired_from_the_top():
    """Nothing below the public API imports kronpe.dask: the package's __init__ wires it in, and
    only the command line and the benchmarks (above the public API) may name it."""
    above = ("kronpe.app", "kronpe.bench")
    importers = {m for m in _importers("kronpe.dask") if m != "kronpe.dask"}
    assert importers <= {"kronpe"} | {m for m in importers if m.startswith(above)}, sorted(importers)


def test_layers_keep_their_direction():
    """app -> bench -> public API -> solvers / operators -> _adapters -> _core: the benchmarks
    import nothing of the command line, the solvers and operators nothing of either, the
    operators nothing of the solvers, the adapters nothing of kronpe above them."""
    def imports_of(prefix):
        return {(m, t) for m, targets in GRAPH.items() if m == prefix or m.startswith(prefix + ".") for t in targets}

    def into(pairs, prefixes):
        return sorted((m, t) for m, t in pairs if any(t == p or t.startswith(p + ".") for p in prefixes))

    assert into(imports_of("kronpe.bench"), ["kronpe.app"]) == []
    assert into(imports_of("kronpe.solvers") | imports_of("kronpe.operators"),
                ["kronpe.app", "kronpe.bench", "kronpe.dask", "kronpe.torch"]) == []
    assert into(imports_of("kronpe.operators"), ["kronpe.solvers"]) == []
    below = {m for m in MODULES if m.startswith("kronpe._adapters")} | {"kronpe._core"}
    assert sorted((m, t) for m, t in imports_of("kronpe._adapters") if t not in below) == []


def test_private_names_stay_home():
    """A module takes private names (``_name``) only from kronpe._shared, the compiled core, the
    adapters or a private submodule of its own package (TRANSITIONAL: kronpe.torch's imports of
    names that have moved)."""
    found = []
    for module, imports in IMPORTS.items():
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        for target, private, _ in imports:
            if private is None or target.startswith(PRIVATE_HOMES):
                continue
            own = target.startswith(package + ".") and any(p.startswith("_") for p in
                                                          target[len(package) + 1:].split("."))
            if not own and (module, target, private) not in TRANSITIONAL:
                found.append(f"{module}: from {target} import {private}")
    assert found == []


# ---- (c) file sizes ---------------------------------------------------------------------------------------


def _long_files(root: Path, suffixes, allowed=()) -> List[str]:
    out = []
    for path in sorted(root.rglob("*")):
        if path.suffix in suffixes and path.name not in allowed and path.is_file():
            n = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
            if n > MAX_LINES:
                out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_python_files_are_short():
    assert _long_files(PACKAGE, {".py"}, LONG_ALLOWED) == []


def test_native_files_are_short():
    if not CSRC.is_dir():
        pytest.skip("no csrc/ beside the tests (an installed kronpe)")
    assert _long_files(CSRC, {".cpp", ".cu", ".h", ".cuh", ".hpp"}) == []
