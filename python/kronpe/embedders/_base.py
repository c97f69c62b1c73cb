"""The embedder base class, its argument helpers and the Nyquist check."""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

import numpy as np

from .. import _core
from .._adapters import arrays as _arrays, validate as _validate


# Work arrays of the sampled-distance computation stay below this many elements.
_CHUNK_ELEMENTS = 1 << 22
# Bytes per frequency while a Fourier embedder computes its frequencies (array + temporaries).
_BYTES_PER_FREQUENCY = 32


class NyquistWarning(UserWarning):
    """An embedder's highest frequency is at or above the Nyquist limit of the sampling."""


# ---- argument checks that only embedders need ------------------------------------------------


def _int_in_range(name: str, value, low: int, high: int) -> int:
    return _validate.integer(name, value, low, high)


def _frequency_count(name: str, count: int) -> int:
    """``count`` frequencies, after checking their memory (the array and its temporaries)."""
    _validate.check_budget(name, count * _BYTES_PER_FREQUENCY,
                           f"use a smaller {name} ({count} frequencies asked for)")
    return count


def _even_positive_int(name: str, value) -> int:
    v = _validate.positive_int(name, value)
    if v % 2:
        raise ValueError(f"{name} must be even (K/2 cosine and K/2 sine features), got {value!r}")
    _frequency_count(name, v // 2)
    return v


def _finite_array(name: str, value) -> np.ndarray:
    arr = _validate.real_array(name, value)
    _validate.check_array_budget(name, arr.shape, 8, f"pass a smaller {name}")
    arr = arr.astype(np.float64, copy=False)
    _validate.finite(name, arr)
    return arr


def _set(obj, **fields) -> None:
    """Assign fields of a frozen dataclass from its __init__."""
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


# ---- base classes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Embedder:
    """Base class: a frozen dataclass whose fields are the embedder's parameters.

    Subclasses provide ``K`` (output features) and ``_kernel_args()``; everything else
    (validation, the compiled call, distances) is shared.
    """

    #: name of the field that sets the basis width (searched by GCV), None if there is none
    width_param: ClassVar[Optional[str]] = None

    # -- parameters ------------------------------------------------------------------------

    def _init_value(self, name: str):
        return getattr(self, name)

    def _init_kwargs(self) -> Dict[str, Any]:
        """The keyword arguments that rebuild this embedder."""
        params = inspect.signature(type(self).__init__).parameters
        return {name: self._init_value(name) for name in params if name != "self"}

    def replace(self, **changes) -> "Embedder":
        """A copy with some parameters changed (validated again)."""
        kw = self._init_kwargs()
        unknown = set(changes) - set(kw)
        if unknown:
            raise ValueError(f"{type(self).__name__} has no parameter {sorted(unknown)}; it has {sorted(kw)}")
        kw.update(changes)
        return type(self)(**kw)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._init_kwargs().items())
        return f"{type(self).__name__}({args})"

    # -- evaluation ------------------------------------------------------------------------

    def __call__(self, x, out: Optional[np.ndarray] = None):
        """Embed coordinates.

        Parameters
        ----------
        x : array of shape (N,)
            Coordinates in [0, 1] (NumPy, torch, or CuPy).
        out : array of shape (N, K), optional
            Where to write the result (any strides, the dtype of x; on x's device for device x).

        Returns
        -------
        (N, K) array of x's dtype (float64 for integer input) and kind: a torch tensor for torch
        input, a CuPy array for CuPy input; CuPy arrays and CUDA tensors are embedded on their GPU.
        """
        if _arrays.is_device(x):
            from .._adapters import cuda as _cuda

            return _cuda.embed(self, x, out)
        xn = _validate.real_array("x", x)
        if not xn.dtype.isnative:  # byte-swapped input: to native order first
            xn = xn.astype(xn.dtype.newbyteorder("="))
        xn = _validate.coords_1d("x", xn)
        xn = _validate.separate(out, xn)
        result = self._embed(xn, out)
        return result if out is not None else _arrays.like(result, x)

    def _embed(self, x: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The compiled embedder on any finite float32/float64 x (no range check)."""
        width = self.K
        self._check_call_budget(x.shape[0], x.dtype.itemsize if out is None else 0)
        if out is None:
            out = np.empty((x.shape[0], width), dtype=x.dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a NumPy array, got {type(out).__name__}")
            if out.shape != (x.shape[0], width):
                raise ValueError(f"out must have shape {(x.shape[0], width)}, got {out.shape}")
            if out.dtype != x.dtype:
                raise ValueError(f"out must have dtype {x.dtype} (that of x), got {out.dtype}")
            if not out.flags.writeable:
                raise ValueError("out must be writeable")
        self._run_kernel(_arrays.describe(x, "x"), _arrays.describe(out, "out"))
        return out

    def _parameter_bytes(self) -> int:
        """Bytes an embedding call allocates for the embedder's parameters (0: none)."""
        return 0

    def _check_call_budget(self, N: int, itemsize: int, temporaries: int = 1) -> None:
        """MemoryError naming x and K, before anything is allocated, when embedding N coordinates
        (an (N, K) output of ``itemsize`` bytes, ``temporaries`` of them) and the parameters the
        call computes are over the memory budget."""
        features = "K + 2 margin" if getattr(self, "margin", 0) else "K"
        name = f"x (N = {N}) x {features} (= {self.K})"
        out = _validate.size_product(name, (N, self.K, itemsize, temporaries))
        _validate.check_budget(name, out + self._parameter_bytes(),
                               "embed fewer coordinates at once, or use fewer features")

    def _run_kernel(self, x: "_arrays.Array", out: "_arrays.Array", workspace=None) -> None:
        """The compiled embedder (host or CUDA, by where x lives) from descriptors x (N,) and
        out (N, K); ``workspace``: device scratch for the CUDA Fourier kernel."""
        kind, args = self._kernel_args()
        cuda = _arrays.on_device(x)
        if kind == "basis":
            fn = _core.cuda_embed_basis if cuda else _core.embed_basis
            fn(x, out, args["kind"], args["first_index"], args["K_base"], args["param"],
               args["degree"], args["seed"])
        else:
            omega = np.ascontiguousarray(args["omega"], dtype=np.float64)
            extra = (workspace,) if cuda else ()
            fn = _core.cuda_embed_fourier if cuda else _core.embed_fourier
            fn(x, out, _arrays.describe(omega, "omega"), args["layout"], args["include_input"],
               args["amplitude"], *extra)

    def _kernel_args(self) -> Tuple[str, Dict[str, Any]]:  # pragma: no cover - every family overrides
        """("basis", kwargs of reference.embed_basis) or ("fourier", kwargs of reference.embed_fourier)."""
        raise NotImplementedError

    def reference(self, x) -> np.ndarray:
        """The NumPy oracle (kronpe.reference) of this embedder, for tests."""
        from .. import reference

        xn = _validate.coords_1d("x", _arrays.to_numpy(x, "x"))
        self._check_call_budget(xn.shape[0], 8, temporaries=3)  # the formulas' float64 temporaries
        kind, args = self._kernel_args()
        if kind == "basis":
            return reference.embed_basis(xn, K=self.K, **args)
        return reference.embed_fourier(xn, **args)

    # -- distances -------------------------------------------------------------------------

    @property
    def _quadrature_weight(self) -> float:
        """Factor that turns the sampled distance into the continuous one of ``distance``."""
        return 1.0

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        """The closed-form distance the blending kernels can evaluate for this embedder:
        ``(kind, param)`` with kind one of "gaussian" (exp(-param d^2)), "bspline3"
        (B3(|d| param)), "tri" (max(1 - |d| param, 0)) or "tri_sq" (its square), up to scale;
        None when there is none (the weights then come from :meth:`distance`). Families with a
        closed form override this; :class:`kronpe.BlendingMatrix` uses it only after checking it
        against :meth:`distance`, so a subclass that changes the distance stays correct."""
        return None

    def distance(self, delta) -> np.ndarray:
        """Embedded distance D(delta) = <Psi(x1), Psi(x2)> as a function of delta = x1 - x2.

        Families with a closed form (docs/math/analysis.rst, "Embedded distance") override this
        with it (the continuous integral over centres or frequencies). The others return
        ``sampled_distance(delta, scaled=True)``. Vectorised over any shape of ``delta``.
        """
        return self.sampled_distance(delta, scaled=True)

    def sampled_distance(self, delta, x=None, *, scaled: bool = False, samples: int = 64) -> np.ndarray:
        """Inner product of the sampled embeddings, sum_k Psi(x)_k Psi(x - delta)_k.

        Parameters
        ----------
        delta : array
            Offsets x1 - x2 (any shape).
        x : array, optional
            Positions x1 (broadcast with ``delta``). When omitted the inner product is averaged
            over positions: over one centre spacing in the middle of the domain for shifted
            bases (the integral over a period of the centre lattice), over the x in [0, 1] with
            x - delta in [0, 1] otherwise; Fourier features need no average (they are exactly
            shift-invariant).
        scaled : bool
            Multiply by the quadrature weight that makes it comparable with ``distance`` (the
            centre spacing for shifted bases, sqrt(2 pi) sigma / (K/2) for RFF, else 1).
        samples : int
            Positions in the average.
        """
        delta = _finite_array("delta", delta)
        samples = _validate.positive_int("samples", samples)
        if x is None:
            d = self._mean_sampled_distance(delta.ravel(), samples).reshape(delta.shape)
        else:
            x = _finite_array("x", x)
            try:
                shape = np.broadcast_shapes(x.shape, delta.shape)
            except ValueError:
                raise ValueError(f"x must broadcast with delta: got shapes {x.shape} and {delta.shape}") from None
            _validate.check_array_budget("x and delta", shape, 8 * 3, "pass fewer positions or offsets")
            x1, d2 = np.broadcast_arrays(x, delta)
            x1 = np.ascontiguousarray(x1).ravel()
            e1 = self._embed(x1)
            e2 = self._embed(x1 - np.ascontiguousarray(d2).ravel())
            d = np.einsum("nk,nk->n", e1, e2).reshape(d2.shape)
        return d * self._quadrature_weight if scaled else d

    def _average_positions(self, samples: int) -> Tuple[np.ndarray, bool]:
        """Positions x1 of the average, and whether pairs leaving [0, 1] are dropped."""
        return (np.arange(samples) + 0.5) / samples, True

    def _mean_sampled_distance(self, delta: np.ndarray, samples: int) -> np.ndarray:  # (M,) -> (M,)
        # the positions and their embeddings
        _validate.check_array_budget("samples", (samples, self.K + 1), 8, "use fewer samples")
        x1, mask_outside = self._average_positions(samples)
        e1 = self._embed(x1)  # (G, K)
        G, K = e1.shape
        out = np.empty(delta.shape[0])
        step = max(1, _CHUNK_ELEMENTS // max(1, G * K))
        for start in range(0, delta.shape[0], step):  # chunks of offsets, not points
            d = delta[start:start + step]
            x2 = x1[None, :] - d[:, None]  # (m, G)
            e2 = self._embed(x2.ravel()).reshape(d.shape[0], G, K)
            prod = np.einsum("mgk,gk->mg", e2, e1)
            if mask_outside:
                valid = (x2 >= 0.0) & (x2 <= 1.0)
                count = valid.sum(axis=1)
                total = np.where(valid, prod, 0.0).sum(axis=1)
                out[start:start + step] = np.where(count > 0, total / np.maximum(count, 1), 0.0)
            else:
                out[start:start + step] = prod.mean(axis=1)
        return out

    def stable_rank_bound(self, N: int) -> float:
        """Theoretical stable rank of the (N, K) embedding matrix of N coordinates."""
        _validate.positive_int("N", N)
        raise NotImplementedError(f"{type(self).__name__} has no theoretical stable-rank bound")


class _Nyquist:
    """Nyquist check (of the neuraloperator sinusoidal-embeddings tutorial) for embedders with a
    highest frequency.

    Subclasses define ``_base_frequency()`` -> (the highest frequency before frequency
    modulation, in cycles over [0, 1], and the formula that gives it), ``_modulation`` and
    optionally ``_nyquist_hint(N)``.
    """

    _modulation = 1.0

    def _base_frequency(self) -> Tuple[float, str]:  # pragma: no cover
        raise NotImplementedError

    def _nyquist_hint(self, N: int) -> str:
        return ""

    @property
    def highest_frequency(self) -> float:
        """The highest frequency in cycles over [0, 1] (after frequency modulation)."""
        return self._base_frequency()[0] * self._modulation

    def nyquist_limit(self, N: int) -> float:
        """N / (2 m): the bound the unmodulated highest frequency must stay below for N samples."""
        N = _validate.positive_int("N", N)
        return N / (2.0 * self._modulation)

    def check_nyquist(self, N: int, action: str = "warn") -> bool:
        """Whether the highest frequency is below the Nyquist limit of N samples of [0, 1).

        Parameters
        ----------
        N : int
            Number of (equally spaced) samples.
        action : {"warn", "raise", "ignore"}
            What to do on a violation: a NyquistWarning, a ValueError, or nothing.
        """
        if action not in ("warn", "raise", "ignore"):
            raise ValueError(f"action must be 'warn', 'raise' or 'ignore', got {action!r}")
        limit = self.nyquist_limit(N)
        f, formula = self._base_frequency()
        if f < limit:
            return True
        message = (
            f"{self!r} violates the Nyquist limit for N = {N} samples of [0, 1): its highest "
            f"frequency {formula} = {f:g} cycles over [0, 1] must stay below N / (2 m) = "
            f"{N} / (2 * {self._modulation:g}) = {limit:g} (m = frequency modulation)"
            f"{self._nyquist_hint(N)}"
        )
        if action == "raise":
            raise ValueError(message)
        if action == "warn":
            warnings.warn(message, NyquistWarning, stacklevel=2)
        return False
