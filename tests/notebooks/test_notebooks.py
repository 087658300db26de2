"""The notebooks (notebooks/ko, the originals, and notebooks/en, the same notebooks translated): each runs top to
bottom in a fresh kernel with small settings, within a time limit, and writes nothing outside runs/; each is stored
executed (`make notebooks-run`), its outputs made from the code it holds, within the size limits and with no absolute
path; the English notebooks hold the Korean ones' code; each opens the same way (the lecture and the book named, the
setup cell, then the parameters cell) and ends with exercises whose solutions are folded; the setup cell finds the
project, clones it, or fails in one line; the pictures' Hangul font comes from a package; together they follow the
README's reading path; the READMEs list them with their Colab links; and the entry scripts never import the notebook
tooling. tests/notebooks/test_notebook_code.py checks what the notebooks build by hand against the package."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path

import pytest

from notebooks.execute import ABSOLUTE, CODE_HASH_KEY, MISSING_GLYPH, NOTEBOOK_BYTES, PICTURE_BYTES, pictures
from tests.docs.test_layout import READ_THE_CODE
from tests.helpers import ROOT
from tests.notebooks.notebook_tools import (
    LANGUAGES,
    NAMES,
    NOTEBOOKS,
    code_cells,
    code_hash,
    copy_project,
    execute,
    files_under,
    notebook_path,
    read,
    tagged,
)

PATHS = [notebook_path(lang, name) for lang in LANGUAGES for name in NAMES]
IDS = [f"{p.parent.name}/{p.stem}" for p in PATHS]
# The test's settings, placed right after each notebook's parameters cell: a few dozen steps instead of hundreds.
SMALL = {"04_train_and_sample": 'MODEL = "tiny"\nMAX_STEPS = 20\nHAND_STEPS = 3', "05_beyond_the_lecture": "STEPS = 10"}
SECONDS = 150  # each notebook, kernel start included, with the settings above (about 10 s each on 2 idle cores)
TOOLING = (
    "nbclient",
    "nbformat",
    "ipykernel",
    "jupyter_client",
    "IPython",
    "matplotlib",
    "jupyterlab",
    "koreanize_matplotlib",
)
COLAB = "https://colab.research.google.com/github/"


def test_there_are_ten_notebooks_and_nothing_else():
    found = sorted(p.relative_to(NOTEBOOKS).as_posix() for p in NOTEBOOKS.rglob("*.ipynb"))
    assert found == sorted(p.relative_to(NOTEBOOKS).as_posix() for p in PATHS)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_notebook_runs_top_to_bottom_and_writes_only_under_runs(path, tmp_path):
    project = copy_project(tmp_path / "project")
    before = files_under(project)
    nb, seconds = execute(
        path,
        SMALL.get(path.stem, "# the notebook's own settings are small already"),
        project,
        tmp_path,
        timeout=SECONDS,
    )
    assert seconds < SECONDS, f"{path.name} took {seconds:.0f} s"
    after = files_under(project)
    written = sorted(f for f in after if before.get(f) != after[f])
    assert all(f.startswith("runs/") for f in written), f"written outside runs/: {written}"
    assert not [f for f in before if f not in after], "the notebook removed files of the project"
    if path.stem in ("04_train_and_sample", "05_beyond_the_lecture"):
        run = f"runs/notebook-{path.stem[:2]}"
        assert {f"{run}/ckpt.pt", f"{run}/vocab.json"} <= set(written), written
    assert not [o for c in code_cells(nb) for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_notebooks_are_stored_executed_within_the_size_limits(path):
    """What a learner sees on GitHub: every cell run once, in order, no error, small pictures, no absolute path."""
    raw = path.read_text(encoding="utf-8")
    assert len(raw.encode("utf-8")) < NOTEBOOK_BYTES, f"{path.name} is {len(raw.encode()):,} bytes"
    assert not ABSOLUTE.search(raw), f"{path.name} holds an absolute path: {ABSOLUTE.search(raw).group(0)!r}"
    nb = read(path)
    cells = code_cells(nb)
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name} is not stored executed in order: {RUN_THEM}"
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    sizes = [len(png) for png in pictures(nb)]
    assert all(size < PICTURE_BYTES for size in sizes), f"{path.name}: pictures of {sizes} bytes"
    assert not [m for m in MISSING_GLYPH if m in raw], f"{path.name}: a picture drew a character as a box"


RUN_THEM = "run `make notebooks-run ARGS=<lang/number>` and commit the notebook it stores"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_the_stored_outputs_come_from_the_code_the_notebook_holds(path):
    """The code cells' hash, recorded by `make notebooks-run` when it stored the outputs, is the code's hash now."""
    nb = read(path)
    recorded = nb.metadata.get("kochar", {}).get(CODE_HASH_KEY)
    assert recorded == code_hash(nb), (
        f"{path.parent.name}/{path.name}: the code changed since its outputs were made; {RUN_THEM}"
    )


def test_a_changed_code_cell_makes_the_outputs_stale():
    nb = read(PATHS[0])
    before = code_hash(nb)
    code_cells(nb)[-1].source += "\n"
    assert code_hash(nb) != before
    nb.cells[0].source += " (prose changes no output)"
    code_cells(nb)[-1].source = code_cells(read(PATHS[0]))[-1].source
    setup = code_cells(nb)[0]
    setup.source = setup.source.replace(project_url(), "https://github.com/someone/a-fork")  # nor the address
    assert code_hash(nb) == before


LANG_LINE = re.compile(r'^LANG = "(ko|en)"$', re.M)  # the setup cell's one line the two languages differ in


def code_without_comments(source: str) -> str:
    """The code of a cell with its comments and blank lines left out, and its `LANG` line the same in both languages:
    what a translation must not change."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
    lines = tokenize.untokenize(tokens).splitlines()
    return LANG_LINE.sub('LANG = "?"', "\n".join(line.rstrip() for line in lines if line.strip()))


