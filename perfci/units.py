"""The one place units are converted and parsed."""

from __future__ import annotations

import math


def parse_fraction(value: object, *, what: str = "threshold") -> float:
    """'3%', '2.5%', '0.03' or 0.03 -> 0.03. Raises ValueError naming the accepted forms."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a number: write e.g. '3%', '2.5%' or 0.03") from None
    if not math.isfinite(number) or not 0 < number < 1:
        raise ValueError(f"{what} {value!r} must be between 0% and 100% (e.g. '3%' or 0.03)")
    return number


def tflops(flops: float, time_ms: float) -> float:
    return flops / (time_ms * 1e-3) / 1e12


def gbps(bytes_moved: float, time_ms: float) -> float:
    return bytes_moved / (time_ms * 1e-3) / 1e9


def format_time_ms(time_ms: float) -> str:
    """Human time from milliseconds: 12.3 us, 1.234 ms, 2.5 s."""
    if time_ms < 1.0:
        return f"{time_ms * 1e3:.3g} us"
    if time_ms < 1000.0:
        return f"{time_ms:.4g} ms"
    return f"{time_ms / 1e3:.3g} s"


def format_bytes(n_bytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"
