"""The house rules of STYLE.md, checked: no import circles inside sim/, and lower floors never
import higher ones (sim < real < experiments, validation < scalebench)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"sim": 0, "real": 1, "experiments": 2, "validation": 2, "scalebench": 3}


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in (ROOT / package).rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_sim_has_no_import_cycles():
    mods = _modules("sim")
    edges = {m: {t for t in _imports(p) if t in mods and t != m} for m, p in mods.items()}
    # a package importing its own submodules is how packages are built, not a circle
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                cycle = visit(t)
                if cycle:
                    return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(mods):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " -> ".join(cycle)


def test_lower_floors_do_not_import_higher_ones():
    offenders = []
    for package, floor in FLOORS.items():
        for name, path in _modules(package).items():
            for target in _imports(path):
                top = target.split(".")[0]
                if top in FLOORS and FLOORS[top] > floor:
                    offenders.append(f"{name} imports {target}")
    assert offenders == [], offenders
