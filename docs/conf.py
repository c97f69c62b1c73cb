"""Sphinx configuration of kronpe's documentation.

Build: ``python -m sphinx -W -b html docs OUT`` from the repository root (with kronpe installed, or
with the compiled module built in place by ``tools/dev_build.sh``: then ``python/`` is put on the
path here).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from sphinx.ext import autosummary

HERE = Path(__file__).resolve().parent
try:
    import kronpe
except ImportError:  # not installed: the sources next to this folder (tools/dev_build.sh)
    sys.path.insert(0, str(HERE.parent / "python"))
    import kronpe

# -- project ----------------------------------------------------------------------------------------
project = "kronpe"
author = "the kronpe developers"
copyright = "the kronpe developers"
release = kronpe.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.json"]
templates_path = ["_templates"]
default_role = "py:obj"

# -- API reference ----------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # numpydoc writes the types from the docstrings
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()


# The docstrings write shapes and formulas as plain text: "(N_1, ..., N_D, *channels)",
# "||W||^2", "max(1 - |u| / d, 0)". In reStructuredText a lone "*" opens emphasis and "|u|" is a
# substitution, so both are escaped here, outside inline literals and roles, before numpydoc reads
# the docstring (grid tables and line blocks, lines that start with "| ", "+-" or "+=", are left
# alone).
_CODE = re.compile(r"(``.+?``|`[^`]*`)")
_STAR = re.compile(r"(?<![\\\w*])\*(?=[A-Za-z_(])(?![^*\s]*\*(?!\w))")


def _escape_text(text: str) -> str:
    return _STAR.sub(r"\\*", text.replace("|", r"\|"))


def _escape_plain_math(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("| ", "+-", "+=")) or ("*" not in line and "|" not in line):
            continue
        parts = _CODE.split(line)
        lines[i] = "".join(p if k % 2 else _escape_text(p) for k, p in enumerate(parts))


# autosummary's one-line summaries end at the first ". ", which in these docstrings is often no
# sentence end: an abbreviation ("sec. 4", "eq. 1", "i.i.d."), an ellipsis in a formula
# ("T x_0 A_0 ... x_d A_d"), or a period inside parentheses or an inline literal. The summary here
# is the first paragraph up to the first period that ends a sentence at the top level.
_ABBREVIATIONS = {"sec", "secs", "eq", "eqs", "prop", "props", "fig", "figs", "cf", "vs", "al", "no", "approx"}


def _summary(doc, settings):
    stanza = []
    for line in doc:
        if not line.strip():
            if stanza:
                break
            continue
        stanza.append(line.strip())
    text = " ".join(stanza)
    depth, literal, i = 0, False, 0
    while i < len(text):
        if text.startswith("``", i):
            literal, i = not literal, i + 2
            continue
        ch = text[i]
        if not literal:
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "." and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " "):
                word = text[:i].rsplit(" ", 1)[-1]
                if not word.endswith(".") and "." not in word and word.lower() not in _ABBREVIATIONS:
                    return text[:i + 1]
        i += 1
    return text


autosummary.extract_summary = _summary


def setup(app):
    app.connect("autodoc-process-docstring", _escape_plain_math, priority=400)


# -- gallery ------------------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
}


# -- HTML ---------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"kronpe {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path = []
html_show_sourcelink = False
