"""Fitted models to and from ``.npz`` files: ``GridModel.save`` / ``PointModel.save`` /
``SplineModel.save`` and ``kronpe.load``.

The file is a NumPy ``.npz`` archive read with ``allow_pickle=False``: plain arrays and one JSON
string, nothing executable. Entries:

- ``format`` ("kronpe-model"), ``format_version`` (``FORMAT_VERSION``), ``kronpe_version``;
- ``header``: JSON with ``kind`` ("grid", "points" or "spline"), ``embedders`` (one ``{"name", "params"}``
  per axis: the class name in ``kronpe.embedders`` and the keyword arguments that rebuild it, or
  null for the default scattered model's multilinear blend and for a spline), ``normalize``
  (points), ``lo``, ``scale``, ``h`` (a spline's box and node spacing), and the scalars of
  ``info`` (numbers, strings, booleans);
- ``weights`` (a spline's coefficients), ``ridge`` (a 0-d or a batch array), ``gcv`` (grid models fitted with GCV),
  ``grid_0`` .. ``grid_{D-1}`` (the virtual grid's nodes of a scattered model).

``load`` raises :class:`ModelFileError` (a ValueError) naming the file for anything it cannot
read as such a model, and :class:`ModelVersionError` (a ModelFileError) for another format
version.
"""
from __future__ import annotations

import json
import numbers
import os
import zipfile
from typing import Any, Callable, Dict, Optional, Union

import numpy as np

from . import _core
from ._adapters import validate as _validate

__all__ = ["save_model", "load", "ModelFileError", "ModelVersionError", "FORMAT_VERSION", "model_kind"]

FORMAT = "kronpe-model"
#: Bumped whenever the layout changes; ``load`` refuses any other.
FORMAT_VERSION = 1


class ModelFileError(ValueError):
    """A file that is not a readable kronpe model (missing, damaged, or not one)."""


class ModelVersionError(ModelFileError):
    """A kronpe model file written in another format version."""


#: The model classes by the kind their files name ("grid", "points", "spline"), filled by
#: ``model_kind`` as the model modules are imported (``import kronpe`` imports all of them): this
#: module reads and writes the models without importing the modules that define them.
_KINDS: Dict[str, type] = {}


def model_kind(kind: str) -> Callable[[type], type]:
    """Class decorator: the model class whose files carry ``kind`` (``save_model``, ``load``)."""

    def register(cls: type) -> type:
        _KINDS[kind] = cls
        return cls

    return register


def _kind_of(model) -> Optional[str]:
    return next((kind for kind, cls in _KINDS.items() if isinstance(model, cls)), None)