def relative_links(cell) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", cell.source) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("name", NAMES)
def test_the_english_notebook_is_the_korean_one_translated(name):
    ko, en = read(notebook_path("ko", name)), read(notebook_path("en", name))
    assert [c.cell_type for c in ko.cells] == [c.cell_type for c in en.cells]
    for i, (k, e) in enumerate(zip(ko.cells, en.cells, strict=True)):
        assert k.metadata == e.metadata, f"cell {i}: metadata differ"
        if k.cell_type == "code":
            assert code_without_comments(k.source) == code_without_comments(e.source), f"cell {i}: the code differs"
        else:
            assert re.search("[가-힣]", k.source), f"cell {i} of the Korean notebook has no Korean"
            english = [t.replace("docs/en/", "docs/ko/") for t in relative_links(e)]
            assert relative_links(k) == english, f"cell {i}: the links differ"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_relative_link_in_a_notebook_resolves(path):
    for cell in read(path).cells:
        for target in relative_links(cell) if cell.cell_type == "markdown" else []:
            assert (path.parent / target.partition("#")[0]).exists(), f"{path.name}: {target} does not exist"


# The lecture (the video and its code) and the book (its original and its Korean edition), named by every notebook
# at its top and by notebooks/README.md.
SOURCES = (
    "https://www.youtube.com/watch?v=kCc8FmEb1nY",
    "https://github.com/karpathy/ng-video-lecture",
    "Build a Large Language Model (From Scratch)",
    "밑바닥부터 만들면서 배우는 LLM",
)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_notebook_opens_naming_the_lecture_the_book_its_chapters_and_its_seed(path):
    top = read(path).cells[0].source
    assert [s for s in SOURCES if s not in " ".join(top.split())] == [], f"{path.name} does not name them at its top"
    chapters = re.findall(r"(\d)장|chapter (\d)", top)
    assert chapters or path.stem.startswith("05"), f"{path.name} names no chapter of the book"
    seed = re.search(r"^SEED = (\d+)", code_cells(read(path))[1].source, re.M).group(1)
    (line,) = re.findall(r"^- (?:시드|The seed): .*$", top, re.M)
    assert f"`SEED = {seed}`" in line or (f"{seed}" in line and "`SEED`" in line), f"{path.name}: {line}"


@pytest.mark.parametrize("readme", ["README.md", "README.ko.md"])
def test_the_notebooks_readme_names_the_lecture_and_the_book_and_says_when_colab_works(readme):
    text = " ".join((NOTEBOOKS / readme).read_text(encoding="utf-8").split())
    assert [s for s in SOURCES if s not in text] == []
    assert re.search(r"chapter 2|2장", text) and re.search(r"chapter 5|5장", text)
    assert project_url() in text and "make notebooks-run" in text
    assert ("once the repository is published there" if readme == "README.md" else "공개된 뒤에야 동작합니다") in text


def setup_cell(path: Path) -> str:
    return code_cells(read(path))[0].source


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_the_setup_cell_prints_in_the_notebooks_language(path):
    assert LANG_LINE.findall(setup_cell(path)) == [path.parent.name]


def project_url() -> str:
    return re.search(r'^PROJECT_URL = "(https://github\.com/[\w.-]+/[\w.-]+)"', setup_cell(PATHS[0]), re.M).group(1)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_notebook_opens_with_the_setup_cell_then_the_parameters_cell(path):
    first, second = code_cells(read(path))[:2]
    assert code_without_comments(first.source) == code_without_comments(setup_cell(PATHS[0]))
    assert tagged(second, "parameters")
    for node in ast.parse(second.source).body:  # only NAME = literal, so that a cell placed after it overrides it
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name), ast.dump(node)
        ast.literal_eval(node.value)


