"""The shape of the package stays as the rooms left it: no import cycle between ftrl's
modules, and no hand-written module over 700 lines.

import-linter checks the layering but skips imports under `if TYPE_CHECKING:`
(pyproject.toml), and a cycle inside one room is no layer violation. This graph counts
every import statement of every module, wherever it is written (the module's top, a
function body, a TYPE_CHECKING block): a circle held by a type-only or a lazy import is
still two modules that cannot be read apart."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.procs import REPO

PACKAGE = REPO / "ftrl"
MAX_LINES = 700
#: generated from proto/ftrl.proto (tests/unit/wire/test_proto_generated.py checks they match it)
GENERATED = {"ftrl/wire/ftrl_pb2.py", "ftrl/wire/ftrl_pb2_grpc.py", "ftrl/wire/ftrl_pb2.pyi"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The ftrl modules `tree` (module `name`) imports anywhere in its text. `from a import
    b` counts `a.b` when that is a module, else `a`; a relative import is resolved first."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import ftrl.a.b.C`: the module part
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    packages = {module_name(p, root) for p in root.rglob("__init__.py")}
    modules = set(files)
    return {name: imported_modules(ast.parse(path.read_text(), str(path)), name, name in packages, modules)
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_ftrls_modules_type_only_imports_included():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles (every import counted, TYPE_CHECKING and function bodies too):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_hand_written_module_over_700_lines():
    too_long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        if rel in GENERATED:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            too_long[rel] = lines
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"


# ---------------------------------------------------------------------------- the checks themselves


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "ftrl" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "ftrl"


@pytest.mark.parametrize("how", ["top", "type_only", "lazy", "relative"])
def test_a_planted_cycle_is_found_however_it_is_imported(tmp_path, how):
    back = {
        "top": "from ftrl.a import f\n",
        "type_only": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ftrl.a import f\n",
        "lazy": "def g():\n    from ftrl import a\n    return a\n",
        "relative": "from .a import f\n",
    }[how]
    root = _write(tmp_path, {"__init__.py": "", "a.py": "from ftrl.b import g\ndef f(): pass\n", "b.py": back,
                             "c.py": "import ftrl.a\n"})
    assert cycles(import_graph(root)) == [["ftrl.a", "ftrl.b"]]


def test_imports_that_only_go_down_make_no_cycle(tmp_path):
    root = _write(tmp_path, {"__init__.py": "", "low.py": "X = 1\n", "mid.py": "from ftrl.low import X\n",
                             "top.py": "from ftrl import mid\nimport ftrl.low\n",
                             "pkg/__init__.py": "from ftrl.pkg.inner import Y\n", "pkg/inner.py": "from ftrl.low import X\nY = X\n"})
    graph = import_graph(root)
    assert graph["ftrl.top"] == {"ftrl.mid", "ftrl.low"} and graph["ftrl.pkg"] == {"ftrl.pkg.inner"}
    assert cycles(graph) == []
