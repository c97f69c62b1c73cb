"""The one progress bar of kronpe (tqdm on stderr): shown only when asked for *and* stderr is a
terminal, so that pipes, files, CI logs and ``--json`` output stay clean."""
from __future__ import annotations

import sys


def bar(total, progress: bool, desc: str, leave: bool = False):
    """A tqdm bar of ``total`` steps; ``progress=False`` (``--no-progress``) or a stderr that is not a
    terminal turns it off (tqdm's ``disable=None``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=None if progress else True, desc=desc, leave=leave, file=sys.stderr)
