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
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError

PATH_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT,
               errno.ENAMETOOLONG, errno.ELOOP)
"""Errors of the output path itself (the user's to change): a ConfigError, exit status 2. Others
(a full disk, an I/O error) stay OSErrors, with the file named: the CLI prints them on one line
with status 1."""


def _kind(mode: int) -> str:
    """What a path is, in words, from its st_mode."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _output_error(path: Path, allowed: str) -> ConfigError:
    return ConfigError("output", str(path), allowed)


def output_target(path: str | Path) -> tuple[Path, os.stat_result | None]:
    """Where a write to ``path`` lands, and what is there now (None: nothing yet).

    A symlink is followed to its final target (the link stays a link, its target gets the new
    content; renaming over the link would replace it and leave the target stale); a link whose
    target does not exist yet names the file to create, in a directory that must exist. A loop
    is a ConfigError."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:  # ELOOP, EACCES, ENOTDIR ...
        raise _output_error(path, f"a writable file path ({err.strerror or err})") from None
    if not path.is_symlink():
        return path, st
    if st is not None and not stat.S_ISREG(st.st_mode):
        return path, st  # a device, a pipe (or /dev/fd/N, a link the kernel resolves itself): opened as given
    target = Path(os.path.realpath(path))
    if st is None and not target.parent.is_dir():
        raise _output_error(path, f"a writable file path ({path} is a link to {os.readlink(path)}, which is in no "
                                  "existing directory)")
    return target, st


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


_HELD_PIPES: dict[str, int] = {}
"""Named pipes check_writable opened for writing (with a reader there), kept open until the write:
closing the probe would end the reader's input before the real content came."""


def _open_through(path: Path, st: os.stat_result) -> int:
    """A descriptor to write into a character device or a named pipe as it is (no temporary file,
    no rename: the node stays what it is). A pipe nobody reads is a ConfigError, not a hang."""
    held = _HELD_PIPES.pop(str(path), None)
    if held is not None:
        return held
    fifo = stat.S_ISFIFO(st.st_mode)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | (os.O_NONBLOCK if fifo else 0))
    except OSError as err:
        if err.errno == errno.ENXIO and fifo:
            raise _output_error(path, "a named pipe that a process reads (nobody has it open for reading)") from None
        if err.errno in PATH_ERRNOS:
            raise _output_error(path, f"a writable file path ({err.strerror or err})") from None
        raise _named(err, path) from None
    if fifo:
        os.set_blocking(fd, True)
    return fd


def _named(err: OSError, path: Path) -> OSError:
    """``err`` with the file it concerns (a full disk said '[Errno 28] No space left on device' and no file)."""
    if err.filename:
        return err
    return type(err)(err.errno, err.strerror or str(err), str(path))


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
    place; the temporary file never outlives the call, whatever interrupts it.

    Only regular files are replaced so: a character device (/dev/null, a full device) or a named
    pipe is written as it is (a rename would replace the node with a file), a symlink's target is
    written (sim.fileio.output_target), anything else (a block device, a socket) is refused."""
    target, st = output_target(path)
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            raise _output_error(path, f"a regular file, a character device or a named pipe ({path} is {_kind(st.st_mode)})")
        return _write_through(path, st, mode, write)
    with interrupts_deferred():
        fd, tmp = _open_beside(target)
        try:
            fh: IO[Any] = os.fdopen(fd, "wb") if "b" in mode else os.fdopen(fd, "w", encoding="utf-8", newline="")
            with fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            now = _lstat(target)
            if now is not None and not stat.S_ISREG(now.st_mode):  # it changed under us: never rename over a node
                raise _output_error(path, f"a regular file ({target} became {_kind(now.st_mode)} while it was written)")
            os.replace(tmp, target)
        except OSError as err:
            Path(tmp).unlink(missing_ok=True)
            raise _named(err, target) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _write_through(path: Path, st: os.stat_result, mode: str, write: Callable[[IO[Any]], object]) -> Path:
    fd = _open_through(path, st)
    try:
        fh: IO[Any] = os.fdopen(fd, "wb") if "b" in mode else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with fh:
            write(fh)
            fh.flush()
    except OSError as err:
        if err.errno == errno.EPIPE:  # the pipe's reader went away
            raise _output_error(path, "a named pipe whose reader stays until the end (it closed its end)") from None
        raise _named(err, path) from None
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
    directory where a file goes (or the reverse), a read-only location, a symlink loop, a block
    device or a socket, a named pipe nobody reads. Creates nothing: it writes and removes one
    temporary file in the nearest existing directory above ``path`` (or its symlink's target).
    A character device or a named pipe is checked as it is (it is written through, not replaced)."""
    path = Path(path)
    try:
        target, st = output_target(path)
    except ConfigError as err:
        raise ConfigError(field, str(path), err.allowed) from None
    if st is not None and stat.S_ISDIR(st.st_mode) != directory:
        raise ConfigError(field, str(path), f"a path for {'a directory' if directory else 'a file'} "
                          f"({path} is {_kind(st.st_mode)})")
    if st is not None and not directory and not stat.S_ISREG(st.st_mode):
        return _check_node(field, path, st)
    existing = target if directory else target.parent
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


