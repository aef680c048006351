"""Atomic writes under interrupts: a Ctrl-C or SIGTERM that lands while a result file is written
leaves the file complete or absent, never a temporary file beside it, and still stops the program."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import sim.fileio as fileio
from sim.fileio import atomic_write_bytes, atomic_write_text, interrupts_deferred


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_ctrl_c_mid_write_is_delivered_once_the_file_is_in_place(tmp_path):
    target = tmp_path / "point.json"

    def write(fh):
        fh.write('{"a": ')
        signal.raise_signal(signal.SIGINT)  # the terminal's Ctrl-C, halfway through the content
        fh.write("1}")

    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_write(target, write)
    assert target.read_text() == '{"a": 1}' and leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back


def test_ctrl_c_between_creating_the_temporary_file_and_writing_it(tmp_path, monkeypatch):
    """The window CI hit: mkstemp has made the file, the code that removes it on failure has not
    started yet. The interrupt waits; the write completes."""
    real_fchmod = os.fchmod

    def interrupted_fchmod(fd, mode):
        real_fchmod(fd, mode)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(os, "fchmod", interrupted_fchmod)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(tmp_path / "plot.png", b"\x89PNG")
    assert (tmp_path / "plot.png").read_bytes() == b"\x89PNG" and leftovers(tmp_path) == []


def test_sigterm_with_a_python_handler_waits_for_the_write(tmp_path):
    got = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with interrupts_deferred():
            signal.raise_signal(signal.SIGTERM)
            assert got == []  # held inside the block
            atomic_write_text(tmp_path / "a.txt", "x")
        assert got == [signal.SIGTERM]  # delivered once, after it
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_failing_write_leaves_nothing(tmp_path):
    def write(fh):
        fh.write("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        fileio.atomic_write(tmp_path / "x.csv", write)
    assert list(tmp_path.iterdir()) == []


def test_outside_the_main_thread_writes_run_as_they_are(tmp_path):
    """Signal handlers belong to the main thread: a writer thread neither replaces them nor fails."""
    errors = []

    def worker():
        try:
            atomic_write_text(tmp_path / "t.txt", "threaded")
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == [] and (tmp_path / "t.txt").read_text() == "threaded"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
