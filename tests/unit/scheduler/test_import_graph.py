"""The scheduler's modules import one another without a cycle, counting the imports made only for type checking
(`if TYPE_CHECKING:`), which lint-imports' layers do not see: a part that needs another's type names it through a
Protocol of its own instead (scheduler.gangs.Host), so each part can be read, tested and replaced alone."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_scheduling.scheduler

PACKAGE = "gpu_scheduling.scheduler"


def module_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports anywhere in its source (functions and TYPE_CHECKING blocks
    included)."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                # `from package import module` imports that module; `from module import name`, the module.
                named = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t for t in named if t in modules] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name and t != package}
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its modules in order, the first repeated last), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_the_scheduler_has_no_import_cycle_type_checking_imports_included() -> None:
    graph = module_graph(Path(gpu_scheduling.scheduler.__file__).parent, PACKAGE)
    assert f"{PACKAGE}.controller" in graph and f"{PACKAGE}.plugins.node_ports" in graph
    assert cycle_in(graph) is None, " -> ".join(cycle_in(graph) or [])


def test_a_cycle_is_found_where_there_is_one() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None
