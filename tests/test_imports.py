"""No import circles in repro/, and the CLI (repro.commands) imported by no library module (issue 15).

Every import statement counts, wherever it is: at module level, inside a function, under
`if TYPE_CHECKING:`. A lazy import hides a circle from Python's loader, not from a reader, and the next
refactor that hoists it to the top turns it into an ImportError; so the graph is read from the source
(ast), not from what happens to be imported at run time.

A module depends on each module it names and on that module's enclosing packages (their __init__):
`import a.b.c` and `from a.b import c` make a module depend on a.b.c, a.b and a. One exception: a
module's dependence on its own enclosing packages is not counted when it only reaches a submodule
through them (`from repro.sampling.step import X` inside repro.sampling.metrics). Python has already run
those packages before the module, so the edge fixes no order, and counting it would call every package
whose __init__ re-exports its modules (repro.sampling) a circle. Taking a name that the package's own
__init__ defines or re-exports (`from repro.sampling import StepResult` inside a module of
repro.sampling) reads a half-run __init__, so that does count.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "repro"
CLI_PACKAGE = "repro.commands"
CLI_MODULES = ("repro.commands", "repro.cli")  # the command line: the only modules that may import it


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at line `line` of its file."""

    source: str
    target: str
    line: int


# ------------------------------------------------------------------------------------------- the graph


def modules_of(package_dir: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file under `package_dir` (a package is named by its __init__)."""
    root = package_dir.parent
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _ancestors(name: str) -> list[str]:
    """The enclosing packages of a dotted name, outermost first: a.b.c -> [a, a.b]."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The modules of `known` that one import statement of `module` depends on (see the module docstring)."""
    own = set(_ancestors(module))
    named: set[str] = set()  # modules the statement names (each pulls in its enclosing packages too)
    read: set[str] = set()  # packages whose __init__ the statement reads a name from
    if isinstance(node, ast.Import):
        named.update(alias.name for alias in node.names)
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        named.add(base)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in known:
                named.add(full)
            else:  # a name defined (or re-exported) by `base` itself, or `*`
                read.add(base)
    deps = set(read)
    for name in named:
        deps.update(a for a in _ancestors(name) if a not in own)
        if name not in own:
            deps.add(name)
    deps.discard(module)
    return deps & known


def import_edges(package_dir: Path) -> list[Edge]:
    """Every dependency between modules of the package, one Edge per (source, target) at its first line."""
    modules = modules_of(package_dir)
    known = set(modules)
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        first: dict[str, int] = {}
        for node in ast.walk(tree):  # module level, functions, classes, `if TYPE_CHECKING:` alike
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(module, path.name == "__init__.py", node, known):
                    first[target] = min(first.get(target, node.lineno), node.lineno)
        edges.extend(Edge(module, target, line) for target, line in sorted(first.items()))
    return edges


def strongly_connected(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative, so a deep graph cannot hit the recursion limit)."""
    after: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        after[e.source].append(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    work: list[tuple[str, Iterator[str]]] = []  # the depth-first path, each node with its unvisited targets

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(after[node])))

    for start in nodes:
        if start in index:
            continue
        visit(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif target not in index:
                visit(target)
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return components


def _one_circle(component: list[str], edges: list[Edge]) -> list[Edge]:
    """A shortest circle through the component's first module, as the imports that make it."""
    members = set(component)
    out: dict[str, list[Edge]] = {}
    for e in edges:
        if e.source in members and e.target in members:
            out.setdefault(e.source, []).append(e)
    start = component[0]
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for e in out.get(node, []):
                if e.target == start:
                    return [*paths[node], e]
                if e.target not in paths:
                    paths[e.target] = [*paths[node], e]
                    following.append(e.target)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")  # pragma: no cover - Tarjan says it is


def circles(package_dir: Path) -> list[str]:
    """One line per import circle: each import of one circle through it, with the line that makes it."""
    edges = import_edges(package_dir)
    found = []
    for component in strongly_connected(sorted(modules_of(package_dir)), edges):
        if len(component) > 1:
            steps = _one_circle(component, edges)
            chain = " -> ".join([steps[0].source, *(f"{e.target} (line {e.line} of {e.source})" for e in steps)])
            found.append(f"{len(component)} modules {component}: {chain}")
    return found


# ------------------------------------------------------------------------------------------- repro


def test_repro_has_no_import_circles() -> None:
    found = circles(PACKAGE_DIR)
    assert not found, "import circles in repro/ (move the shared piece down a layer):\n" + "\n".join(found)


def test_library_code_does_not_import_the_cli() -> None:
    def is_cli(module: str) -> bool:
        return any(module == m or module.startswith(f"{m}.") for m in CLI_MODULES)

    wrong = [
        f"{e.source} imports {e.target} (line {e.line})"
        for e in import_edges(PACKAGE_DIR)
        if not is_cli(e.source) and (e.target == CLI_PACKAGE or e.target.startswith(f"{CLI_PACKAGE}."))
    ]
    assert not wrong, "library modules import the command line:\n" + "\n".join(wrong)


def test_the_cli_package_holds_the_commands() -> None:
    """The checks above look at the package they name: it must be there and be what cli.py wires."""
    modules = modules_of(PACKAGE_DIR)
    assert CLI_PACKAGE in modules and "repro.cli" in modules
    edges = import_edges(PACKAGE_DIR)
    wired = {e.target for e in edges if e.source == "repro.cli"}
    shared = {e.target for e in edges if e.source in wired and e.target.startswith(f"{CLI_PACKAGE}.")}
    assert "repro.commands.run" in wired
    # a command module is wired by cli.py; a helper of the commands (shared options) is imported by one of them
    assert {m for m in modules if m.startswith(f"{CLI_PACKAGE}.")} <= wired | shared
    assert not [m for m in modules if m.endswith("_commands")], "a command module outside repro/commands"


# ------------------------------------------------------------------------------------------- the checker


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package `pkg` under `root` with the given files (path relative to pkg -> source)."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / "pkg"


def test_the_checker_finds_a_circle_through_a_function_level_import(tmp_path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import helper\n",
            "b.py": """\
                def helper():
                    from pkg import a  # lazy, but still a circle

                    return a
            """,
            "c.py": "import pkg.a\n",
        },
    )
    found = circles(package)
    assert len(found) == 1
    assert "['pkg.a', 'pkg.b']" in found[0]
    assert "pkg.a -> pkg.b (line 1 of pkg.a) -> pkg.a (line 2 of pkg.b)" in found[0]


