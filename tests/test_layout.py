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
DOCUMENTED = ("common", "cli", "tokenizer", "data", "data/prepare", "model", "model/hangul", "training", "inference",
              "hf_format", "hf_export", "playground", "notebooks")


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


@pytest.mark.parametrize("limit_lines,limit_function", [(300, 60)])
def test_no_file_over_300_lines_and_no_function_over_60(limit_lines, limit_function):
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
    users = [p.relative_to(ROOT).as_posix() for p in production_files()
             if any(isinstance(n, ast.Attribute) and n.attr == "replace" and isinstance(n.value, ast.Name)
                    and n.value.id == "os" for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
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
    modules = {p.relative_to(ROOT).as_posix() for package in DOCUMENTED for p in (ROOT / package).glob("*.py")
               if p.name != "__init__.py"}
    listed = modules_listed(page)
    assert not modules - listed, f"add a line for each to {page.relative_to(ROOT)}: {sorted(modules - listed)}"
    assert not listed - modules, f"{page.relative_to(ROOT)} lists modules that do not exist: {sorted(listed - modules)}"


def test_every_package_is_in_the_layer_table():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"}
    assert packages == set(ALLOWED)


READ_THE_CODE = ("tokenizer/char.py", "data/sampler.py", "model/attention.py", "model/block.py", "model/gpt.py",
                 "training/step.py")
READING_PATH = ("model/attention.py", "model/block.py", "model/gpt.py")  # Head, MultiHeadAttention, Block, the model


@pytest.mark.parametrize("readme", ["README.md", "README.ko.md"])
def test_the_readmes_read_the_code_list_is_in_order_and_its_line_counts_are_true(readme):
    text = (ROOT / readme).read_text(encoding="utf-8")
    section = re.split(r"^## (?:Read the code|코드 읽기)\n", text, flags=re.M)[1].split("\n## ")[0]
    listed = re.findall(r"^\d+\. \[([\w/]+\.py)\]\(\1\) \((\d[\d,]*) ?(?:lines|줄)\)", section, flags=re.M)
    assert tuple(path for path, _ in listed) == READ_THE_CODE
    for path, count in listed:
        assert int(count.replace(",", "")) == len((ROOT / path).read_text(encoding="utf-8").splitlines()), path
    total = sum(len((ROOT / p).read_text(encoding="utf-8").splitlines()) for p in READING_PATH)
    assert (f"{total} lines" if readme == "README.md" else f"{total}줄") in section


def test_the_lectures_model_reads_in_one_sitting_with_nothing_hangul_in_it():
    """Head, MultiHeadAttention, Block and AttentionLanguageModel: at most 450 lines, and the Hangul-aware layers
    plug in beside them (model/input_output.py), never inside."""
    sources = {p: (ROOT / p).read_text(encoding="utf-8") for p in READING_PATH}
    assert sum(len(s.splitlines()) for s in sources.values()) <= 450
    for path, source in sources.items():
        assert not [w for w in code_words(source) if re.search(r"jamo|syllable|hangul", w, flags=re.I)], path
        assert not [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and n.value == 11172], path


def code_words(source: str) -> list[str]:
    """The names, attributes, imported modules and string values of a module's code (docstrings and comments, which
    may point at the Hangul-aware layers beside it, left out)."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef,
                  ast.FunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
    words = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            words.append(n.id)
        elif isinstance(n, ast.Attribute):
            words.append(n.attr)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            words += [a.name for a in n.names] + [getattr(n, "module", None) or ""]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            words.append(n.value)
    return words


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported_modules(tree: ast.AST, modules: set[str]) -> set[str]:
    """The project's modules a file imports anywhere (at the top or inside a function): `from a.b import c` is
    a.b.c when that is a module, else a.b."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
    return found & modules


def test_no_module_imports_itself_through_others():
    """No import circles between modules, inside a package as well as across packages (reading and writing an
    exported folder, the ladder and its report once knew each other)."""
    files = {module_name(p): p for p in production_files() if "hf_code" not in p.parts}
    graph = {m: imported_modules(ast.parse(p.read_text(encoding="utf-8")), set(files)) - {m} for m, p in files.items()}
    for m in graph:  # a package's __init__ imports its modules; a module importing its package is not a circle
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".")}
    circles, done = [], set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            circles.append(" -> ".join(path[path.index(m):] + [m]))
            return
        if m in done:
            return
        for d in sorted(graph[m]):
            visit(d, path + [m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])
    assert not circles, "\n".join(sorted(set(circles)))