def _check_node(field: str, path: Path, st: os.stat_result) -> Path:
    """An existing output that is not a regular file: a character device or a named pipe that this
    process may write (a pipe with a reader: its descriptor is kept for the write, _HELD_PIPES)."""
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise ConfigError(field, str(path), f"a regular file, a character device or a named pipe ({path} is "
                          f"{_kind(st.st_mode)})")
    try:
        fd = _open_through(path, st)
    except ConfigError as err:
        raise ConfigError(field, str(path), err.allowed) from None
    except OSError as err:
        raise ConfigError(field, str(path), f"a writable file ({err.strerror or err})") from None
    if stat.S_ISFIFO(st.st_mode):
        old = _HELD_PIPES.pop(str(path), None)
        if old is not None:
            os.close(old)
        _HELD_PIPES[str(path)] = fd
    else:
        os.close(fd)
    return path


MAX_INPUT_BYTES = 16 * 2**20
"""A config, catalog, trace summary or layer table is KiB to MiB; past this it is not one (a dataset, /dev/zero)."""
PIPE_FIRST_BYTE_S = 2.0
"""How long a pipe given as an input file (``<(...)``, a named pipe) may take to send its first bytes."""
PIPE_READ_S = 10.0
"""... and its whole content, up to its end of file."""


def read_input_bytes(field: str, path: str | Path, *, what: str = "a readable file",
                     limit_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file, bounded in time and memory: a regular file of at most
    ``limit_bytes``, or a pipe whose writer delivers that within PIPE_READ_S; a directory, a
    device, a named pipe nobody writes to, a missing or unreadable path is a ConfigError naming
    ``field`` and saying ``what`` is allowed."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a pipe without a writer must not block
    except OSError as err:
        raise ConfigError(field, str(path), f"{what} ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if st.st_size > limit_bytes:
                raise ConfigError(field, str(path), f"{what} of at most {_size(limit_bytes)} (it has {_size(st.st_size)})")
            os.set_blocking(fd, True)
            data = _read_all(fd, limit_bytes + 1)
        elif stat.S_ISFIFO(st.st_mode):
            data = _read_pipe(fd, field, path, what, limit_bytes)
        else:
            raise ConfigError(field, str(path), f"{what}: a regular file or a pipe ({path} is {_kind(st.st_mode)})")
    except OSError as err:
        raise ConfigError(field, str(path), f"{what} ({err.strerror or err})") from None
    finally:
        os.close(fd)
    if len(data) > limit_bytes:
        raise ConfigError(field, str(path), f"{what} of at most {_size(limit_bytes)}")
    return data


def read_input_text(field: str, path: str | Path, *, what: str = "a readable file",
                    limit_bytes: int = MAX_INPUT_BYTES) -> str:
    """``read_input_bytes`` as UTF-8 text; a binary file is a ConfigError naming the first bad byte."""
    data = read_input_bytes(field, path, what=what, limit_bytes=limit_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(field, str(path), f"{what}: UTF-8 text (byte {err.start} is not UTF-8: a binary file?)") from None


def _read_pipe(fd: int, field: str, path: Path, what: str, limit_bytes: int) -> bytes:
    """A pipe's content up to its end of file: the first bytes within PIPE_FIRST_BYTE_S (a named
    pipe nobody writes to sends nothing, and reading it would block for ever), the rest within
    PIPE_READ_S."""
    import select
    import time

    chunks: list[bytes] = []
    size, start = 0, time.monotonic()
    while size <= limit_bytes:
        waited = time.monotonic() - start
        limit_s = PIPE_READ_S if chunks else PIPE_FIRST_BYTE_S
        if waited >= limit_s:
            raise ConfigError(field, str(path), f"{what}: a pipe something writes to and closes within {limit_s:g} s "
                              f"({'it sent no end of file' if chunks else 'nothing was written to it'})")
        ready, _, _ = select.select([fd], [], [], min(limit_s - waited, 0.1))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n:,} bytes"


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
