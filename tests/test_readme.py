"""The README's commands, run as written (CI runs this file: .ci/run).

A console block the README marks with ``<!-- readme-check ... -->`` is run from a scratch copy
of the checkout's examples/: each ``$ command`` (backslash continuations joined, a trailing
``  # comment`` dropped) must exit 0, and where the README shows its output, print exactly that
(a ``...`` line stands for any lines; on a line that starts ``  measured:`` the numbers may
differ, as measured times do). ``$ cat FILE`` shows a file the reader writes: the test writes it."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- readme-check"
NUMBER = re.compile(r"\d[\d,]*(\.\d+)?")


def checked_blocks(text: str) -> list[list[tuple[str, list[str]]]]:
    """Each marked console block as [(command, the output lines shown under it)]."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if not line.startswith(MARK):
            continue
        assert lines[i + 1] == "```console", f"README line {i + 2}: a readme-check mark must precede a console block"
        block: list[tuple[str, list[str]]] = []
        j = i + 2
        while lines[j] != "```":
            if lines[j].startswith("$ "):
                command = lines[j][2:]
                while command.endswith("\\"):
                    j += 1
                    command = command[:-1].rstrip() + " " + lines[j].strip()
                block.append((re.sub(r"\s{2,}#.*$", "", command).strip(), []))
            else:
                block[-1][1].append(lines[j])
            j += 1
        blocks.append(block)
    return blocks


def _matches(shown: list[str], printed: list[str]) -> bool:
    def same(a: str, b: str) -> bool:
        if a.startswith("  measured:"):
            return NUMBER.sub("N", a) == NUMBER.sub("N", b)
        return a == b

    if "..." in shown:
        k = shown.index("...")
        head, tail = shown[:k], shown[k + 1:]
        return (len(printed) >= len(head) + len(tail) and all(same(a, b) for a, b in zip(head, printed, strict=False))
                and all(same(a, b) for a, b in zip(tail, printed[len(printed) - len(tail):], strict=False)))
    return len(shown) == len(printed) and all(same(a, b) for a, b in zip(shown, printed, strict=True))


def test_the_parser_reads_commands_outputs_and_continuations():
    text = "\n".join([MARK + " -->", "```console", "$ scalebench a \\", "    --b 1  # why", "out 1.5", "$ cat f.yaml",
                      "x: 1", "```"])
    assert checked_blocks(text) == [[("scalebench a --b 1", ["out 1.5"]), ("cat f.yaml", ["x: 1"])]]
    assert _matches(["  measured: forward 1.5 ms"], ["  measured: forward 22.25 ms"])
    assert not _matches(["Net: 5 layers"], ["Net: 6 layers"])
    assert _matches(["a", "...", "z"], ["a", "b", "c", "z"]) and not _matches(["a", "...", "z"], ["a", "b"])


@pytest.mark.slow
@pytest.mark.torch
def test_the_readmes_commands_run_as_written(tmp_path):
    pytest.importorskip("torch")
    blocks = checked_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 3
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for block in blocks:
        for command, shown in block:
            words = shlex.split(command)
            if words[0] == "cat":
                (tmp_path / words[1]).write_text("\n".join(shown) + "\n", encoding="utf-8")
                continue
            program = {"scalebench": [sys.executable, "-m", "scalebench"], "python": [sys.executable]}[words[0]]
            done = subprocess.run([*program, *words[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"$ {command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            if shown:
                printed = done.stdout.rstrip("\n").splitlines()
                assert _matches(shown, printed), f"$ {command}\nREADME shows:\n" + "\n".join(shown) + \
                    "\nit printed:\n" + "\n".join(printed)