def test_the_checker_finds_a_circle_under_type_checking_and_in_relative_imports(tmp_path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/x.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from ..y import Y\n",
            "y.py": "from .sub import x\n",
        },
    )
    assert len(circles(package)) == 1 and "['pkg.sub.x', 'pkg.y']" in circles(package)[0]


def test_the_checker_passes_a_package_without_circles(tmp_path) -> None:
    """A layered package, whose __init__ re-exports its modules, which reach each other through it."""
    package = _package(
        tmp_path,
        {
            "__init__.py": "from pkg.top import run\nfrom pkg.low import Thing\n",
            "low.py": "class Thing:\n    pass\n",
            "top.py": "from pkg.low import Thing\n\n\ndef run():\n    from pkg import low\n\n    return low, Thing\n",
            "tool.py": "import pkg.top\nfrom pkg import low\n",
        },
    )
    assert circles(package) == []
    targets = {(e.source, e.target) for e in import_edges(package)}
    assert ("pkg.tool", "pkg.top") in targets and ("pkg.tool", "pkg.low") in targets
    assert ("pkg.top", "pkg") not in targets  # its own package, reached only for a submodule


def test_the_checker_counts_enclosing_packages(tmp_path) -> None:
    """Importing a.b.c runs a.b's __init__ first: a circle through an __init__ that re-exports is found,
    and so is a module that takes a name from its own package's __init__ while that __init__ imports it."""
    through_init = _package(
        tmp_path / "one",
        {
            "__init__.py": "",
            "launch/__init__.py": "from pkg.launch.local import run_local\n",
            "launch/local.py": "from pkg.config import build\n",
            "launch/attempt.py": "PLACEHOLDER = 'x'\n",
            "config.py": "def build():\n    from pkg.launch.attempt import PLACEHOLDER\n\n    return PLACEHOLDER\n",
        },
    )
    assert len(circles(through_init)) == 1
    assert "['pkg.config', 'pkg.launch', 'pkg.launch.local']" in circles(through_init)[0]
    half_run = _package(
        tmp_path / "two",
        {
            "__init__.py": "",
            "core/__init__.py": "from pkg.core.step import Step\nLIMIT = 3\n",
            "core/step.py": "from pkg.core import LIMIT\n\n\nclass Step:\n    pass\n",
        },
    )
    assert len(circles(half_run)) == 1 and "['pkg.core', 'pkg.core.step']" in circles(half_run)[0]