def _path_arg(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path, got {_validate.describe(path)}")
    return os.fspath(path)


def _embedder_entry(e) -> Any:
    if e is None:
        return None
    return {"name": type(e).__name__, "params": e._init_kwargs()}


def _scalars(info: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON-able scalar entries of a fit's ``info``."""
    out = {}
    for k, v in info.items():
        if isinstance(v, (bool, np.bool_)):
            out[k] = bool(v)
        elif isinstance(v, numbers.Integral):
            out[k] = int(v)
        elif isinstance(v, numbers.Real) and np.isfinite(v):
            out[k] = float(v)
        elif isinstance(v, str):
            out[k] = v
    return out


def save_model(model, path) -> None:
    """Write ``model`` (a GridModel or a PointModel) to ``path`` (exactly that name; ``.npz``
    format, no pickle). See the module docstring for the layout."""
    kind = _kind_of(model)
    if kind is None:
        raise TypeError(f"model must be a kronpe GridModel, PointModel or SplineModel, got {type(model).__name__}")
    p = _path_arg(path)
    version = _core.build_info()["version"]  # kronpe.__version__
    if kind == "spline":
        header = {"kind": "spline", "embedders": [None] * model.ndim, "lo": [float(v) for v in model.lo],
                  "scale": [float(v) for v in model.scale], "h": float(model.h),
                  "info": _scalars(getattr(model, "info", {}) or {})}
        with open(p, "wb") as f:
            np.savez(f, format=np.array(FORMAT), format_version=np.array(FORMAT_VERSION),
                     kronpe_version=np.array(str(version)), header=np.array(json.dumps(header)),
                     weights=np.asarray(model.coef), ridge=np.asarray(model.ridge, float))
        return
    arrays: Dict[str, np.ndarray] = {"weights": np.asarray(model.weights), "ridge": np.asarray(model.ridge, float)}
    header: Dict[str, Any] = {"embedders": [_embedder_entry(e) for e in model.embedders],
                              "info": _scalars(getattr(model, "info", {}) or {})}
    header["kind"] = kind
    if kind == "grid":
        if model.gcv is not None:
            arrays["gcv"] = np.asarray(model.gcv, float)
    else:
        header["normalize"] = bool(model.normalize)
        for i, g in enumerate(model.grid_coords):
            arrays[f"grid_{i}"] = np.asarray(g, np.float64)
    with open(p, "wb") as f:
        np.savez(f, format=np.array(FORMAT), format_version=np.array(FORMAT_VERSION),
                 kronpe_version=np.array(str(version)), header=np.array(json.dumps(header)), **arrays)


def _rebuild_embedder(entry, where: str):
    from . import embedders as E

    if entry is None:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("params"), dict):
        raise ModelFileError(f"{where}: an embedder entry must be {{'name', 'params'}}, got {entry!r}")
    name = entry["name"]
    cls = getattr(E, name, None) if name in E.__all__ else None
    if not (isinstance(cls, type) and issubclass(cls, E.Embedder)):
        raise ModelFileError(f"{where}: unknown embedder {name!r}")
    try:
        return cls(**entry["params"])
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{where}: embedder {name} could not be rebuilt ({exc})") from None


def load(path: Union[str, "os.PathLike[str]"]):
    """Read a model written by ``model.save(path)``.

    Returns
    -------
    GridModel, PointModel or SplineModel
        With its weights, embedders, ridge (and GCV score, grid nodes), ready to ``predict``.

    Raises
    ------
    ModelFileError
        The file is missing, damaged or not a kronpe model (the message names the file).
    ModelVersionError
        It was written in another format version.
    """
    p = _path_arg(path)
    where = repr(p)
    if not os.path.isfile(p):
        raise ModelFileError(f"model file does not exist: {where}")
    if not zipfile.is_zipfile(p):
        raise ModelFileError(f"{where} is not a kronpe model file (.npz, a zip archive written by model.save)")
    try:
        with np.load(p, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except AttributeError:  # np.load gave an array (a .npy file), not an archive
        raise ModelFileError(f"{where} is not a kronpe model (.npz) file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise ModelFileError(f"{where} is damaged or not a kronpe model ({type(exc).__name__}: {exc})") from None
    if str(entries.get("format", "")) != FORMAT:
        raise ModelFileError(f"{where} is not a kronpe model file (no format entry {FORMAT!r})")
    try:
        version = int(entries["format_version"])
    except (KeyError, TypeError, ValueError):
        raise ModelFileError(f"{where} has no readable format_version") from None
    if version != FORMAT_VERSION:
        raise ModelVersionError(f"{where} is a kronpe model of format version {version} (written by kronpe "
                                f"{entries.get('kronpe_version', '?')}); this kronpe reads version {FORMAT_VERSION}")
    try:
        header = json.loads(str(entries["header"]))
        weights = entries["weights"]
        ridge = entries["ridge"]
    except (KeyError, ValueError) as exc:
        raise ModelFileError(f"{where} is damaged: {type(exc).__name__}: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("embedders"), list):
        raise ModelFileError(f"{where} is damaged: its header holds no embedder list")
    if weights.dtype not in (np.float32, np.float64) or not np.isfinite(weights).all():
        raise ModelFileError(f"{where} is damaged: weights must be finite float32/float64, got {weights.dtype}")
    embs = [_rebuild_embedder(e, where) for e in header["embedders"]]
    D = len(embs)
    if weights.ndim < D:
        raise ModelFileError(f"{where} is damaged: {D} embedders but weights of shape {weights.shape}")
    ridge_value = float(ridge) if ridge.ndim == 0 else ridge
    info = header.get("info", {}) if isinstance(header.get("info"), dict) else {}
    kind = header.get("kind")
    if kind == "grid":
        if any(e is None for e in embs):
            raise ModelFileError(f"{where} is damaged: a grid model needs an embedder per axis")
        for i, e in enumerate(embs):
            if e.K != weights.shape[i]:
                raise ModelFileError(f"{where} is damaged: embedder {i} has K = {e.K}, weights axis {i} has "
                                     f"{weights.shape[i]}")
        gcv = entries.get("gcv")
        if gcv is not None:
            gcv = float(gcv) if gcv.ndim == 0 else gcv
        return _KINDS["grid"](weights, embs, ridge_value, gcv, info=info)
    if kind == "points":
        try:
            grid = tuple(np.asarray(entries[f"grid_{i}"], np.float64) for i in range(D))
        except KeyError as exc:
            raise ModelFileError(f"{where} is damaged: missing grid nodes {exc}") from None
        for i, (e, g) in enumerate(zip(embs, grid)):
            n = g.shape[0] if e is None else e.K
            if g.ndim != 1 or weights.shape[i] != n:
                raise ModelFileError(f"{where} is damaged: axis {i} of the weights ({weights.shape[i]}) does not "
                                     f"match its {'grid' if e is None else 'embedder'} ({n})")
        return _KINDS["points"](weights=weights, embedders=tuple(embs), grid_coords=grid, ridge=float(np.asarray(ridge)),
                          info=info, normalize=bool(header.get("normalize", True)))
    if kind == "spline":
        try:
            lo = tuple(float(v) for v in header["lo"])
            scale = tuple(float(v) for v in header["scale"])
            h = float(header["h"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{where} is damaged: a spline needs lo, scale and h ({type(exc).__name__})") from None
        if len(lo) != D or len(scale) != D or not all(np.isfinite(lo)) or not all(
                np.isfinite(v) and v > 0 for v in scale) or not (np.isfinite(h) and h > 0):
            raise ModelFileError(f"{where} is damaged: a spline's lo, scale and h must be {D} finite numbers each "
                                 "(scale and h positive)")
        if any(n < 4 for n in weights.shape[:D]):
            raise ModelFileError(f"{where} is damaged: a spline has at least 4 coefficients per axis, got "
                                 f"{weights.shape[:D]}")
        return _KINDS["spline"](coef=weights, lo=lo, scale=scale, h=h, ridge=float(np.asarray(ridge)), info=info)
    raise ModelFileError(f"{where} is damaged: unknown model kind {kind!r}")
