"""Links to a line of code, as the "differences from the lecture" tables make them (docs/*/lecture.md, notebook 03):
`` [`snippet`](../../model/block.py#L43) ``. Others edit those files, so a line number goes stale silently; here
every such link, in the READMEs, the manual and the notebooks' prose, must name its code (the link's text is a code
span) and that code must still be on the line it points at. A failure names the line the code moved to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.test_commands_as_pasted import PAGES
from tests.helpers import ROOT
from tests.notebooks.notebook_tools import LANGUAGES, NAMES, notebook_path, read

LINE_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s#]+\.py)#L(\d+)\)")
CODE_TEXT = re.compile(r"`([^`]+)`")
# What every differences table must cover, each a row with a line link: the words that start its rows.
ROWS = {
    "en": (
        "The MLP's nonlinearity",
        "The LM head's bias",
        "Embedding dropout",
        "What `head_size` means",
        "How attention runs",
        "The window in generation",
        "Initialisation",
    ),
    "ko": (
        "MLP의 비선형 함수",
        "LM 헤드의 편향",
        "임베딩 드롭아웃",
        "`head_size`의 뜻",
        "어텐션 계산",
        "생성할 때의 윈도",
        "초기화",
    ),
}
TABLES = [
    ("docs/en/lecture.md", "en"),
    ("docs/ko/lecture.md", "ko"),
    (notebook_path("en", "03_heads_block_gpt").relative_to(ROOT).as_posix(), "en"),
    (notebook_path("ko", "03_heads_block_gpt").relative_to(ROOT).as_posix(), "ko"),
]


def prose(page: str) -> str:
    """A page's text, or a notebook's markdown cells."""
    if page.endswith(".ipynb"):
        return "\n".join(c.source for c in read(ROOT / page).cells if c.cell_type == "markdown")
    return (ROOT / page).read_text(encoding="utf-8")


def pages() -> list[str]:
    notebooks = [notebook_path(lang, name).relative_to(ROOT).as_posix() for lang in LANGUAGES for name in NAMES]
    return [*PAGES, *notebooks]


LINKS = [(page, text, target, int(line)) for page in pages() for text, target, line in LINE_LINK.findall(prose(page))]


def test_there_are_line_links_to_check():
    assert len(LINKS) >= 4 * len(ROWS["en"])


@pytest.mark.parametrize("page,text,target,line", LINKS, ids=[f"{p}->{t}#L{n}" for p, _, t, n in LINKS])
def test_every_line_link_still_points_at_the_code_it_names(page, text, target, line):
    code = CODE_TEXT.fullmatch(text)
    assert code, f"{page}: the link to {target}#L{line} must name its code: [`the code on that line`]({target}#L...)"
    path = ((ROOT / page).parent / target).resolve()
    assert path.is_relative_to(ROOT) and path.is_file(), f"{page}: {target} does not exist"
    lines = path.read_text(encoding="utf-8").splitlines()
    if line <= len(lines) and code.group(1) in lines[line - 1]:
        return
    now = [i + 1 for i, text_line in enumerate(lines) if code.group(1) in text_line]
    where = f"it is on line {', '.join(map(str, now))} now" if now else "it is on no line now"
    pytest.fail(
        f"{page}: `{code.group(1)}` is no longer on line {line} of {Path(target).as_posix()}: {where}; "
        "change the link's #L number (or the code it names)"
    )


@pytest.mark.parametrize("page,lang", TABLES)
def test_each_differences_table_covers_the_lecture_row_by_row_with_a_line_of_code(page, lang):
    rows = [line for line in prose(page).splitlines() if line.startswith("| ") and line.count("|") >= 5]
    for start in ROWS[lang]:
        row = next((r for r in rows if r.startswith(f"| {start} |")), None)
        assert row, f"{page}: the differences table has no row for {start!r}"
        assert LINE_LINK.search(row), f"{page}: the row {start!r} links to no line of code"
