"""The code's shape, checked: small functions and files, one atomic-write helper, layers that point one way."""

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

ENTRY_SCRIPTS = {"train", "generate", "evaluate", "bench", "serve", "export"}
# package -> packages it must never import (entry scripts -> training / inference -> model / data -> tokenizer)
FORBIDDEN = {
    "tokenizer": {"model", "data", "training", "inference", "benchmarks", "playground",
                  "hf_export", "hf_format", "cli"},
    "model": {"data", "tokenizer", "training", "inference", "benchmarks", "playground",
              "hf_export", "hf_format", "cli"},
    "data": {"model", "training", "inference", "benchmarks", "playground", "hf_export", "hf_format"},
    "hf_format": {"data", "tokenizer", "training", "inference", "benchmarks", "playground", "hf_export", "cli"},
    "hf_export": {"training", "benchmarks", "playground"},
    "inference": {"training", "benchmarks", "playground", "hf_export"},
    "training": {"benchmarks", "playground", "hf_export"},
    "cli": {"model", "data", "tokenizer", "training", "inference", "benchmarks", "playground",
            "hf_export", "hf_format"},
    "common": {"model", "data", "tokenizer", "training", "inference", "benchmarks", "playground", "hf_export",
               "hf_format", "cli"},
}


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
