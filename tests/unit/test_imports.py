"""No module imports more than MAX_PROJECT_IMPORTS of the project's modules: one that needs more does more than one
thing, and its reader holds that many other modules in mind to follow it.

import-linter (`lint-imports`, [tool.importlinter] in pyproject.toml) keeps the layers but has no contract for a
count, so this counts on grimp's graph, the one import-linter builds: every import, those inside functions and under
TYPE_CHECKING too, so moving an import into a function does not lower a module's count.
"""

from __future__ import annotations

import grimp

MAX_PROJECT_IMPORTS = 14
# the project's packages: [tool.importlinter] root_packages
ROOTS = ("runner", "workloads", "hydra_plugins")


def project_imports(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Each project module's directly imported project modules (a package's __init__ counts as a module)."""
    modules = graph.modules  # grimp's graph holds only the project's: external packages are left out
    return {module: graph.find_modules_directly_imported_by(module) & modules for module in modules}


def test_no_module_imports_more_than_the_limit_of_project_modules() -> None:
    graph = grimp.build_graph(*ROOTS, cache_dir=None)
    over = {module: found for module, found in project_imports(graph).items() if len(found) > MAX_PROJECT_IMPORTS}
    assert not over, "\n".join(
        f"{module} imports {len(found)} project modules (at most {MAX_PROJECT_IMPORTS}): {', '.join(sorted(found))}"
        for module, found in sorted(over.items())
    )
