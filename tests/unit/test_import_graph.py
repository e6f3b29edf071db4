"""The package's modules import one another without a cycle, and its root holds only the agreed
modules (the rest lives in a subpackage by layer: `planning`, `workflow`, `training`, `credit`,
...).

Every import statement counts: module-level, function-level and `if TYPE_CHECKING:` ones,
absolute and relative, since an import hidden in a function or kept for type hints still ties
the two modules together. An import names the deepest module of the package it reaches (`from
rredcot.planning import timing` is an edge to `rredcot.planning.timing`, `from rredcot.training
import build_method` one to `rredcot.training`'s `__init__`). A submodule's implicit import of
its own package's `__init__` is not an edge, nor is an import by name string
(`importlib.import_module`, the method registry's implementations, `lazy_exports`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

ROOT_MODULES: dict[str, str] = {
    "__init__": "the package's public exports (`from rredcot import RREDCoTTrainer`)",
    "trl": "the public TRL API, imported as `rredcot.trl` by users' scripts",
    "config": "the config check, the entry of the Snakefile and of every step",
    "devices": (
        "the GPU slot allocator every GPU job's command runs as `python -m rredcot.devices`: "
        "another path would change every job's params, and Snakemake would rerun every job"
    ),
    "lazy_exports": "the lowest layer: what every package `__init__` loads its exports with",
    "block_checks": "the lowest layer: the checks of every config block's settings class",
}
"""The only modules the package root holds, and why each is there."""


def module_name(path: Path, src: Path) -> str:
    """The dotted name of the module at `path` under `src` (a package by its `__init__`)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names an import statement reaches; `package` resolves relative imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    return [f"{module}.{alias.name}" for alias in node.names]


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Each module of `package` (under `src`) -> the modules of the package it imports."""
    paths = {module_name(p, src): p for p in sorted((src / package).rglob("*.py"))}

    def deepest(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                reached = {deepest(t) for t in _targets(node, own)}
                edges.update(m for m in reached if m is not None and m != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as [a, b, ..., a], or None; modules in sorted order, so the
    same graph always names the same cycle."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return path[path.index(target) :] + [target]
            if target not in done and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph(SRC, "rredcot")
    assert len(graph) > 100  # the whole package was read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_package_root_holds_only_the_agreed_modules():
    found = {p.stem for p in (SRC / "rredcot").glob("*.py")}
    extra, missing = sorted(found - set(ROOT_MODULES)), sorted(set(ROOT_MODULES) - found)
    assert not extra, (
        f"module(s) {extra} in the package root: put each in the subpackage of its layer "
        f"(the root holds only {sorted(ROOT_MODULES)})"
    )
    assert not missing, f"ROOT_MODULES names {missing}, which the root no longer holds"


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_a_cycle_through_any_kind_of_import(tmp_path):
    """a -> b (absolute, from a package) -> c (relative, in a function) -> a (type hints only)."""
    src = _package(
        tmp_path,
        {
            "__init__.py": "VERSION = 1\n",
            "a.py": "from pkg.sub import b\n",
            "sub/__init__.py": "",
            "sub/b.py": "def f():\n    from ..c import g\n    return g\n",
            "c.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.a\n\n"
                "def g():\n    pass\n"
            ),
            "d.py": "import pkg.a\nfrom pkg import VERSION, c\n",
        },
    )
    graph = import_graph(src, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg", "pkg.a", "pkg.c"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]


@pytest.mark.parametrize(
    "c_text",
    ["import os\n", "def g():\n    from pkg import sub\n"],
    ids=["no-import", "the-package-not-a"],
)
def test_the_checker_passes_a_package_without_a_cycle(tmp_path, c_text):
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.sub import b\nfrom . import c\n",
            "sub/__init__.py": "",
            "sub/b.py": "from ..c import *\n",
            "c.py": c_text,
        },
    )
    assert find_cycle(import_graph(src, "pkg")) is None
