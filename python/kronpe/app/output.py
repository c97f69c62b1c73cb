"""What a command prints: human lines, or with ``--json`` one JSON object (stdout) for scripts;
and its progress bar over the steps of a job (stderr, only on a terminal, off with
``--no-progress`` or ``--json``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Sequence


class Output:
    """``say`` a human line (suppressed with --json), ``put`` values into the JSON result,
    ``steps`` for a progress bar, ``done`` to print the JSON object; returns the exit status 0."""

    def __init__(self, args, command: str):
        self.json = bool(getattr(args, "json", False))
        self.progress = not getattr(args, "no_progress", False) and not self.json
        self.result: Dict[str, Any] = {"command": command}

    def say(self, text: str) -> None:
        if not self.json:
            print(text, flush=True)

    def put(self, **values) -> None:
        self.result.update({k: _plain(v) for k, v in values.items()})

    def steps(self, names: Sequence[str]) -> "_Steps":
        return _Steps(list(names), self.progress)

    def wrote(self, files: Sequence[Path]) -> None:
        self.put(files=[str(f) for f in files])
        self.say("wrote " + ", ".join(str(f) for f in files))

    def done(self) -> int:
        if self.json:
            print(json.dumps(self.result, indent=1), flush=True)
        return 0


class _Steps:
    """A progress bar over named steps: ``next()`` starts the next one."""

    def __init__(self, names, progress: bool):
        from .._progress import bar

        self.names = names
        self.bar = bar(len(names), progress, names[0] if names else "", leave=False)
        self.i = 0

    def __enter__(self):
        return self

    def next(self) -> None:
        self.bar.update(1)
        self.i += 1
        if self.i < len(self.names):
            self.bar.set_description_str(self.names[self.i])

    def __exit__(self, *exc):
        self.bar.close()


def _plain(v):
    """v as JSON-able: tuples/arrays to lists, NumPy scalars to Python, inf/nan to strings."""
    import numpy as np

    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    if isinstance(v, Path):
        return str(v)
    return v
