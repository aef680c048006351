"""Unit conversions, in one place.

Everything inside scalebench is SI: seconds, bytes, bytes per second, FLOP and FLOP/s.
Catalog and config files carry the unit in the key name (``latency_us``,
``bandwidth_Gbps``, ``peak_tflops``) and are converted here exactly once, at load.
Decimal prefixes (1e9, 1e12) throughout, as vendors quote them; binary prefixes only
where the name says so (``bucket_mib``).
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3


def us_to_s(value_us: float) -> float:
    return value_us * 1e-6


def ns_to_s(value_ns: float) -> float:
    return value_ns * 1e-9


def gbit_per_s_to_Bps(value_gbps: float) -> float:
    """Gigabits per second (network line rates) to bytes per second."""
    return value_gbps * 1e9 / 8.0


def gbyte_per_s_to_Bps(value_GBps: float) -> float:
    """Gigabytes per second (memory, NVLink, PCIe figures) to bytes per second."""
    return value_GBps * 1e9


def tflops_to_flops(value_tflops: float) -> float:
    return value_tflops * 1e12


def mib_to_bytes(value_mib: float) -> int:
    return int(round(value_mib * MIB))


def human_bytes(n_bytes: float) -> str:
    """Binary-prefixed size for people: 1.5 KiB, 25.0 MiB."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_seconds(t_s: float) -> str:
    """Seconds for people: 12.3 us, 4.56 ms, 1.23 s."""
    if t_s == 0:
        return "0 s"
    if abs(t_s) < 1e-3:
        return f"{t_s * 1e6:.1f} us"
    if abs(t_s) < 1:
        return f"{t_s * 1e3:.2f} ms"
    if abs(t_s) < 1e6:
        return f"{t_s:.3f} s"
    return f"{t_s:.3g} s"  # 1.6e+10 s, not eleven digits (or three hundred)


_SIZE_SUFFIX = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1024 * GIB}


def parse_bytes(field: str, text: str | int | float) -> int:
    """'8', '256K', '1M', '1G' (binary, as nccl-tests' -b/-e read them) to bytes; a bad size is a
    one-line error naming the field."""
    from sim.errors import ConfigError

    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _SIZE_SUFFIX and value[-1:] != "" else ""
    number = value[: len(value) - len(unit)] if unit else value
    try:
        size = float(number) * _SIZE_SUFFIX[unit]
    except ValueError:
        raise ConfigError(field, text, "a size in bytes such as 8, 256K, 64M, 1G") from None
    if not (size >= 1 and size < float("inf")) or size != int(size):
        raise ConfigError(field, text, "a whole number of bytes >= 1 (such as 8, 256K, 64M, 1G)")
    return int(size)


UNIT_BYTES = {"bytes": 1, "MiB": MIB, "GiB": GIB}
"""The size units config keys carry in their names (``mtu_bytes``, ``bucket_mib``, ``memory_GiB``)."""


def require_size(field: str, value: object, unit: str, *, integer: bool = False, maximum: float | None = None,
                 why: str = "") -> float:
    """A size key of a config in the unit its name carries (``unit``: bytes, MiB or GiB): a
    number in that unit, or a size written as on the command line (``9K``, ``256M``, ``1G``:
    ``parse_bytes``, binary) converted to it; a quoted plain number is in the key's unit too.
    ``integer``: a whole number of that unit (an MTU); ``maximum`` (in ``unit``) caps it, ``why`` says why.
    One-line error naming the field otherwise."""
    from sim.errors import require_positive

    scale = UNIT_BYTES[unit]
    if isinstance(value, str) and not isinstance(value, bool):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            number = parse_bytes(field, text) / scale
        value = int(number) if integer and number == int(number) else number
    allowed_note = f"in {unit}, or a size such as 9K, 256M, 1G" + (f"; at most {why}" if why else "")
    if integer and isinstance(value, float) and value.is_integer():
        value = int(value)
    return require_positive(field, value, integer=integer, maximum=maximum, why=allowed_note)
