"""The house's rules, checked on the source: no import cycle anywhere, rooms import one way, and
calib's function-local imports exist only to keep the command line fast (each says why)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rigs", "capture", "calib", "selfmodel", "selfcal")
# Who may import whom (a room may always import itself).
MAY_IMPORT = {"rigs": set(), "capture": {"rigs"}, "calib": {"rigs", "capture"}, "selfmodel": {"rigs", "capture"},
              "selfcal": {"rigs", "capture", "calib", "selfmodel"}}
# calib's sub-rooms, lowest first: each may import only those before it.
CALIB_ORDER = ("calib.model", "calib.sensors", "calib.fit", "calib.dynamics", "calib.deflection", "calib.io", "calib.calibration",
               "calib.calibrator", "calib.workflows")
# Modules a calib function may import locally, because loading them at import time would slow every command.
HEAVY = {"cv2", "torch", "matplotlib", "matplotlib.pyplot"}


def modules() -> dict[str, Path]:
    """Every module of the project: dotted name -> file."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, ast.stmt, bool]]:
    """(imported project module, statement, inside a function) for every import in a module,
    top-level or not: an import dodged into a function is still a dependency."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            local = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append((alias.name, child, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in child.names:
                    candidate = f"{base}.{alias.name}"
                    found.append((candidate if candidate in known else base, child, in_function))
            visit(child, local)

    visit(tree, False)
    return [(target, node, local) for target, node, local in found]


def project_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {name: set() for name in known}
    for name, path in known.items():
        for target, _, _ in imports(name, path, known):
            # "import a.b.c" depends on a.b.c; its parents are packages whose __init__ runs too.
            while target and target not in known:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name:
                graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components with more than one module are the import cycles."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for neighbour in graph[node]:
            if neighbour not in index:
                connect(neighbour)
                low[node] = min(low[node], low[neighbour])
            elif neighbour in on_stack:
                low[node] = min(low[node], index[neighbour])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            out.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [sorted(c) for c in out if len(c) > 1]


def test_the_cycle_finder_finds_a_cycle():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_project_imports_itself_in_a_circle():
    cycles = strongly_connected(project_graph())
    assert cycles == [], f"import cycles: {cycles}"


def room(module: str) -> str:
    return module.split(".", 1)[0]


def test_rooms_import_one_way():
    wrong = sorted((name, target) for name, targets in project_graph().items() for target in targets
                   if room(target) != room(name) and room(target) not in MAY_IMPORT[room(name)])
    assert wrong == [], f"imports against the house's direction: {wrong}"


def calib_room(module: str) -> int | None:
    for position, prefix in enumerate(CALIB_ORDER):
        if module == prefix or module.startswith(prefix + "."):
            return position
    return None


def test_calib_sub_rooms_import_one_way():
    wrong = []
    for name, targets in project_graph().items():
        mine = calib_room(name)
        for target in targets:
            theirs = calib_room(target)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append((name, target))
    assert wrong == [], f"calib sub-rooms importing a later room: {wrong}"


def test_calib_imports_inside_functions_only_heavy_libraries_and_says_why():
    known = modules()
    wrong = []
    for name, path in known.items():
        if room(name) != "calib":
            continue
        lines = path.read_text().splitlines()
        for target, node, local in imports(name, path, known):
            if not local:
                continue
            line = lines[node.lineno - 1]
            if target not in HEAVY or "#" not in line:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {line.strip()}")
    assert wrong == [], "function-local imports in calib without a reason: " + "; ".join(wrong)


def test_no_comment_cites_a_tracker_issue_number():
    import re

    pattern = re.compile(r"\bissues? \d+\b", re.IGNORECASE)
    wrong = [f"{path.relative_to(ROOT)}:{number}" for path in modules().values()
             for number, line in enumerate(path.read_text().splitlines(), start=1) if pattern.search(line)]
    assert wrong == [], f"comments naming tracker issues: {wrong}"