# The setup cell, with subprocess.run recording its commands instead of running them; a `git clone` it records
# leaves behind what a clone would have (the files the cell looks for), or fails as git does (argv[2]: how).
SETUP_PROBE = """
import json, subprocess, sys
from pathlib import Path
calls = []
def run(cmd, **kwargs):
    calls.append([str(c) for c in cmd])
    if cmd[:2] == ["git", "clone"] and sys.argv[2] == "no-git":
        raise FileNotFoundError(2, "No such file or directory", "git")
    if cmd[:2] == ["git", "clone"] and sys.argv[2] == "clone-fails":
        return subprocess.CompletedProcess(cmd, 128, "", "Cloning into...\\nfatal: repository not found\\n")
    if cmd[:2] == ["git", "clone"]:
        for name in ("model/gpt.py", "tokenizer/char.py", "requirements.txt"):
            (Path(cmd[-1]) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(cmd[-1]) / name).write_text("")
    return subprocess.CompletedProcess(cmd, 0, "", "")
subprocess.run = run
try:
    exec(compile(Path(sys.argv[1]).read_text(encoding="utf-8"), "setup", "exec"))
except Exception as e:
    print(json.dumps({"calls": calls, "failed": type(e).__name__, "shown": e._render_traceback_()}))
else:
    print(json.dumps({"cwd": str(Path.cwd()), "calls": calls, "on_path": str(ROOT) in sys.path}))
"""


