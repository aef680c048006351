"""Files that are not what a command expects (issue 29): outputs that are device nodes, named pipes
or symlinks, a full device, inputs that are pipes nobody writes to or YAML whose aliases explode,
a closed stdout. Device nodes are private copies made with mknod in tmp_path (as root; skipped
otherwise), a full disk a tiny tmpfs mounted and unmounted here: the system's /dev is never written."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sim.fileio as fileio
from scalebench.cli import main
from sim.errors import ConfigError
from sim.fileio import atomic_write_text, check_writable, read_input_bytes
from sim.yamlio import AliasBomb, allowed_alias_share, check_expansion, load_yaml_text, read_yaml

REPO = Path(__file__).resolve().parents[1]
NULL, ZERO, FULL = (1, 3), (1, 5), (1, 7)
"""Linux's memory devices (Documentation/admin-guide/devices.txt, major 1): null, zero, full."""


def _device(path: Path, numbers: tuple[int, int]) -> Path:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(*numbers))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD (run as root)")
    return path


def _is_device(path: Path, numbers: tuple[int, int]) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == numbers


@contextlib.contextmanager
def _tiny_tmpfs(where: Path, size: str = "16k"):
    """A tmpfs of ``size``, filled up: every write into it ends in ENOSPC."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    try:
        with contextlib.suppress(OSError), open(where / "filler", "wb") as fh:
            fh.write(b"\0" * 2**20)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


# -- outputs --------------------------------------------------------------------------------

WRITERS = [
    ["simulate", "--model", "mlp", "--gpus", "2", "--trace", "{}"],
    ["schema", "-o", "{}"],
]
"""Commands that write a file named on the command line ({} stands for it)."""


@pytest.mark.parametrize("argv", WRITERS)
def test_a_null_device_stays_a_device(argv, tmp_path, monkeypatch, capsys):
    """Issue 29: the atomic writer renamed a regular file over the node (it replaced a machine's /dev/full)."""
    monkeypatch.chdir(tmp_path)
    node = _device(tmp_path / "null", NULL)
    assert main([a.replace("{}", str(node)) for a in argv]) == 0
    assert _is_device(node, NULL)
    assert not [p for p in tmp_path.iterdir() if p.name != "null"]  # no temporary file beside it


@pytest.mark.parametrize("argv", WRITERS)
def test_a_full_device_is_reported_naming_the_file(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    node = _device(tmp_path / "full", FULL)
    assert main([a.replace("{}", str(node)) for a in argv]) == 1
    line = capsys.readouterr().err.strip()
    assert line == f"scalebench {argv[0]}: error: {node}: No space left on device (ENOSPC)"
    assert _is_device(node, FULL)


def test_a_full_disk_is_reported_naming_the_file_and_leaves_nothing(tmp_path, capsys):
    with _tiny_tmpfs(tmp_path / "mnt") as mnt:
        out = mnt / "schema.json"
        assert main(["schema", "-o", str(out)]) == 1
        assert capsys.readouterr().err.strip() == f"scalebench schema: error: {out}: No space left on device (ENOSPC)"
        assert sorted(p.name for p in mnt.iterdir()) == ["filler"]  # no temporary file left


def test_a_symlink_keeps_pointing_at_its_target_which_gets_the_content(tmp_path, monkeypatch, capsys):
    """Issue 29: `schema -o s.json` with s.json a link replaced the link and left the target stale."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "s.json"
    target.write_text("stale")
    (tmp_path / "s.json").symlink_to("store/s.json")
    assert main(["schema", "-o", "s.json"]) == 0
    assert (tmp_path / "s.json").is_symlink() and os.readlink(tmp_path / "s.json") == "store/s.json"
    assert target.read_text().startswith("{") and '"$schema"' in target.read_text()
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["s.json"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    (tmp_path / "out.txt").symlink_to("made.txt")
    atomic_write_text(tmp_path / "out.txt", "x")
    assert (tmp_path / "out.txt").is_symlink() and (tmp_path / "made.txt").read_text() == "x"


@pytest.mark.parametrize("link, reason", [("loop", "Too many levels of symbolic links"),
                                          ("nowhere/x", "which is in no existing directory")])
def test_unusable_symlinks_are_one_line_errors(link, reason, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("out.json").symlink_to(link if link != "loop" else "out.json")
    assert main(["schema", "-o", "out.json"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("scalebench schema: error: -o: got 'out.json'") and reason in line


def test_a_named_pipe_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5
        while True:  # the reader has the pipe open once a write-side open no longer fails with ENXIO
            try:
                check_writable("--trace", fifo)
                break
            except ConfigError:
                assert time.monotonic() < deadline, "cat never opened the pipe"
                time.sleep(0.02)
        atomic_write_text(fifo, "through the pipe")
        assert reader.communicate(timeout=5)[0] == b"through the pipe"
    finally:
        reader.kill()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_named_pipe_nobody_reads_is_a_one_line_error_not_a_hang(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("p")
    start = time.monotonic()
    assert main(["simulate", "--model", "mlp", "--gpus", "2", "--trace", "p"]) == 2
    assert time.monotonic() - start < 10
    line = capsys.readouterr().err.strip()
    assert line == ("scalebench simulate: error: --trace: got 'p'; allowed: a named pipe that a process reads "
                    "(nobody has it open for reading)")


def test_a_socket_is_refused(tmp_path):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    try:
        with pytest.raises(ConfigError, match="is a socket"):
            check_writable("--out", tmp_path / "s")
        with pytest.raises(ConfigError, match="is a socket"):
            atomic_write_text(tmp_path / "s", "x")
    finally:
        sock.close()


# -- inputs ---------------------------------------------------------------------------------

def test_a_named_pipe_nobody_writes_to_is_refused_within_its_bound(tmp_path, monkeypatch):
    """Issue 29: `simulate PIPE` and `run PIPE` blocked for ever."""
    monkeypatch.setattr(fileio, "PIPE_FIRST_BYTE_S", 0.3)
    os.mkfifo(tmp_path / "c.yaml")
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        read_yaml(tmp_path / "c.yaml")
    assert 0.3 <= time.monotonic() - start < 3
    assert err.value.field == "config" and "nothing was written to it" in str(err.value)


def test_a_pipe_that_delivers_is_read(tmp_path):
    """`scalebench simulate <(sed ... base.yaml)`: the shell's pipe, its writer already there."""
    read, write = os.pipe()
    os.write(write, b"workload: mlp\n")
    os.close(write)
    try:
        assert read_yaml(f"/proc/self/fd/{read}") == {"workload": "mlp"}
    finally:
        os.close(read)


@pytest.mark.parametrize("what, expected", [("/dev/zero", "is a character device"), ("DIR", "is a directory")])
def test_devices_and_directories_are_not_inputs(what, expected, tmp_path):
    path = tmp_path if what == "DIR" else Path(what)
    with pytest.raises(ConfigError, match=expected):
        read_input_bytes("--catalog", path)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(17 * 2**20)  # sparse: nothing is written
    with pytest.raises(ConfigError, match=r"at most 16 MiB \(it has 17 MiB\)"):
        read_yaml(big)


LAUGHS = "".join(["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
                 + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)])


def test_a_billion_laughs_is_refused_in_milliseconds():
    """9 levels of 9 aliases: 387,420,489 strings once expanded (issue 29: 56-60 s and 2-3 GB). By hand:
    list a_i has 1 + 9 x a_(i-1) nodes, a_0 = 10, so a_i = (9^(i+2) - 1) / 8 and the nine sum to
    490,329,054; with the mapping and its 9 keys 490,329,064. Distinct: the mapping, 9 keys, 9 lists
    and a_0's 9 strings = 28."""
    start = time.perf_counter()
    with pytest.raises(AliasBomb, match=r"expand 28 nodes to 490,329,064"):
        load_yaml_text(LAUGHS)
    assert time.perf_counter() - start < 0.5


def test_billion_laughs_through_every_command_that_reads_yaml(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("b.yaml").write_text(LAUGHS + "workload: resnet50\n")
    for argv in (["simulate", "b.yaml"], ["run", "b.yaml"], ["list", "links", "--catalog", "b.yaml"],
                 ["collective", "--catalog", "b.yaml"], ["regress", "--suite", "b.yaml"]):
        start = time.perf_counter()
        assert main(argv) == 2
        line = capsys.readouterr().err.strip()
        assert "YAML whose aliases stay bounded" in line and "\n" not in line, line
        assert time.perf_counter() - start < 5


def test_alias_share_follows_go_yaml():
    """gopkg.in/yaml.v3 decode.go allowedAliasRatio: 0.99 up to 400,000, 0.10 from 4,000,000, linear between."""
    assert allowed_alias_share(1000) == 0.99 and allowed_alias_share(400_000) == 0.99
    assert allowed_alias_share(4_000_000) == pytest.approx(0.10) and allowed_alias_share(10**9) == pytest.approx(0.10)
    assert allowed_alias_share(2_200_000) == pytest.approx(0.99 - 0.89 * 0.5)


def test_ordinary_aliases_and_merge_keys_still_load():
    text = ("defaults: &d {gpus_per_node: 8, gpu: v100}\n"
            "a: {<<: *d, gpus: 16}\nb: {<<: *d, gpus: 32}\nlist: &l [1, 2, 3]\nagain: *l\n")
    assert load_yaml_text(text)["b"] == {"gpus_per_node": 8, "gpu": "v100", "gpus": 32}
    import yaml

    from sim.yamlio import _Loader

    node = _Loader(text).get_single_node()
    expanded, distinct = check_expansion(node)
    assert expanded - distinct == 2 * (1 + 4) + (1 + 3)  # *d twice (a mapping of 2 pairs: itself + 4), *l (itself + 3)
    assert isinstance(node, yaml.MappingNode)


@pytest.mark.parametrize("text, reason", [("a: &a [*a]\n", "recursive"), ("a: &a {b: *a}\n", "recursive"),
                                          ("[" * 70 + "]" * 70, "more than 64 levels")])
def test_recursive_and_too_deep_documents_are_refused(text, reason):
    with pytest.raises(AliasBomb, match=reason):
        load_yaml_text(text)


# -- standard streams -----------------------------------------------------------------------

def test_a_closed_stdout_is_one_line_not_a_traceback():
    """Issue 29: `scalebench list links >&-` ended in AttributeError: 'NoneType' object has no attribute 'write'."""
    done = subprocess.run(["sh", "-c", f"exec {sys.executable} -m scalebench list links >&-"], cwd=REPO,
                          stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "scalebench list: error: stdout: got 'closed'; allowed: an open standard output (redirect it to a file or to "
        "/dev/null instead of closing it: >&- leaves nowhere to print)")


def test_a_closed_stderr_still_runs_and_exits_with_its_status():
    done = subprocess.run(["sh", "-c", f"exec {sys.executable} -m scalebench list nics 2>&-"], cwd=REPO,
                          capture_output=True, timeout=60)
    assert done.returncode == 2 and b"Traceback" not in done.stdout


@pytest.mark.parametrize("command", ["simulate", "run", "plan"])
def test_commands_given_a_named_pipe_nobody_writes_to_end_in_one_line(command, tmp_path, monkeypatch, capsys):
    """Issue 29: `run PIPE` and `simulate PIPE` blocked for ever."""
    monkeypatch.setattr(fileio, "PIPE_FIRST_BYTE_S", 0.2)
    monkeypatch.chdir(tmp_path)
    os.mkfifo("c.yaml")
    argv = [command, "c.yaml"] + (["--model", "mlp"] if command == "plan" else [])
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"scalebench {command}: error: config: got 'c.yaml'; allowed: a readable YAML file: a pipe")
    assert "nothing was written to it" in line


def test_a_layers_file_that_is_a_symlink_loop_is_one_line(tmp_path, monkeypatch, capsys):
    """Found by scripts/bad_input_driver.py: Path.resolve raised RuntimeError on the loop (a traceback)."""
    monkeypatch.chdir(tmp_path)
    Path("t.csv").symlink_to("t.csv")
    Path("c.yaml").write_text("workload: {layers_file: t.csv, batch_size: 8}\n")
    assert main(["simulate", "c.yaml"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"scalebench simulate: error: workload.layers_file: got '{tmp_path / 't.csv'}'; allowed: a readable layer table "
        "(CSV) (Too many levels of symbolic links)")


def test_calibrate_from_runs_of_a_binary_file_is_one_line(tmp_path, monkeypatch, capsys):
    """Found by scripts/bad_input_driver.py after the rebase: a UnicodeDecodeError traceback."""
    monkeypatch.chdir(tmp_path)
    Path("runs.csv").write_bytes(bytes(range(128, 256)))
    assert main(["calibrate", "--from-runs", "runs.csv", "--out", "o"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("scalebench calibrate: error: --from-runs: got 'runs.csv'; allowed: a readable file of "
                           "measured runs") and "byte 0 is not UTF-8" in line
    assert not Path("o").exists()
