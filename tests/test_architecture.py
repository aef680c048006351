"""The house rules of STYLE.md, checked: no import circles in sim/, real/, experiments/, validation/
or scalebench/, lower floors never import higher ones (sim < real < experiments, validation <
scalebench), and validation/ measures nothing."""

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


def _import_graph(packages) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (at the top or inside a function: a
    deferred import hides a circle from the interpreter, not from the reader); a package
    importing its own submodules is how packages are built, not a circle."""
    mods: dict[str, Path] = {}
    for package in packages:
        mods.update(_modules(package))
    edges = {m: {t for t in _imports(p) if t in mods and t != m} for m, p in mods.items()}
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of the graph, as its strongly connected components of two or more modules
    (Tarjan's algorithm), each sorted; one circle per component is enough to name the fix."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for t in sorted(edges[m]):
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in on_stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            component = []
            while True:
                t = stack.pop()
                on_stack.discard(t)
                component.append(t)
                if t == m:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def test_the_cycle_finder_finds_a_two_file_circle_and_a_long_one():
    """By hand: a <-> b is one circle, c -> d -> e -> c another, f -> a hangs off the first
    without being in it."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}, "g": set()}
    assert sorted(import_cycles(edges)) == [["a", "b"], ["c", "d", "e"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_anywhere():
    """No circle among the modules of sim/, real/, experiments/, validation/ and scalebench/,
    within one package or across them (STYLE.md: pull the shared piece down instead)."""
    cycles = import_cycles(_import_graph(FLOORS))
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_validation_compares_and_does_not_measure():
    """validation/ plans, predicts and compares; measuring (anything that imports torch) is
    real/'s job (STYLE.md)."""
    offenders = sorted(name for name, path in _modules("validation").items()
                       if any(t == "torch" or t.startswith("torch.") for t in _imports(path)))
    assert offenders == [], offenders


def test_lower_floors_do_not_import_higher_ones():
    offenders = []
    for package, floor in FLOORS.items():
        for name, path in _modules(package).items():
            for target in _imports(path):
                top = target.split(".")[0]
                if top in FLOORS and FLOORS[top] > floor:
                    offenders.append(f"{name} imports {target}")
    assert offenders == [], offenders
