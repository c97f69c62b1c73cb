"""2x upsampling of box-downsampled photographs: ``kronpe.upsample`` against Pillow and SciPy.

The round trip on every sample photograph of ``kronpe.data.SAMPLES`` (native size,
cropped to even sides; scikit-image's 512 x 512 moon is a 2x pixel-replicated 256 x 256 image,
each 2 x 2 block one value, so it is used at 256 x 256, its real resolution: at 512 the round trip
is exact for pixel replication and measures nothing else): box-downsample 2x (means of 2 x 2 blocks), upsample back to the original
size, PSNR against the original (outputs clipped to [0, 1], as a picture written to a file is).
Methods, one group per photograph:

- kronpe: ``kronpe.upsample(low, 2)`` (float32), cold: its per-axis operators are built in every
  round (the cache emptied), as a user upsampling one photograph pays for them;
- kronpe warm: the same with the operators cached (a second photograph of the same size);
- Pillow: ``Image.resize(..., BICUBIC)`` on float ("F" mode) channels, so that no uint8 rounding
  costs it PSNR;
- SciPy: ``ndimage.map_coordinates(order=3, mode="reflect")`` per channel at the right pixel
  centres (output pixel centre (j + 0.5) / 2 - 0.5 in input pixels), prefilter included.

Every benchmark asserts the PSNR of its method; kronpe's asserts it is at least both peers'.
``python benches/bench_upsample.py [ROUNDS]`` prints the Markdown table of benches/README.md: the
methods timed by kronpe.bench's harness (interleaved round by round), median times and their ratios.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import run_timed  # (puts the source tree on sys.path)

PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "motorcycle", "immunohistochemistry",
          "hubble_deep_field", "retina", "moon", "coins", "brick", "grass", "gravel", "clock", "page")


def box2(img: np.ndarray) -> np.ndarray:
    """Means of 2 x 2 blocks (the sides must be even)."""
    h, w = img.shape[:2]
    return img.reshape(h // 2, 2, w // 2, 2, *img.shape[2:]).mean(axis=(1, 3), dtype=np.float64).astype(img.dtype)


_PHOTO_CACHE: dict = {}


def photo(name: str):
    """(original cropped to even sides, its 2x box-downsample), float32."""
    if name not in _PHOTO_CACHE:
        from kronpe import data

        img = data.load_sample(name)
        img = np.ascontiguousarray(img[: img.shape[0] // 2 * 2, : img.shape[1] // 2 * 2])
        while np.array_equal(img, img[::2, ::2].repeat(2, axis=0).repeat(2, axis=1)):
            img = np.ascontiguousarray(img[::2, ::2])  # a pixel-replicated upscale: its real pixels
        _PHOTO_CACHE[name] = (img, box2(img))
    return _PHOTO_CACHE[name]


def _channels(low: np.ndarray):
    return [low] if low.ndim == 2 else [low[..., c] for c in range(low.shape[2])]


def _stack(chans, like):
    return chans[0] if like.ndim == 2 else np.stack(chans, axis=-1)


def kronpe_cold(low):
    import kronpe.resampling as rs

    rs._CACHE.clear()
    return rs.upsample(low, 2)


def kronpe_warm(low):
    import kronpe

    return kronpe.upsample(low, 2)


def pillow(low):
    from PIL import Image

    h, w = low.shape[:2]
    out = [np.asarray(Image.fromarray(np.ascontiguousarray(c, dtype=np.float32), mode="F")
                      .resize((2 * w, 2 * h), Image.BICUBIC)) for c in _channels(low)]
    return _stack(out, low)


def scipy_spline(low):
    from scipy import ndimage

    h, w = low.shape[:2]
    rows = (np.arange(2 * h) + 0.5) / 2 - 0.5
    cols = (np.arange(2 * w) + 0.5) / 2 - 0.5
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    out = [ndimage.map_coordinates(c, [rr, cc], order=3, mode="reflect") for c in _channels(low)]
    return _stack(out, low)


METHODS = {"kronpe": kronpe_cold, "kronpe warm": kronpe_warm, "Pillow bicubic": pillow,
           "SciPy cubic spline": scipy_spline}


def score(name: str, up: np.ndarray) -> float:
    from kronpe import data

    img = photo(name)[0]
    return data.psnr(img, np.clip(np.asarray(up, np.float64), 0.0, 1.0))


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("method", list(METHODS))
def test_upsample_2x(benchmark, name, method):
    benchmark.group = f"upsample 2x: {name}"
    low = photo(name)[1]
    up = run_timed(benchmark, METHODS[method], 5, low)
    psnr = score(name, up)
    benchmark.extra_info["psnr_db"] = round(psnr, 3)
    assert psnr > 20, f"{method} on {name}: {psnr:.2f} dB"
    if method.startswith("kronpe"):
        peers = [score(name, METHODS[m](low)) for m in ("Pillow bicubic", "SciPy cubic spline")]
        assert psnr >= max(peers), f"kronpe {psnr:.2f} dB < a peer {max(peers):.2f} dB on {name}"


def table(rounds: int = 7) -> str:
    """The Markdown table: PSNR (dB) and median time (ms) per photograph and method, timed by
    kronpe.bench's harness (interleaved round by round); ratios are kronpe's time over each peer's."""
    from kronpe.bench.harness import Case, Method, measure

    names = list(METHODS)
    lines = ["| photo | size | " + " | ".join(f"{m} dB | {m} ms" for m in names)
             + " | kronpe / SciPy time | kronpe / Pillow time |",
             "|---|---|" + "---:|" * (2 * len(names) + 2)]
    for photo_name in PHOTOS:
        img, low = photo(photo_name)
        ms = [Method(m, lambda s, f=fn: f(s["low"]), peer=not m.startswith("kronpe")) for m, fn in METHODS.items()]
        case = Case("upsample", f"upsample 2x: {photo_name}", lambda low=low: {"low": low}, ms,
                    check=lambda s, m, up, n=photo_name: {"psnr": score(n, up)}, rounds=rounds)
        recs = {r["name"]: r for r in measure(case)}
        med = {m: 1e3 * recs[m]["stats"]["median"] for m in names}
        cells = " | ".join(f"{recs[m]['extra_info']['psnr']:.2f} | {med[m]:.1f}" for m in names)
        lines.append(f"| {photo_name} | {img.shape[1]}x{img.shape[0]} | {cells} | "
                     f"{med['kronpe'] / med['SciPy cubic spline']:.2f} | {med['kronpe'] / med['Pillow bicubic']:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