def probe_setup(cwd: Path, tmp_path: Path, how: str = "clones") -> dict:
    cell = tmp_path / "setup_cell.py"
    cell.write_text(setup_cell(PATHS[0]), encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-c", SETUP_PROBE, str(cell), how], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_the_setup_cell_in_a_clone_only_finds_the_project(tmp_path):
    found = probe_setup(ROOT / "notebooks" / "ko", tmp_path)
    assert found == {"cwd": str(ROOT), "calls": [], "on_path": True}


def requirement_names(name: str) -> set[str]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return {re.split(r"[<>=\[ ]", line)[0].lower() for line in lines if line and not line.startswith(("#", "-"))}


def test_the_setup_cell_elsewhere_clones_the_project_and_installs_its_requirements(tmp_path):
    found = probe_setup(tmp_path, tmp_path)
    clone = tmp_path / "kochar-gpt"
    assert found["cwd"] == str(clone) and found["on_path"]
    assert found["calls"][0] == ["git", "clone", "--depth", "1", project_url(), str(clone)]
    install = found["calls"][1]
    assert install[:4] == [sys.executable, "-m", "pip", "install"]
    assert "-r" in install and install[install.index("-r") + 1] == str(clone / "requirements.txt")
    extras = install[install.index("-r") + 2 :]
    assert "koreanize-matplotlib" in extras and set(extras) <= requirement_names("requirements-dev.txt")
    assert len(found["calls"]) == 2


@pytest.mark.parametrize("how", ["clone-fails", "no-git"])
def test_the_setup_cell_that_cannot_clone_says_so_in_one_line_and_writes_nothing(how, tmp_path):
    folder = tmp_path / "notebook-folder"
    folder.mkdir()
    found = probe_setup(folder, tmp_path, how)
    assert found["failed"] == "SetupFailed" and len(found["calls"]) == 1  # no install after a failed clone
    (line,) = found["shown"]
    assert line.startswith("SetupFailed: ") and "\n" not in line
    assert project_url() in line and "PROJECT_URL" in line  # the address it tried, and what to change
    assert ("repository not found" if how == "clone-fails" else "No such file or directory") in line
    assert not list(folder.iterdir())


def test_jupyter_shows_a_failed_clone_as_one_line(tmp_path):
    """In a real kernel, with a `git` that fails as it does for an address with no repository: the cell's error
    output is the one line, and the notebook's folder is left as it was."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from notebooks.execute import _kernel_manager

    bin_dir, folder = tmp_path / "bin", tmp_path / "notebook-folder"
    bin_dir.mkdir(), folder.mkdir()
    git = bin_dir / "git"
    git.write_text("#!/bin/sh\necho \"fatal: repository '$4' not found\" >&2\nexit 128\n")
    git.chmod(0o755)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup_cell(PATHS[0]))])
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "IPYTHONDIR": str(tmp_path / "ipy")}
    client = NotebookClient(nb, km=_kernel_manager(tmp_path), timeout=60, resources={"metadata": {"path": str(folder)}})
    with pytest.raises(CellExecutionError):
        client.execute(env=env)
    (error,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert len(error.traceback) == 1 and f"fatal: repository '{project_url()}' not found" in error.traceback[0]
    assert not list(folder.iterdir())


def draw_labels(family) -> list[str]:
    """Draw a figure with the labels the notebooks' pictures hold (syllables, jamo, the symbols beside them, negative
    ticks, a log axis's mathtext) in the font family `family` -> matplotlib's warnings and log lines about characters
    it drew as boxes."""
    from matplotlib.figure import Figure

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    fig = Figure(figsize=(6, 2))
    ax, log_ax = fig.subplots(1, 2)
    ax.set_xticks(range(5), ["ㄱ", "ㅢ", "␣", "∅", "뷁"], family=family)
    ax.set_title("−0.5 · 초성 | 중성", loc="left", family=family)
    ax.set_ylabel("하늘이 맑다: 어텐션 가중치", family=family)
    ax.plot([-1, 1])
    log_ax.semilogy([1e-3, 1e-1, 1])
    logging.getLogger("matplotlib").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig.savefig(io.BytesIO(), format="png")
    finally:
        logging.getLogger("matplotlib").removeHandler(handler)
    return [m for m in [str(w.message) for w in caught] + said if any(words in m for words in MISSING_GLYPH)]


def test_the_pictures_draw_hangul_in_the_font_a_package_ships():
    """A Hangul label drawn as the notebooks draw it has every glyph, and the font is the package's file, so a fresh
    machine or a Colab runtime with no Korean font of its own draws it the same."""
    if importlib.util.find_spec("koreanize_matplotlib") is None and not os.environ.get("CI"):
        pytest.skip("koreanize-matplotlib (requirements-dev.txt) is not installed in this environment; CI installs it")
    import matplotlib
    from matplotlib import font_manager

    from notebooks.hangul_font import hangul_font_file, use_hangul_font

    with matplotlib.rc_context():
        assert draw_labels(["DejaVu Sans"]), "matplotlib's own font has Hangul now? Then this test proves nothing"
        assert draw_labels(["NanumGothic"]), "NanumGothic alone draws every label? Then the fallback is not tested"
        name = use_hangul_font()
        assert name == "NanumGothic"
        assert Path(font_manager.findfont(font_manager.FontProperties(family=name))) == hangul_font_file()
        assert draw_labels(matplotlib.rcParams["font.family"]) == []


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_notebook_ends_with_exercises_and_folded_solutions(path):
    cells = read(path).cells
    solutions = [i for i, c in enumerate(cells) if tagged(c, "solution")]
    assert len(solutions) >= 2
    heading = next(i for i, c in enumerate(cells) if re.match(r"## (연습 문제|Exercises)$", c.source.split("\n")[0]))
    assert heading < solutions[0] and solutions[-1] == len(cells) - 1
    for i in solutions:
        cell = cells[i]
        assert cell.source.startswith("# @title ") and cell.metadata.get("cellView") == "form"  # Colab folds it
        assert cell.metadata.get("jupyter", {}).get("source_hidden") is True  # JupyterLab folds it
        assert cells[i - 1].cell_type == "markdown" and re.match(r"\*\*(연습|Exercise) \d\.\*\*", cells[i - 1].source)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_notebooks_follow_the_readmes_reading_path(lang):
    """The files of the README's Read the code list, in the order the notebooks first name them, are that list."""
    order: list[str] = []
    for name in NAMES:
        prose = " ".join(c.source for c in read(notebook_path(lang, name)).cells if c.cell_type == "markdown")
        for found in re.findall(r"\]\(\.\./\.\./([\w/]+\.py)\)", prose):
            if found in READ_THE_CODE and found not in order:
                order.append(found)
    assert tuple(order) == READ_THE_CODE


@pytest.mark.parametrize("readme,lang", [("README.md", "en"), ("README.ko.md", "ko")])
def test_the_readmes_list_every_notebook_with_its_colab_link(readme, lang):
    text = (ROOT / readme).read_text(encoding="utf-8")
    section = re.split(r"^## (?:Learn|배우기)\n", text, flags=re.M)[1].split("\n## ")[0]
    colab = project_url().replace("https://github.com/", COLAB) + "/blob/main/"
    for name in NAMES:
        assert f"](notebooks/{lang}/{name}.ipynb)" in section, f"{readme} does not link notebooks/{lang}/{name}.ipynb"
        assert f"]({colab}notebooks/{lang}/{name}.ipynb)" in section, f"{readme}: no Colab link for {name}"
    assert "make notebooks" in section


def test_the_notebook_tooling_is_for_development_only():
    assert not requirement_names("requirements.txt") & {t.lower().replace("_", "-") for t in TOOLING}
    assert {"nbclient", "nbformat", "ipykernel", "matplotlib", "koreanize-matplotlib"} <= requirement_names(
        "requirements-dev.txt"
    )
    assert "jupyterlab" in requirement_names("requirements-notebooks.txt")
    code = f"import sys, train, generate, evaluate, serve; print(sorted(m for m in {TOOLING!r} if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-1000:]
