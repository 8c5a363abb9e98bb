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

Imports flow downward (issue 37): every module belongs to one layer of docs/architecture.md's "Layers" block,
read from there so the page and the check cannot disagree, and imports only its own layer and the ones
below. The upward imports that exist today are listed one by one in KNOWN_UPWARD, a ratchet: a new one
fails, and so does a listed one that is gone, until its line is deleted.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "repro"
CLI_PACKAGE = "repro.commands"
CLI_MODULES = ("repro.commands", "repro.cli")  # the command line: the only modules that may import it
ARCHITECTURE = PACKAGE_DIR.parent / "docs" / "architecture.md"  # its "Layers" block orders the modules
LAYERS_HEADING = "### Layers"

# The imports that run back up a layer today, (source, target) as upward_imports names them: debt, never added
# to; a new upward import moves the shared piece down a layer instead. Issue 37 took six away: cells are planned
# and checked above the launchers (repro/cell_plan.py, repro/sweep_submit.py), a VerlRun carries its node check,
# and the checkpoint retention is the run folder's (repro/rundir/retention.py).
KNOWN_UPWARD: tuple[tuple[str, str], ...] = ()


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


# ------------------------------------------------------------------------------------------- the layers


@dataclass(frozen=True)
class Layer:
    """One line of the layers block: its number (1 at the bottom), its name, and its files and folders (`x/`)."""

    number: int
    name: str
    patterns: tuple[str, ...]


