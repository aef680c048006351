"""Errors for bad input: one line that names the field, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """Invalid user input. The CLI prints ``str(err)`` on one line and exits with status 2."""

    def __init__(self, field: str, value: Any, allowed: str | Iterable[str]) -> None:
        if not isinstance(allowed, str):
            allowed = "one of " + ", ".join(sorted(str(a) for a in allowed))
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")


def require_positive(field: str, value: Any, *, integer: bool = False, allow_zero: bool = False) -> Any:
    """Return ``value`` if it is a positive number (an int when ``integer``), else raise."""
    kind = "integer" if integer else "number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ConfigError(field, value, f"a {'non-negative' if allow_zero else 'positive'} {kind}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:  # NaN check
        raise ConfigError(field, value, f"a {'non-negative' if allow_zero else 'positive'} {kind}")
    return value


def require_choice(field: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(field, value, allowed)
    return str(value)


def reject_unknown_keys(section: str, given: dict[str, Any], known: Iterable[str]) -> None:
    known = set(known)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"{section}.{unknown[0]}", given[unknown[0]], "known keys: " + ", ".join(sorted(known)))
