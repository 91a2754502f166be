"""The house's floors: every import in ``pgra/`` (module level, inside a function or under ``if TYPE_CHECKING:``)
runs down or sideways, never up, and no modules import each other in a cycle, not even for type hints alone. The
floors are docs/architecture.md's."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pgra"
# lowest first; a module belongs to the floor of its longest matching prefix. Every prefix is a folder (a newcomer
# finds a part by the job of its folder, docs/architecture.md's rooms), never a single module
FLOORS: list[tuple[str, ...]] = [
    # the ground floor, three levels of rooms: what every part uses (errors, configs, the registry) and folders on
    # disk (atomic writes and manifests, ownership, locks, provenance)
    ("pgra.core", "pgra.storage"),
    ("pgra.data", "pgra.tasks", "pgra.runtime"),  # texts read and passed on; tasks; devices, processes, cost, training
    ("pgra.results", "pgra.lm", "pgra.stages"),   # predictions and metrics; language models and prompts; the stage
                                                  # interface and its registry (the stages live with their parts)
    ("pgra.retrieval",),                      # stage 1: encoders, indexes, search
    ("pgra.selection",),                      # demonstrations (KATE reuses the retrieval encoder)
    ("pgra.rerank", "pgra.reader"),           # stage 2 (rerankers, the stage families) and the FiD reader
    ("pgra.icl",),                            # in-context learning
    ("pgra.methods",),                        # every compared method behind one interface
    ("pgra.simcse",),                         # training a retriever's encoder (judged with a method's kNN vote)
    ("pgra.experiment", "pgra.serving"),      # the grid; a finished run put to use (predict, export, the Hub)
    ("pgra.evaluation",),                     # reports read the experiment's layout (the command writes them)
    ("pgra.analysis",),
    ("pgra.demo",),
    ("pgra.cli", "pgra"),                     # the commands and the package's public names
]
LOOSE = {"stages"}  # the one module still directly under pgra/ (a folder of its own in issue 70 item 1)
# the paper's reranker: a folder of pgra.rerank beside the other families (its stages too: pgra_full's full_search),
# which the shared modules reach through the reranker registry (base.py's BUILTIN), not by import
PROMPT_GUIDED = "pgra.rerank.prompt_guided"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            nodes.update(id(n) for child in node.body for n in ast.walk(child))
    return nodes


def imports(runtime_only: bool = False) -> dict[str, set[str]]:
    """Every pgra module -> the pgra modules it imports (``from x import name`` counts as x.name when that is a
    module, else as x); ``runtime_only`` leaves out the imports under ``if TYPE_CHECKING:``."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        tree = ast.parse(path.read_text())
        skip = _type_only(tree) if runtime_only else set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                found = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                targets.update(found if len(found) == len(node.names) else [target, *found])
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def floor(module: str) -> int:
    best, level = -1, -1
    for i, prefixes in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    assert level >= 0, f"{module} is on no floor: add it to FLOORS (and docs/architecture.md)"
    return level


def test_no_import_runs_upward():
    graph = imports()
    upward = sorted(f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})" for a, targets in graph.items()
                    for b in targets if floor(b) > floor(a) and not a.startswith(b + "."))
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    """No cycle among pgra's modules, counting every import: a type-only one (under ``if TYPE_CHECKING:``) too, so a
    type two modules share has one home on the lower side (or is passed in) rather than a circle hidden from run
    time."""
    graph = imports(runtime_only=False)
    # a package's __init__ re-exports its modules: an import of the package from inside it is an import of the
    # module that defines the name, so edges into an __init__ from its own package are left out
    edges = {a: {b for b in bs if not a.startswith(b + ".")} for a, bs in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_grid_imports_nothing_from_rerank():
    """The grid asks the stages and the config, never the rerankers: ``pgra/experiment/grid.py`` imports no module
    of ``pgra.rerank`` (at module level, in a function or for type hints)."""
    named = sorted(m for m in imports()["pgra.experiment.grid"] if m == "pgra.rerank" or m.startswith("pgra.rerank."))
    assert not named, named


def test_the_floors_name_folders_and_every_module_is_in_one():
    """The architecture names rooms, not modules: every prefix of FLOORS is a folder of pgra (or the package
    itself), and no module but ``__init__`` lies loose under ``pgra/``."""
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert loose <= LOOSE, f"modules directly under pgra/: {sorted(loose - LOOSE)}: give each a room (a folder)"
    for prefix in (p for floor_ in FLOORS for p in floor_):
        folder = PACKAGE.parent.joinpath(*prefix.split("."))
        assert prefix == "pgra" or folder.is_dir() or prefix.rpartition(".")[2] in LOOSE, f"{prefix} is no folder"


def test_the_floors_name_every_package():
    packages = {p.parent.relative_to(PACKAGE.parent).as_posix().replace("/", ".") for p in PACKAGE.rglob("__init__.py")}
    for package in packages:
        floor(package)


def test_the_shared_rerank_modules_reach_the_prompt_guided_reranker_through_the_registry():
    """The prompt-guided reranker is one family of ``pgra.rerank``, not the exception: the modules every reranker
    shares (the interface, the config, a reranked folder read back) and the other families import
    nothing of its folder, counting imports inside functions and for type hints."""
    graph = imports()

    def guided(module: str) -> bool:
        return module == PROMPT_GUIDED or module.startswith(PROMPT_GUIDED + ".")

    reaching = {a: sorted(filter(guided, targets)) for a, targets in graph.items()
                if a.startswith("pgra.rerank.") and not guided(a) and any(map(guided, targets))}
    assert not reaching, reaching


def _named_modules(tree: ast.AST, modules: set[str]) -> set[str]:
    """The pgra modules a file names in a string (``"pgra.x"`` or ``"pgra.x:attr"``: what importlib, runpy or a
    payload would load at run time)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.partition(":")[0]
            if name in modules and name != "pgra":  # "pgra" alone is also a method's name
                found.add(name)
    return found


def test_no_module_looked_up_by_name_at_run_time_runs_upward():
    """A module named in a string obeys the floors like an import (a config's choices come from the registry the
    field's module imports, not from "pgra.x" strings on the ground floor), and a registry loads its built-in parts
    from its own package only (``__package__``): a family whose parts live on several floors is assembled where the
    drawing sees it (the stages: :mod:`pgra.methods` imports the built-in families)."""
    graph = imports()
    modules = set(graph)
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name, tree = _module(path), ast.parse(path.read_text())
        upward += [f"{name} names {m} (floor {floor(m)} > {floor(name)})" for m in sorted(_named_modules(tree, modules))
                   if floor(m) > floor(name)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Registry":
                package = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "package"), None)
                if package is not None and getattr(package, "id", None) != "__package__":
                    upward.append(f"{name}: a Registry loads its built-in parts from {ast.unparse(package)}")
    assert not upward, "\n".join(upward)


def test_the_grid_and_the_cli_start_without_importing_what_only_one_path_needs():
    """Every cell child, torchrun rank and command imports the experiment layer: scikit-learn (1-2 s with pandas
    and scipy.stats) is imported where a metric or the probe needs it, not at start-up."""
    import subprocess
    import sys

    code = ("import sys, pgra.cli, pgra.experiment.grid, pgra.experiment.child; "
            "print(sorted(m for m in ('sklearn', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
