"""What the notebook tests share: where the notebooks are, running one in a fresh kernel over a copy of the project
(notebooks/execute.py, the runner `make notebooks-run` uses too), and importing the classes and functions a notebook
builds by hand.

Design choices:
- The tests run every notebook with smaller settings, placed in a cell right after the `parameters` cell in memory
  (the file is never rewritten), and with matplotlib's Agg backend: the figures are made but not drawn, which is
  the slow part. The stored outputs, drawn, are checked for their sizes instead (tests/notebooks/test_notebooks.py).
- nbmake would run the notebooks too, but as its own pytest items with no per-notebook parameters, and nbval
  compares stored outputs, which would fail on every machine whose last digits differ.
"""

from __future__ import annotations

import ast
from pathlib import Path

from notebooks.execute import (  # noqa: F401  (re-exported for the tests)
    LANGUAGES,
    NAMES,
    NOTEBOOKS,
    code_hash,
    copy_project,
    notebook_path,
    read,
    tagged,
)
from notebooks.execute import execute as _execute


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below `folder`: relative path -> (size, modification time in ns)."""
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def execute(path: Path, override: str, project: Path, scratch: Path, timeout: int) -> tuple[object, float]:
    """Run the notebook at `path` top to bottom in a fresh kernel, started in its folder inside the copy `project`,
    with `override` as a cell right after the `parameters` cell, figures not drawn, one thread (two notebooks share
    two cores) -> (the executed notebook, seconds)."""
    return _execute(path, override, project, scratch, timeout, pictures=False, threads=1)


def definitions(path: Path) -> dict:
    """The imports, functions, classes and constant assignments of every code cell of the notebook, executed into one
    namespace (nothing else of the notebook runs): what a test needs to build the notebook's hand-made model."""
    namespace: dict = {"__name__": f"notebook_{path.stem}"}
    for cell in code_cells(read(path)):
        tree = ast.parse(cell.source)
        kept = [
            node
            for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) or _constant(node)
        ]
        exec(compile(ast.Module(body=kept, type_ignores=[]), f"{path.name}", "exec"), namespace)  # noqa: S102
    return namespace


def _constant(node: ast.stmt) -> bool:
    """`NAME = <a literal>` (a string, a number, or a tuple of them): the constants the notebook's functions read."""
    return isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) and _literal(node.value)


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True
