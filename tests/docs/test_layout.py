"""The code's shape, checked: small functions and files, one atomic-write helper, layers that point one way."""

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

ENTRY_SCRIPTS = {"train", "generate", "evaluate", "bench", "serve", "export"}
# package -> the packages of ours it may import besides itself (entry scripts -> playground, benchmarks, hf_export ->
# training -> inference -> hf_format -> model, data -> tokenizer -> cli -> common). docs/en/layout.md and
# docs/ko/layout.md draw the same table; test_the_layout_pages_draw_these_layers keeps them equal.
ALLOWED = {
    "common": set(),
    "cli": {"common"},
    "tokenizer": {"common"},
    "model": {"common"},
    "data": {"tokenizer", "cli", "common"},
    "hf_format": {"model", "common"},
    "inference": {"hf_format", "model", "data", "tokenizer", "common"},
    "training": {"inference", "model", "data", "tokenizer", "cli", "common"},
    "hf_export": {"inference", "hf_format", "model", "tokenizer", "common"},
    "playground": {"inference", "model", "tokenizer", "common"},
    "benchmarks": {"hf_export", "training", "inference", "model", "data", "tokenizer", "cli", "common"},
}
FORBIDDEN = {package: set(ALLOWED) - allowed - {package} for package, allowed in ALLOWED.items()}
LAYOUT_PAGES = (ROOT / "docs" / "en" / "layout.md", ROOT / "docs" / "ko" / "layout.md")
# the packages whose every module has a line on the layout pages
DOCUMENTED = (
    "common",
    "cli",
    "tokenizer",
    "data",
    "data/prepare",
    "model",
    "model/hangul",
    "training",
    "training/runner",
    "training/settings",
    "training/guards",
    "training/optim",
    "training/reporting",
    "inference",
    "hf_format",
    "hf_export",
    "playground",
    "notebooks",
)


def production_files() -> list[Path]:
    skip = {".venv", "tests", ".git", "runs", "outputs", "multirun"}
    return sorted(p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts))


def imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_there_are_files_to_check():
    assert len(production_files()) > 30


@pytest.mark.parametrize("limit_lines,limit_function", [(400, 60)])
def test_no_file_over_400_lines_and_no_function_over_60(limit_lines, limit_function):
    too_long = []
    for path in production_files():
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > limit_lines:
            too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > limit_function:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}() is {length} lines")
    assert not too_long, "\n".join(too_long)


def test_os_replace_lives_in_one_helper():
    users = [
        p.relative_to(ROOT).as_posix()
        for p in production_files()
        if any(
            isinstance(n, ast.Attribute)
            and n.attr == "replace"
            and isinstance(n.value, ast.Name)
            and n.value.id == "os"
            for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        )
    ]
    assert users == ["common/atomic_files.py"]


def test_layers_point_one_way_and_nothing_imports_an_entry_script():
    wrong = []
    for path in production_files():
        rel = path.relative_to(ROOT)
        roots = imported_roots(ast.parse(path.read_text(encoding="utf-8")))
        if roots & ENTRY_SCRIPTS:
            wrong.append(f"{rel} imports entry script(s) {sorted(roots & ENTRY_SCRIPTS)}")
        package = rel.parts[0] if len(rel.parts) > 1 else None
        bad = roots & FORBIDDEN.get(package, set())
        if bad:
            wrong.append(f"{rel} ({package}) imports {sorted(bad)}")
    assert not wrong, "\n".join(wrong)