def read_layers(markdown: str) -> list[Layer]:
    """The first fenced block after the `### Layers` heading, bottom layer first: one `layer N NAME: PATTERNS`
    line per layer, an indented line going on with the patterns of the line before; anything else is an error."""
    lines = markdown.splitlines()
    opening = next(i for i in range(lines.index(LAYERS_HEADING), len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    rows: list[tuple[int, str, list[str]]] = []
    for line in lines[opening + 1 : closing]:
        head = re.fullmatch(r"layer (\d+) ([^:]+):\s+(\S.*)", line)
        if head:
            rows.append((int(head[1]), head[2].strip(), head[3].split()))
        elif rows and line[:1].isspace() and line.strip():
            rows[-1][2].extend(line.split())
        else:
            raise ValueError(f"not a line of the layers block: {line!r}")
    if [number for number, _, _ in rows] != list(range(1, len(rows) + 1)):
        raise ValueError(f"the layers are not numbered 1, 2, ... from the bottom: {[n for n, _, _ in rows]}")
    odd = [p for _, _, patterns in rows for p in patterns if not p.endswith((".py", "/"))]
    if odd:
        raise ValueError(f"a layer names a file (x.py) or a folder (x/), not {odd}")
    return [Layer(number, name, tuple(patterns)) for number, name, patterns in rows]


def layers_of(package_dir: Path, layers: list[Layer]) -> dict[str, list[Layer]]:
    """Module name -> the layers one of whose patterns matches its file."""
    return {
        module: [layer for layer in layers if any(_matches(p, path.relative_to(package_dir)) for p in layer.patterns)]
        for module, path in modules_of(package_dir).items()
    }


def _matches(pattern: str, file: Path) -> bool:
    """A pattern `x.py` is that file of the package, `x/` every file under that folder."""
    name = file.as_posix()
    return name.startswith(pattern) if pattern.endswith("/") else name == pattern


def layer_of_each(package_dir: Path, layers: list[Layer]) -> dict[str, Layer]:
    """Module name -> its layer; an error when a module is in none or in more than one."""
    found = layers_of(package_dir, layers)
    wrong = sorted(module for module, its in found.items() if len(its) != 1)
    if wrong:
        raise ValueError(f"modules in no layer or in more than one: {wrong}")
    return {module: its[0] for module, its in found.items()}


def upward_imports(package_dir: Path, layers: list[Layer]) -> list[Edge]:
    """Every import of a module of a higher layer; an enclosing package is left out where the same line reaches
    one of its modules higher up (`from a.b import c` runs up to a.b.c, and a.b comes with it)."""
    layer = layer_of_each(package_dir, layers)
    up = [e for e in import_edges(package_dir) if layer[e.target].number > layer[e.source].number]
    return [
        e
        for e in up
        if not any(o.source == e.source and o.line == e.line and o.target.startswith(f"{e.target}.") for o in up)
    ]


def upward_lines(package_dir: Path, layers: list[Layer], edges: list[Edge]) -> list[str]:
    """One line per upward import: `repro/x.py:12: repro.x (layer 1 utilities) imports repro.y (layer 7 report)`."""
    layer, files = layer_of_each(package_dir, layers), modules_of(package_dir)
    return [
        f"{files[e.source].relative_to(package_dir.parent).as_posix()}:{e.line}: "
        f"{e.source} (layer {layer[e.source].number} {layer[e.source].name}) "
        f"imports {e.target} (layer {layer[e.target].number} {layer[e.target].name})"
        for e in edges
    ]


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


def _repro_layers() -> list[Layer]:
    return read_layers(ARCHITECTURE.read_text(encoding="utf-8"))


def test_every_module_of_repro_is_in_exactly_one_layer() -> None:
    """A new module is placed in docs/architecture.md's layers before it passes, and the block names no file or
    folder that is gone."""
    layers = _repro_layers()
    found = layers_of(PACKAGE_DIR, layers)
    wrong = [f"{module}: {[layer.number for layer in its]}" for module, its in found.items() if len(its) != 1]
    assert not wrong, "modules in no layer or in more than one (docs/architecture.md, Layers):\n" + "\n".join(wrong)
    files = [path.relative_to(PACKAGE_DIR) for path in modules_of(PACKAGE_DIR).values()]
    stale = [
        f"layer {layer.number}: {p}"
        for layer in layers
        for p in layer.patterns
        if not any(_matches(p, f) for f in files)
    ]
    assert not stale, "the layers name files or folders that repro/ does not have:\n" + "\n".join(stale)


def test_imports_in_repro_flow_downward() -> None:
    layers = _repro_layers()
    edges = [e for e in upward_imports(PACKAGE_DIR, layers) if (e.source, e.target) not in KNOWN_UPWARD]
    new = upward_lines(PACKAGE_DIR, layers, edges)
    assert not new, (
        "imports that run back up a layer (move the shared piece down a layer; docs/architecture.md, Layers):\n"
        + "\n".join(new)
    )


def test_every_known_upward_import_still_runs_up() -> None:
    """The list of known upward imports only shrinks: one that was removed (or no longer runs up) leaves it."""
    found = {(e.source, e.target) for e in upward_imports(PACKAGE_DIR, _repro_layers())}
    gone = [f"{source} -> {target}" for source, target in KNOWN_UPWARD if (source, target) not in found]
    assert not gone, "no longer upward imports; delete them from KNOWN_UPWARD:\n" + "\n".join(gone)
    assert len(set(KNOWN_UPWARD)) == len(KNOWN_UPWARD)


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


LAYERS_PAGE = """\
# A page

### Layers

```text
layer 1 low:   __init__.py
               low.py
layer 2 high:  high/
```
"""


def test_the_layers_block_is_read_from_its_heading_bottom_first() -> None:
    assert read_layers(LAYERS_PAGE) == [Layer(1, "low", ("__init__.py", "low.py")), Layer(2, "high", ("high/",))]
    for wrong, says in (
        ("layer 4 top:  top.py", "not numbered"),
        ("layer 3 top:  top", "a file .x.py. or a folder"),
        ("layers 3 top: top.py", "not a line of the layers block"),
    ):
        with pytest.raises(ValueError, match=says):
            read_layers(LAYERS_PAGE.replace("layer 2 high:  high/", f"layer 2 high:  high/\n{wrong}"))


def test_the_layer_check_finds_an_upward_import_in_a_function_and_names_both_layers(tmp_path) -> None:
    package = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": """\
                import pkg


                def late():
                    from pkg.high.top import run  # lazy, but up a layer

                    return run
            """,
            "high/__init__.py": "from pkg.low import late\n",  # down a layer
            "high/top.py": "def run():\n    pass\n",
            "high/side.py": "from pkg.high import top\n",  # its own layer
        },
    )
    layers = read_layers(LAYERS_PAGE)
    edges = upward_imports(package, layers)
    assert edges == [Edge("pkg.low", "pkg.high.top", 5)]  # pkg.high, reached on the same line, is not listed again
    assert upward_lines(package, layers, edges) == [
        "pkg/low.py:5: pkg.low (layer 1 low) imports pkg.high.top (layer 2 high)"
    ]


def test_a_module_in_no_layer_or_in_two_has_no_layer(tmp_path) -> None:
    package = _package(tmp_path, {"__init__.py": "", "low.py": "", "high/__init__.py": "", "odd.py": ""})
    layers = [*read_layers(LAYERS_PAGE), Layer(3, "again", ("low.py",))]
    found = layers_of(package, layers)
    assert [len(found[m]) for m in ("pkg", "pkg.low", "pkg.high", "pkg.odd")] == [1, 2, 1, 0]
    with pytest.raises(ValueError, match=r"\['pkg.low', 'pkg.odd'\]"):
        upward_imports(package, layers)
