"""Errors for bad input: one line that names the field, the value and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """Invalid user input. The CLI prints ``str(err)`` on one line and exits with status 2.

    ``related`` names the other fields the error depends on (``simulation.fidelity=detailed``
    refuses ``strategy.collective=tree``: a sweep over either field makes it a rejected
    combination, not a config error). Picklable, so a worker process can raise it."""

    def __init__(self, field: str, value: Any, allowed: str | Iterable[str], related: Iterable[str] = ()) -> None:
        if not isinstance(allowed, str):
            allowed = "one of " + ", ".join(sorted(str(a) for a in allowed))
        self.field = field
        self.value = value
        self.allowed = allowed
        self.related = tuple(related)
        super().__init__(f"{field}: got {_one_line(value)}; allowed: {_one_line_text(allowed)}")

    def __reduce__(self):
        # ValueError pickles as cls(*self.args), i.e. with the message alone: rebuild from the fields
        return (type(self), (self.field, self.value, self.allowed, self.related))

    @property
    def fields(self) -> tuple[str, ...]:
        """The field and the related ones."""
        return (self.field, *self.related)


def _one_line(value: Any, limit: int = 200) -> str:
    """``repr(value)`` on one line, abbreviated past ``limit`` characters."""
    text = repr(value)
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.replace("\n", "\\n").replace("\r", "\\r")


def _one_line_text(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ")


def _describe(kind: str, allow_zero: bool, allow_inf: bool, maximum: float | None) -> str:
    sign = "non-negative" if allow_zero else "positive"
    finite = "" if allow_inf or kind == "integer" else "finite "
    text = f"a {finite}{sign} {kind}"
    if maximum is not None:
        text += f" at most {maximum:,}" if isinstance(maximum, int) else f" at most {maximum:g}"
    return text


def require_positive(field: str, value: Any, *, integer: bool = False, allow_zero: bool = False,
                     allow_inf: bool = False, maximum: float | None = None, why: str = "") -> Any:
    """Return ``value`` if it is a positive number (an int when ``integer``), else raise.

    NaN is always refused, infinity unless ``allow_inf`` (a time that never comes, an interval
    with no checkpoint); ``maximum`` caps it, ``why`` says why in the error."""
    kind = "integer" if integer else "number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    allowed = _describe(kind, allow_zero, allow_inf, maximum) + (f" ({why})" if why else "")
    if isinstance(value, bool) or not ok_type:
        raise ConfigError(field, value, allowed)
    if value != value or value < 0 or (value == 0 and not allow_zero):  # value != value: NaN
        raise ConfigError(field, value, allowed)
    if not allow_inf and not integer and math.isinf(value):
        raise ConfigError(field, value, allowed)
    if maximum is not None and value > maximum:
        raise ConfigError(field, value, allowed)
    return value


def require_choice(field: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    try:
        known = value in allowed
    except TypeError:  # an unhashable value (a list, a mapping) against a dict's keys
        known = False
    if not isinstance(value, str) or not known:
        raise ConfigError(field, value, allowed)
    return str(value)


def require_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field, value, "true or false")
    return value


def require_mapping(field: str, value: Any, allowed: str = "a mapping") -> dict[str, Any]:
    """``value`` if it is a mapping with string keys, else a ConfigError saying ``allowed``."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(field, value, allowed)
    return value


def reject_unknown_keys(section: str, given: dict[str, Any], known: Iterable[str]) -> None:
    known = set(known)
    unknown = sorted((k for k in given if k not in known), key=str)
    if unknown:
        raise ConfigError(f"{section}.{unknown[0]}", given[unknown[0]], "known keys: " + ", ".join(sorted(known)))
