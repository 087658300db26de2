"""What the notebook tests share: where the notebooks are, running one in a fresh kernel over a copy of the project,
and importing the classes and functions a notebook builds by hand.

Design choices:
- nbclient (with nbformat and ipykernel) runs a notebook as Jupyter would, one cell after another in a fresh kernel,
  and lets the test insert a cell after the one tagged `parameters` (papermill's convention) in memory: the file is
  never rewritten. nbmake would run the notebooks too, but as its own pytest items with no per-notebook parameters,
  and nbval compares stored outputs, which these notebooks do not keep.
- The kernel is started from a kernel spec written for the test, naming this interpreter, so a `python3` kernel
  installed elsewhere on the machine never runs the notebooks.
- A notebook runs over a copy of the project, so two notebooks (or a notebook and a test that trains) never share a
  `runs/` folder, and every file the notebook wrote can be listed afterwards.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import time
from pathlib import Path

from tests.helpers import ROOT

NOTEBOOKS = ROOT / "notebooks"
LANGUAGES = ("ko", "en")  # the Korean notebooks are the originals; the English ones the same notebooks translated
NAMES = ("01_characters_to_batches", "02_self_attention", "03_heads_block_gpt", "04_train_and_sample",
         "05_beyond_the_lecture")
# What a copy of the project leaves out: what git ignores, and what no notebook reads.
NOT_COPIED = (".git", ".venv", "runs", "outputs", "multirun", ".cache", "__pycache__", ".pytest_cache", ".ruff_cache",
              "tests", "docs", ".whl", ".gl")


def notebook_path(lang: str, name: str) -> Path:
    return NOTEBOOKS / lang / f"{name}.ipynb"


def read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def tagged(cell, tag: str) -> bool:
    return tag in cell.metadata.get("tags", [])


def copy_project(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return dest


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below `folder`: relative path -> (size, modification time in ns)."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _kernel_manager(spec_dir: Path):
    """A kernel manager for this interpreter's ipykernel, from a kernel spec that exists for this test only."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernel = spec_dir / "kernels" / "kochar-test"
    kernel.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "kochar-gpt tests", "language": "python"}
    (kernel / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelManager(kernel_name="kochar-test",
                         kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir / "kernels")]))


def execute(path: Path, override: str, project: Path, scratch: Path, timeout: int) -> tuple[object, float]:
    """Run the notebook at `path` top to bottom in a fresh kernel, started in its folder inside the copy `project`,
    with `override` as a cell right after the `parameters` cell -> (the executed notebook, seconds)."""
    import nbformat
    from nbclient import NotebookClient

    nb = read(path)
    index = next(i for i, c in enumerate(nb.cells) if tagged(c, "parameters"))
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(override, metadata={"tags": ["injected-parameters"]}))
    # Headless pictures, one thread (two notebooks share two cores), no bytecode written into the copy (so that any
    # file that appears there was written by the notebook), IPython's history in the scratch folder.
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "IPYTHONDIR": str(scratch / "ipython"), "PYTHONUNBUFFERED": "1"}
    for key in ("KOCHAR_DEBUG", "HYDRA_FULL_ERROR"):  # as tests.helpers leaves them out of every script it runs
        env.pop(key, None)
    client = NotebookClient(nb, km=_kernel_manager(scratch), timeout=timeout, allow_errors=False,
                            resources={"metadata": {"path": str(project / path.parent.relative_to(ROOT))}})
    started = time.perf_counter()
    client.execute(env=env)
    return nb, time.perf_counter() - started


def definitions(path: Path) -> dict:
    """The imports, functions, classes and constant assignments of every code cell of the notebook, executed into one
    namespace (nothing else of the notebook runs): what a test needs to build the notebook's hand-made model."""
    namespace: dict = {"__name__": f"notebook_{path.stem}"}
    for cell in code_cells(read(path)):
        tree = ast.parse(cell.source)
        kept = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                                 ast.ClassDef)) or _constant(node)]
        exec(compile(ast.Module(body=kept, type_ignores=[]), f"{path.name}", "exec"), namespace)  # noqa: S102
    return namespace


def _constant(node: ast.stmt) -> bool:
    """`NAME = <a literal>` (a string, a number, or a tuple of them): the constants the notebook's functions read."""
    return isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) and \
        _literal(node.value)


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True
