"""Runs the notebooks in a fresh kernel (notebooks/README.md): `make notebooks-run` stores them, the tests never do.

Design choices:
- The tests' small settings are a cell inserted after the `parameters` one, in memory only: never in a stored file.
- Each run gets a fresh copy of the project: no shared `runs/`, its files listable, its paths caught (`ABSOLUTE`).
- The kernel is this interpreter; the stored notebook names the standard `python3` kernel, which Jupyter and Colab have.
- Stored: what Jupyter shows (a progress bar's last state) and the code cells' hash; no timing, so ko and en match."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LANGUAGES = ("ko", "en")  # the Korean notebooks are the originals; the English ones the same notebooks translated
NAMES = (
    "01_characters_to_batches",
    "02_self_attention",
    "03_heads_block_gpt",
    "04_train_and_sample",
    "05_beyond_the_lecture",
)
# What a copy of the project leaves out: what git ignores, and what no notebook reads.
NOT_COPIED = tuple(
    ".git .venv runs outputs multirun .cache __pycache__ .pytest_cache .ruff_cache tests docs .whl .gl".split()
)
CODE_HASH_KEY = "code_sha256"  # under the notebook's metadata["kochar"]
PICTURE_BYTES = 100_000  # each stored picture (a PNG) under this
NOTEBOOK_BYTES = 1_000_000  # each stored notebook under this
ABSOLUTE = re.compile(r"/home/|/Users/|/work/|/tmp/|/root/|/content/|[A-Za-z]:\\\\")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
INLINE = "module://matplotlib_inline.backend_inline"
MISSING_GLYPH = ("missing from font", "does not have a glyph")  # a box drawn: text's warning, mathtext's log
PROJECT_URL_LINE = re.compile(r"^PROJECT_URL = .*$", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


def notebook_path(lang: str, name: str) -> Path:
    return NOTEBOOKS / lang / f"{name}.ipynb"


def read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def tagged(cell, tag: str) -> bool:
    return tag in cell.metadata.get("tags", [])


def code_hash(nb) -> str:
    """The hash of the code cells the outputs came from, less `PROJECT_URL`'s line: a clone's origin changes none."""
    sources = [
        PROJECT_URL_LINE.sub("PROJECT_URL = ...", c.source)
        for c in nb.cells
        if c.cell_type == "code" and not tagged(c, "injected-parameters")
    ]
    return hashlib.sha256(json.dumps(sources, ensure_ascii=False).encode("utf-8")).hexdigest()


def copy_project(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return dest


def _kernel_manager(spec_dir: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernel = spec_dir / "kernels" / "kochar-notebooks"
    kernel.mkdir(parents=True)
    # --log-level=ERROR: the kernel runs on this machine only; its warning about unencrypted TCP is not for the user
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--log-level=ERROR"],
        "display_name": "kochar-gpt notebooks",
        "language": "python",
    }
    (kernel / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelManager(
        kernel_name="kochar-notebooks", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir / "kernels")])
    )


def execute(
    path: Path,
    override: str | None,
    project: Path,
    scratch: Path,
    timeout: int,
    pictures: bool = True,
    threads: int | None = None,
) -> tuple[object, float]:
    """Run `path` in a fresh kernel in its folder of the copy `project`, `override` after `parameters` -> (nb, seconds).
    Without `pictures`, figures are made but never drawn (matplotlib's Agg backend): the tests' way, faster."""
    import nbformat
    from nbclient import NotebookClient

    nb = read(path)
    if override is not None:
        index = next(i for i, c in enumerate(nb.cells) if tagged(c, "parameters"))
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(override, metadata={"tags": ["injected-parameters"]}))
    # No bytecode in the copy (any file there is the notebook's), IPython's history in scratch, no verbose variables.
    env = {
        **os.environ,
        "MPLBACKEND": INLINE if pictures else "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
        "IPYTHONDIR": str(scratch / "ipython"),
        "PYTHONUNBUFFERED": "1",
    }
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    for key in ("KOCHAR_DEBUG", "HYDRA_FULL_ERROR"):
        env.pop(key, None)
    client = NotebookClient(
        nb,
        km=_kernel_manager(scratch),
        timeout=timeout,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(project / path.parent.relative_to(ROOT))}},
    )
    started = time.perf_counter()
    client.execute(env=env)
    return nb, time.perf_counter() - started


def last_state(text: str) -> str:
    """Stream text as a terminal leaves it: each line's carriage-return redraws cut to the last that shows something."""
    return "\n".join(next((p for p in reversed(line.split("\r")) if p.strip()), "") for line in text.split("\n"))


def tidy(nb) -> None:
    """What is stored: each stream in one piece at its last state, the standard kernel, the hash of the code cells."""
    for cell in nb.cells:
        merged: list = []
        for output in cell.get("outputs", []):
            if merged and merged[-1].output_type == output.output_type == "stream" and merged[-1].name == output.name:
                merged[-1].text += output.text  # one block per stream, as Jupyter shows it
                continue
            merged.append(output)
        for output in merged:
            if output.output_type == "stream":
                output.text = last_state(output.text)
        if cell.cell_type == "code":
            cell.outputs = merged
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata.setdefault("kochar", {})[CODE_HASH_KEY] = code_hash(nb)


def pictures(nb) -> list[bytes]:
    return [
        base64.b64decode(o.data["image/png"])
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]


def problems(nb, text: str) -> list[str]:
    """What keeps an executed notebook from being stored: the limits tests/notebooks/test_notebooks.py checks."""
    found = []
    if len(text.encode("utf-8")) >= NOTEBOOK_BYTES:
        found.append(f"{len(text.encode('utf-8')):,} bytes (the limit is {NOTEBOOK_BYTES:,})")
    found += [
        f"a picture of {len(png):,} bytes (the limit is {PICTURE_BYTES:,})"
        for png in pictures(nb)
        if len(png) >= PICTURE_BYTES
    ]
    if ABSOLUTE.search(text):
        found.append(f"an absolute path in its outputs: {ABSOLUTE.search(text).group(0)!r}...")
    if any(words in text for words in MISSING_GLYPH):
        found.append('a picture drew a character no font had ("Glyph ... missing from font")')
    return found


def run_and_store(path: Path, timeout: int) -> str:
    """Execute and store `path` -> a line saying so; a one-line RuntimeError if it fails or breaks a limit."""
    import nbformat
    from nbclient.exceptions import CellExecutionError

    with tempfile.TemporaryDirectory(prefix="kochar-notebook-") as scratch:
        project = copy_project(Path(scratch) / "kochar-gpt")
        try:
            nb, seconds = execute(path, None, project, Path(scratch), timeout)
        except CellExecutionError as e:
            lines = [ANSI.sub("", line) for line in str(e).splitlines() if line.strip()]
            raise RuntimeError(f"{path.relative_to(ROOT)} failed: {lines[-1] if lines else e}") from None
    tidy(nb)
    text = nbformat.writes(nb) + "\n"
    found = problems(nb, text)
    if found:
        raise RuntimeError(f"{path.relative_to(ROOT)} not stored: {'; '.join(found)}")
    path.write_text(text, encoding="utf-8")
    sizes = [len(png) // 1000 for png in pictures(nb)]
    return (
        f"{path.relative_to(ROOT)}: {seconds:.0f} s, {len(text.encode('utf-8')) // 1000} KB, "
        f"{len(sizes)} picture(s) {sizes} KB"
    )


def selected(patterns: list[str]) -> list[Path]:
    """The notebooks whose `lang/name` contains any of the patterns (all of them without patterns)."""
    paths = [notebook_path(lang, name) for lang in LANGUAGES for name in NAMES]
    return [p for p in paths if not patterns or any(s in f"{p.parent.name}/{p.stem}" for s in patterns)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Execute the notebooks with their own settings and store them "
        "with their outputs (what `make notebooks-run` does)."
    )
    parser.add_argument(
        "only",
        nargs="*",
        help="run only the notebooks whose ko/NAME or en/NAME contains one of "
        "these, e.g. 04 or ko/02 (default: all ten)",
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds one cell may take (default 900)")
    args = parser.parse_args(argv)
    paths = selected(args.only)
    if not paths:
        print(f"execute: no notebook matches {' '.join(args.only)}", file=sys.stderr)
        return 2
    for path in paths:
        try:
            print(run_and_store(path, args.timeout), flush=True)
        except RuntimeError as e:
            print(f"execute: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
