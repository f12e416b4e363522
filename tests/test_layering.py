"""The package layering of docs/architecture.md, enforced on the source's imports.

Data flows one way: ``cli → dover/eval → methods → replay → judging → shortlist → llm →
traces``, with the leaves (errors, usage, secret_names, redact, exitcodes, registry) under
everything. A module may import its own package and any package on a lower layer, never a
higher one (imports inside ``if TYPE_CHECKING:`` blocks included: a cycle for the type
checker is still a cycle for the reader). Packages on the same layer may not import each
other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "faultfinder"

LAYERS: list[set[str]] = [
    {
        "errors",
        "usage",
        "exitcodes",
        "secret_names",
        "contracts",
        "shown",
        "loopback",
        "plugin_groups",
        "registry_checks",
        "__init__",
    },
    {"redact", "registry", "http_bodies"},
    {"traces"},
    {"llm"},
    {"shortlist"},
    {"judging"},
    {"replay"},
    {"methods"},
    {"dover", "eval"},
    {"scale", "collect", "writeback", "writeback_http", "results_store", "demo_team", "testing"},
    {"ui"},
    {"cli"},
    {"__main__"},
]
"""Bottom to top. ``registry`` names the built-ins by string and imports them lazily, so
it stays a leaf; ``methods.agentic.dynamic`` (TraceElephant's dynamic check) replays, so
``methods`` sits above ``replay``."""

LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

# Same-layer imports that are part of the design (the importer may use the imported).
ALLOWED_SIDEWAYS = {
    ("testing", "demo_team"),
    ("scale", "eval"),
    ("scale", "dover"),
    ("writeback_http", "writeback"),
}
# Upward imports for typing only (inside `if TYPE_CHECKING:`): the registry's method
# helpers are typed with the Method protocol they return.
TYPING_ONLY = {("faultfinder.registry", "faultfinder.judging.method")}
# Upward imports inside the registry's checks, made once a component is imported: the
# module that says what a method, an importer or a model-API adapter is.
CONTRACTS = {
    ("faultfinder.registry_checks", "faultfinder.judging.method"),
    ("faultfinder.registry_checks", "faultfinder.traces.importers.base"),
    ("faultfinder.registry_checks", "faultfinder.replay.apis.base"),
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("faultfinder"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("faultfinder"):
                # `from package import module` imports the module, not the package's
                # __init__ (it runs, but it is not what the code depends on).
                subs = {f"{name}.{a.name}" for a in node.names} & MODULES
                found.update(subs or {name})
    return found


MODULES = {_module_name(p) for p in SRC.rglob("*.py")}


def _edges() -> list[tuple[str, str]]:
    edges = []
    for path in sorted(SRC.rglob("*.py")):
        source = _module_name(path)
        edges.extend((source, target) for target in sorted(_imports(path)))
    return edges


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py")}
    missing = (packages | modules) - set(LAYER_OF)
    assert not missing, f"give these a layer in tests/test_layering.py: {sorted(missing)}"


def test_imports_only_go_down() -> None:
    wrong = []
    for source, target in _edges():
        a, b = _package(source), _package(target)
        if a == b or (a, b) in ALLOWED_SIDEWAYS or (source, target) in TYPING_ONLY | CONTRACTS:
            continue
        if LAYER_OF[b] >= LAYER_OF[a]:
            wrong.append(f"{source} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_cycles_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in _edges():
        while target not in MODULES and "." in target:
            target = target.rpartition(".")[0]
        if target != source and target in MODULES:
            graph.setdefault(source, set()).add(target)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_methods_holds_only_methods() -> None:
    """Every module or package directly under methods/ is a registered method (or a
    group of them, like the Who&When baselines)."""
    from faultfinder.registry import METHODS

    homes = {
        entry.target.split(":")[0].split(".")[2]
        for entry in METHODS.entries().values()
        if entry.target.startswith("faultfinder.methods.")
    }
    present = {
        p.stem if p.is_file() else p.name
        for p in (SRC / "methods").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert present <= homes, f"not methods: {sorted(present - homes)}"


MAX_MODULE_LINES = 500
"""A module longer than this is split along a seam it already has, each part one job."""


def test_modules_stay_short() -> None:
    long = sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES
    )
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("pkg", sorted(LAYER_OF))
def test_layers_name_real_packages(pkg: str) -> None:
    assert (SRC / pkg).is_dir() or (SRC / f"{pkg}.py").exists()


# --- docs/architecture.md matches src/ ----------------------------------------------------

ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"


def test_architecture_doc_names_every_package_and_module() -> None:
    """Every directory under src/faultfinder (as `traces/importers/`) and every top-level
    module (as `redact.py`) is named in docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    directories = {
        path.relative_to(SRC).as_posix() + "/"
        for path in SRC.rglob("*")
        if path.is_dir() and path.name != "__pycache__"
    }
    modules = {path.name for path in SRC.glob("*.py")}
    missing = sorted(name for name in directories | modules if name not in text)
    assert not missing, f"docs/architecture.md does not mention: {missing}"


def _doc_layers() -> dict[str, int]:
    """Line of the '## Layers' diagram (top = 0) that names each package or module."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("\n## Layers\n") :]
    block = section.split("```\n", 2)[1]
    lines: dict[str, int] = {}
    for number, line in enumerate(block.splitlines()):
        names = line.strip().split("  ")[0].split()  # the first column: the names
        for name in names:
            if name.endswith(("/", ".py")):
                lines.setdefault(name.removesuffix("/").removesuffix(".py"), number)
    return lines


def test_architecture_doc_draws_the_layers_of_this_test() -> None:
    """The diagram lists the packages of ``LAYERS`` top to bottom in the same order."""
    drawn = _doc_layers()
    packages = set(LAYER_OF) - {"__init__", "__main__"}
    assert set(drawn) == packages, sorted(set(drawn) ^ packages)
    wrong = [
        f"{a} (layer {LAYER_OF[a]}) is drawn at or above {b} (layer {LAYER_OF[b]})"
        for a in packages
        for b in packages
        if LAYER_OF[a] < LAYER_OF[b] and drawn[a] <= drawn[b]
    ]
    assert not wrong, "\n".join(sorted(wrong))
