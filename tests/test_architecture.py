"""The house's rules, checked on the source: no import cycle anywhere, rooms and their sub-rooms import
one way, nothing that fits or exports reaches the code that reads a simulated truth, and function-local
imports in calib and selfmodel exist only for a stated reason (most keep the command line fast)."""

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
# selfmodel's sub-rooms, lowest first, the same way; every selfmodel module lives in one of them.
SELFMODEL_ORDER = ("selfmodel.model", "selfmodel.labels", "selfmodel.discovery", "selfmodel.inspect", "selfmodel.learn",
                   "selfmodel.export", "selfmodel.evaluation")
# Rooms that read a simulated truth (truth/), which no fit and no export may reach, even through another module.
TRUTH_READERS = ("selfmodel.evaluation",)
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


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def inside(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_module_of_the_project_imports_itself_in_a_circle():
    graph = project_graph()
    cycles = strongly_connected(graph)
    assert cycles == [], f"import cycles: {cycles}"
    # The export (and everything else that fits or writes) must not reach the truth readers, even
    # through a chain of imports: a simulated truth is for evaluation only.
    wrong = sorted((name, target) for name in graph if room(name) == "selfmodel"
                   and not any(inside(name, reader) for reader in TRUTH_READERS)
                   for target in reachable(graph, name) if any(inside(target, reader) for reader in TRUTH_READERS))
    assert wrong == [], f"modules that reach a truth reader: {wrong}"


def test_the_truth_rule_sees_an_export_that_reaches_evaluation_through_another_module():
    graph = {"selfmodel.export.exporter": {"selfmodel.model.folder"}, "selfmodel.model.folder": {"selfmodel.evaluation.metrics"},
             "selfmodel.evaluation.metrics": set()}
    assert "selfmodel.evaluation.metrics" in reachable(graph, "selfmodel.export.exporter")


def room(module: str) -> str:
    return module.split(".", 1)[0]


def test_rooms_import_one_way():
    wrong = sorted((name, target) for name, targets in project_graph().items() for target in targets
                   if room(target) != room(name) and room(target) not in MAY_IMPORT[room(name)])
    assert wrong == [], f"imports against the house's direction: {wrong}"


def sub_room(module: str, order: tuple[str, ...]) -> int | None:
    for position, prefix in enumerate(order):
        if inside(module, prefix):
            return position
    return None


def later_rooms_imported(order: tuple[str, ...]) -> list[tuple[str, str]]:
    wrong = []
    for name, targets in project_graph().items():
        mine = sub_room(name, order)
        for target in targets:
            theirs = sub_room(target, order)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append((name, target))
    return sorted(wrong)


def test_calib_sub_rooms_import_one_way():
    wrong = later_rooms_imported(CALIB_ORDER)
    assert wrong == [], f"calib sub-rooms importing a later room: {wrong}"


def test_selfmodel_sub_rooms_import_one_way():
    wrong = later_rooms_imported(SELFMODEL_ORDER)
    assert wrong == [], f"selfmodel sub-rooms importing a later room: {wrong}"


def test_every_selfmodel_module_lives_in_a_room():
    flat = sorted(name for name in modules() if room(name) == "selfmodel" and name != "selfmodel"
                  and sub_room(name, SELFMODEL_ORDER) is None)
    assert flat == [], f"selfmodel modules outside its rooms: {flat}"


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


def test_selfmodel_imports_inside_functions_say_why():
    # A local import hides a dependency from the reader; selfmodel keeps one only where loading the
    # module at start would cost every command (open3d, torch, Pinocchio, coal, OMPL) or the import
    # order matters (coacd after open3d), and the line says which.
    known = modules()
    wrong = []
    for name, path in known.items():
        if room(name) != "selfmodel":
            continue
        lines = path.read_text().splitlines()
        for _, node, local in imports(name, path, known):
            if local and "#" not in lines[node.lineno - 1]:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert wrong == [], "function-local imports in selfmodel without a reason: " + "; ".join(sorted(set(wrong)))


def test_no_comment_cites_a_tracker_issue_number():
    import re

    pattern = re.compile(r"\bissues? \d+\b", re.IGNORECASE)
    wrong = [f"{path.relative_to(ROOT)}:{number}" for path in modules().values()
             for number, line in enumerate(path.read_text().splitlines(), start=1) if pattern.search(line)]
    assert wrong == [], f"comments naming tracker issues: {wrong}"
