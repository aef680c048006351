"""Atomic file writes: a result file is either complete or absent, never half-written.

Files get the permissions of any file the user creates (0666 less the umask): tempfile.mkstemp
makes them 0600, which left every result unreadable to the user's group. JSON is strict
(RFC 8259): NaN and infinities, which Python's json writes as bare NaN / Infinity tokens that
other tools reject, become null.

A Ctrl-C or SIGTERM that arrives while a file is being written waits until the file is in place
(or removed): Python runs signal handlers between any two bytecodes, so an interrupt landing
between the temporary file's creation and the ``try`` that removes it on failure would leave it
behind (CI caught a ``.<id>.json.*.tmp`` in a results directory after Ctrl-C on ``run``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError

PATH_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT,
               errno.ENAMETOOLONG)
"""Errors of the output path itself (the user's to change): a ConfigError, exit status 2. Others
(a full disk, an I/O error) stay OSErrors: the CLI prints them on one line with status 1."""


def _open_beside(path: Path) -> tuple[int, str]:
    """mkdir the parent and open a temporary file beside ``path``; a bad path is a ConfigError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600, opened to what any new file of the user gets
        return fd, tmp
    except OSError as err:
        if err.errno not in PATH_ERRNOS:
            raise
        raise ConfigError("output", str(path), f"a writable file path ({err.strerror or err}"
                          f"{': ' + str(err.filename) if err.filename and str(err.filename) != str(path) else ''})") from None


def _umask() -> int:
    """The process umask (os.umask can only be read by setting it; it is set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM that arrive inside the block and deliver them, to the handlers they
    had, once it is over. Handlers belong to the main thread: elsewhere (and where the Python
    handler is not ours to replace) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    for signum in DEFERRED_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is None or handler == signal.SIG_IGN:  # set outside Python, or ignored: leave it
            continue
        previous[signum] = signal.signal(signum, lambda received, _frame: held.append(received))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for pending in dict.fromkeys(held):
            signal.raise_signal(pending)  # now, to the handler it had (KeyboardInterrupt for SIGINT)


def _write_beside(path: Path, mode: str, write: Callable[[IO[Any]], object]) -> Path:
    """Write through ``write(fh)`` into a temporary file beside ``path``, then rename it into
    place; the temporary file never outlives the call, whatever interrupts it."""
    with interrupts_deferred():
        fd, tmp = _open_beside(path)
        try:
            fh: IO[Any] = os.fdopen(fd, "wb") if "b" in mode else os.fdopen(fd, "w", encoding="utf-8", newline="")
            with fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def atomic_write(path: str | Path, write: Callable[[IO[str]], object]) -> Path:
    """Write through ``write(fh)`` into a temporary file beside ``path``, then rename it into place."""
    return _write_beside(Path(path), "w", write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda fh: fh.write(text))


def strict_json(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, inf: 'not measured', 'never') replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [strict_json(v) for v in data]
    if hasattr(data, "item") and callable(data.item) and getattr(data, "shape", None) == ():  # numpy scalars
        return strict_json(data.item())
    return data


def json_text(data: Any, indent: int | None = 1) -> str:
    """Strict JSON text of ``data`` (strict_json, then allow_nan=False); other objects as str()."""
    return json.dumps(strict_json(data), indent=indent, default=str, allow_nan=False)


def atomic_write_json(path: str | Path, data: Any, *, strict: bool = True) -> Path:
    """``strict=False`` only for files our own processes read back as numbers (a rank's result for
    its launcher, the validation's measurement caches), where NaN means 'not measured'."""
    if not strict:
        return atomic_write(path, lambda fh: json.dump(data, fh, indent=1, default=str))
    return atomic_write(path, lambda fh: fh.write(json_text(data)))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """For images and other binary outputs."""
    return _write_beside(Path(path), "wb", lambda fh: fh.write(data))


def portable_path(path: str | Path) -> str:
    """``path`` as a file written for others may hold it: relative to the working directory when
    inside it, else to scalebench's own checkout, else only its last two parts (a report names its
    inputs; a machine's absolute layout, /home/<user>/..., is nobody else's)."""
    here = Path(path)
    absolute = here.resolve() if not here.is_absolute() else here
    for root in (Path.cwd().resolve(), Path(__file__).resolve().parents[1]):
        try:
            return absolute.relative_to(root).as_posix() or "."
        except ValueError:
            continue
    return here.as_posix() if not here.is_absolute() else "/".join(("...", *absolute.parts[-2:]))


def check_writable(field: str, path: str | Path, *, directory: bool = False) -> Path:
    """Refuse, before any work, an output ``path`` that cannot be written: under a file, a
    directory where a file goes (or the reverse), a read-only location. Creates nothing: it
    writes and removes one temporary file in the nearest existing directory above ``path``."""
    path = Path(path)
    if path.exists() and path.is_dir() != directory:
        raise ConfigError(field, str(path), f"a path for {'a directory' if directory else 'a file'} "
                          f"({path} is {'a directory' if path.is_dir() else 'a file'})")
    existing = path if directory else path.parent
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a dangling link: mkdir would fail on it
            raise ConfigError(field, str(path), f"a writable location ({existing} is a dangling link)")
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(field, str(path), f"a path under a directory ({existing} is a file)")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".scalebench-write-check.", dir=existing)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise ConfigError(field, str(path), f"a writable location ({existing}: {err.strerror or err})") from None
    return path
def format_rows(rows: list[dict[str, Any]], fmt: str) -> str:
    """Result rows as strict JSON (``fmt='json'``) or CSV text."""
    if fmt == "json":
        return json_text(rows) + "\n"
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
