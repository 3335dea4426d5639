"""Which way imports run: every module's imports, read with ``ast``, follow the layers and form no cycle.

Each module of ``lightning_div`` belongs to a part (its folder under the package, or its own name
for a module at the package's root) and each part to a layer, bottom to top:

0. ``_internal`` (plumbing);
1. ``keys``, ``pairs``, ``types`` (names and types every part shares);
2. ``metrics`` (pure formulas), ``chitchat`` (the embedded corpus), ``reweighting`` (the contract
   between DRESS and a datamodule);
3. ``model``, ``dress``, ``semantic``, ``nli`` (the parts a measurement is made of);
4. ``measure`` (the measurement core) and ``datamodules`` (the data side), neither importing the other;
5. ``views``, ``summary``, ``report``, ``meta_eval``, ``preference`` (built on the core);
6. ``callbacks``, ``integrations``, ``cli`` (the front ends); only the command line imports another
   front end (it runs the callbacks);
7. the package itself (``lightning_div/__init__.py``, the names users import from the top).

A module may import its own part and the parts of lower layers; a part of its own layer only where
no rule below forbids it and no cycle follows. Every import counts: at the top of a module and inside
a function (a lazy import still runs, and still ties the two modules together). Only imports under
``if TYPE_CHECKING:`` are left out: they never run, and annotations may name a class of any layer.

One job a module, read from its size: no module over :data:`MAX_MODULE_LINES` lines, and at most
:data:`MAX_LONG_FUNCTIONS` functions over :data:`LONG_FUNCTION_LINES` lines in the package (issue 61).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = "lightning_div"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

LAYERS: dict[str, int] = {
    "_internal": 0,
    "keys": 1,
    "pairs": 1,
    "types": 1,
    "metrics": 2,
    "chitchat": 2,
    "reweighting": 2,
    "settings": 3,
    "model": 3,
    "dress": 3,
    "semantic": 3,
    "nli": 3,
    "measure": 4,
    "datamodules": 4,
    "views": 5,
    "summary": 5,
    "verdict": 5,
    "report": 5,
    "meta_eval": 5,
    "preference": 5,
    "callbacks": 6,
    "integrations": 6,
    "cli": 6,
    PACKAGE: 7,
}

#: A module longer than this has more than one job: split it (docs/development.md, "Layout").
MAX_MODULE_LINES = 500
#: A function longer than this (``def`` to its last line) is long; the package allows a few.
LONG_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 2

#: Parts of one layer that must not import each other (importer, imported).
FORBIDDEN_PEERS = {
    ("measure", "datamodules"),
    ("datamodules", "measure"),
    ("callbacks", "integrations"),
    ("integrations", "callbacks"),
    ("callbacks", "cli"),
    ("integrations", "cli"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def part_of(module: str) -> str:
    """``lightning_div.semantic.space`` -> ``semantic``; the package itself is its own part."""
    names = module.split(".")
    return names[1] if len(names) > 1 else PACKAGE


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, module: str, is_package: bool, out: list[tuple[str, int]]) -> None:
    """Every ``lightning_div`` module ``node`` imports, at any depth, except under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                _imports(other, module, is_package, out)
            continue
        if isinstance(child, ast.Import):
            out.extend((alias.name, child.lineno) for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:  # relative: from the module's own package upwards
                base = module.split(".")[: None if is_package else -1]
                base = base[: len(base) - (child.level - 1)]
                source = ".".join([*base, *([child.module] if child.module else [])])
            else:
                source = child.module or ""
            for alias in child.names:  # `from pkg import module` imports that module
                if source == PACKAGE and alias.name == "__version__":
                    continue  # a constant the package sets before any import: it ties nothing together
                out.append((f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source, child.lineno))
        _imports(child, module, is_package, out)


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in MODULES.items():
        found: list[tuple[str, int]] = []
        _imports(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py", found)
        edges: dict[str, int] = {}
        for target, line in found:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in MODULES:  # `import lightning_div.x.y as z` of a name, not a module
                    target = target.rpartition(".")[0]
                if target != module:
                    edges.setdefault(target, line)
        graph[module] = edges
    return graph


GRAPH = import_graph()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_top_level_lazy_and_relative_imports():
    # the reader itself: a top-level import, one inside a function, `from package import module`
    assert "lightning_div.pairs" in GRAPH["lightning_div.measure.sample"]
    assert "lightning_div.keys" in GRAPH["lightning_div.metrics.lexical"]  # `from lightning_div import keys`
    assert "lightning_div.model.tiny" in GRAPH["lightning_div.model.loading"]  # inside load_tokenizer
    # TYPE_CHECKING imports are left out: the package's own names load lazily, at first use
    assert "lightning_div.callbacks" not in GRAPH[PACKAGE]
    assert len(GRAPH) == len(MODULES) > 100


def test_every_part_has_a_layer():
    unknown = sorted({part_of(m) for m in MODULES} - set(LAYERS))
    assert not unknown, f"parts without a layer in tests/test_architecture.py (add them to LAYERS): {unknown}"


def test_imports_point_down():
    wrong = []
    for module, edges in GRAPH.items():
        part = part_of(module)
        for target, line in edges.items():
            other = part_of(target)
            if other == part:
                continue
            if LAYERS[other] > LAYERS[part] or (part, other) in FORBIDDEN_PEERS:
                wrong.append(
                    f"{MODULES[module].relative_to(ROOT.parent)}:{line}: {part} (layer {LAYERS[part]}) "
                    f"imports {target} ({other}, layer {LAYERS[other]})"
                )
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_core_plumbing_and_data_side_import_what_the_rules_say():
    # the rules the layers imply, said once more by name so that a change of LAYERS cannot lift them
    never = {
        "measure": {"datamodules", "callbacks", "integrations", "cli"},
        "metrics": {"semantic", "model", "measure", "nli", "dress", "datamodules", "callbacks", "integrations"},
        "_internal": set(LAYERS) - {"_internal"},
        "types": set(LAYERS) - {"_internal", "pairs", "keys", "types"},
        "datamodules": {"dress", "measure", "callbacks", "integrations", "cli"},
        "model": {"datamodules", "measure", "callbacks", "integrations", "cli"},
    }
    wrong = [
        f"{module} imports {target}"
        for module, edges in GRAPH.items()
        for target in edges
        if part_of(target) in never.get(part_of(module), set())
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules():
    found = cycles({module: set(edges) for module, edges in GRAPH.items()})
    assert not found, "modules that import each other (lazy imports included):\n" + "\n".join(map(str, found))


def test_no_import_cycle_between_parts():
    parts: dict[str, set[str]] = defaultdict(set)
    for module, edges in GRAPH.items():
        parts[part_of(module)].update(part_of(t) for t in edges if part_of(t) != part_of(module))
    found = cycles(parts)
    assert not found, "parts that import each other (lazy imports included):\n" + "\n".join(map(str, found))


def test_the_cycle_finder_finds_a_cycle_and_only_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def long_functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """``(name, first line, lines)`` of every function or method of ``tree`` over :data:`LONG_FUNCTION_LINES` lines."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > LONG_FUNCTION_LINES
    ]


def test_no_module_is_over_the_line_limit():
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in MODULES.values()}
    over = sorted(f"{p.relative_to(ROOT.parent)}: {n} lines" for p, n in sizes.items() if n > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (one job a module: split them):\n" + "\n".join(over)


def test_at_most_two_long_functions_in_the_package():
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name} ({n} lines)"
        for path in MODULES.values()
        for name, line, n in long_functions(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert len(found) <= MAX_LONG_FUNCTIONS, (
        f"{len(found)} functions over {LONG_FUNCTION_LINES} lines, at most {MAX_LONG_FUNCTIONS} allowed:\n"
        + "\n".join(sorted(found))
    )


def test_the_long_function_finder_counts_def_to_last_line():
    short = "def f():\n" + "    x = 1\n" * (LONG_FUNCTION_LINES - 1)  # exactly the limit: not long
    long = "class C:\n    def g(self):\n" + "        x = 1\n" * LONG_FUNCTION_LINES  # one over, in a class
    assert long_functions(ast.parse(short)) == []
    assert long_functions(ast.parse(long)) == [("g", 2, LONG_FUNCTION_LINES + 1)]