def module_imports() -> dict[str, set[str]]:
    """Each production module's name -> the modules of ours it imports, at run time or for its types alone (a type
    import is a dependency a reader follows too), whether as `import a.b` or `from a.b import c`."""
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in production_files()
    }
    graph = {}
    for name, path in modules.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            graph[name] |= {m for m in found if m in modules and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (Tarjan's strongly connected
    components of more than one module)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                circles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_no_module_imports_itself_round_a_circle():
    """Within a package too: a circle means neither module can be read, tested or moved without the other."""
    circles = import_circles(module_imports())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_finds_a_circle_inside_a_package():
    graph = {"training.a": {"training.b"}, "training.b": {"training.c"}, "training.c": {"training.a"}, "x": set()}
    assert import_circles(graph) == [["training.a", "training.b", "training.c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_fault_injection_in_production_code():
    offenders = [p for p in production_files() if "KOCHAR_FAULT" in p.read_text(encoding="utf-8")]
    assert not offenders


def layers_drawn(page: Path) -> dict[str, set[str]]:
    """The table between <!-- layers:begin --> and <!-- layers:end --> of a layout page."""
    text = page.read_text(encoding="utf-8")
    table = text.split("<!-- layers:begin -->")[1].split("<!-- layers:end -->")[0]
    rows = [line.strip("|").split("|") for line in table.strip().splitlines()[2:]]
    return {name.strip(): {p.strip() for p in allowed.split(",")} - {"nothing of ours"} for name, allowed in rows}


@pytest.mark.parametrize("page", LAYOUT_PAGES, ids=lambda p: p.parent.name)
def test_the_layout_pages_draw_these_layers(page):
    assert layers_drawn(page) == ALLOWED


def modules_listed(page: Path) -> set[str]:
    """Every `package/module.py` the layout page's module list names (a module line is indented under its package)."""
    block = page.read_text(encoding="utf-8").split("## ", 2)[2].split("```")[1]
    listed, package = set(), None
    for line in block.splitlines():
        head = re.match(r"^([\w/]+)/\s", line + " ")
        if head and not line.startswith(" "):
            package = head.group(1)
        elif package and re.match(r"^  (\w+\.py)\s+\S", line):
            listed.add(f"{package}/{line.split()[0]}")
    return listed


@pytest.mark.parametrize("page", LAYOUT_PAGES, ids=lambda p: p.parent.name)
def test_every_module_has_its_line_on_the_layout_pages(page):
    modules = {
        p.relative_to(ROOT).as_posix()
        for package in DOCUMENTED
        for p in (ROOT / package).glob("*.py")
        if p.name != "__init__.py"
    }
    listed = modules_listed(page)
    assert not modules - listed, f"add a line for each to {page.relative_to(ROOT)}: {sorted(modules - listed)}"
    assert not listed - modules, f"{page.relative_to(ROOT)} lists modules that do not exist: {sorted(listed - modules)}"


def test_every_package_is_in_the_layer_table():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"}
    assert packages == set(ALLOWED)


READ_THE_CODE = ("tokenizer/char.py", "data/sampler.py", "model/attention.py", "model/block.py", "model/gpt.py")
READING_PATH = ("model/attention.py", "model/block.py", "model/gpt.py")  # Head, MultiHeadAttention, Block, the model
TRAINING_PATH = ("train.py", "training/trainer.py", "training/step.py", "training/checkpoints.py")


def reading_lists(readme: str) -> list[list[tuple[str, str]]]:
    """The numbered lists of the README's "Read the code" section: [(path, its line count as written), ...] each."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    section = re.split(r"^## (?:Read the code|코드 읽기)\n", text, flags=re.M)[1].split("\n## ")[0]
    lists = re.split(r"\n\n(?=1\. )", section)[1:]
    return [re.findall(r"^\d+\. \[([\w/]+\.py)\]\(\1\) \((\d[\d,]*) ?(?:lines|줄)\)", lst, flags=re.M) for lst in lists]


def lines_of(path: str) -> int:
    return len((ROOT / path).read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("readme", ["README.md", "README.ko.md"])
def test_the_readmes_read_the_code_lists_are_in_order_and_their_line_counts_are_true(readme):
    model_path, training_path = reading_lists(readme)
    assert tuple(path for path, _ in model_path) == READ_THE_CODE
    assert tuple(path for path, _ in training_path) == TRAINING_PATH
    for path, count in model_path + training_path:
        assert int(count.replace(",", "")) == lines_of(path), path
    text = (ROOT / readme).read_text(encoding="utf-8")
    model_total, training_total = sum(map(lines_of, READING_PATH)), sum(map(lines_of, TRAINING_PATH))
    assert (f"{model_total} lines" if readme == "README.md" else f"{model_total}줄") in text
    assert (f"{training_total:,} lines" if readme == "README.md" else f"{training_total:,}줄") in text


def test_the_training_path_is_short_and_reaches_the_loop_the_step_and_the_save():
    """How a run trains reads in at most four files and 1,000 lines: the command, the loop, the step, the save."""
    assert len(TRAINING_PATH) <= 4 and sum(map(lines_of, TRAINING_PATH)) <= 1000
    calls = {path: (ROOT / path).read_text(encoding="utf-8") for path in TRAINING_PATH}
    assert "def stop_cause(" in calls["training/trainer.py"] and "def validate(" in calls["training/trainer.py"]
    assert "def train_step(" in calls["training/step.py"] and "def save(" in calls["training/checkpoints.py"]


def test_training_shows_its_loop_and_parts_at_the_top():
    entries = [p for p in (ROOT / "training").iterdir() if p.name not in ("__init__.py", "__pycache__")]
    assert len(entries) <= 14, sorted(p.name for p in entries)
