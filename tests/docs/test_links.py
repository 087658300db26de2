"""The READMEs and the manual hold together: every relative link and image resolves (files, and `#anchors`
the way GitHub makes them from headings, Korean included), English and Korean have the same pages, each
README's table of contents links every page of its language, each page links its README and its twin, and
the front doors stay short, with a first sample and the playground in their first screens."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from tests.docs.test_commands_as_pasted import PAGES
from tests.helpers import ROOT

README = {"en": "README.md", "ko": "README.ko.md"}
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title"; the text may hold one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text without code blocks and code spans: a link or heading shown as code is not one."""
    return CODE_SPAN.sub("", FENCED.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, every character that is not a letter,
    mark, digit, connector (`_`), space or hyphen dropped, spaces made hyphens. Hangul is a letter."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = text.replace("`", "").replace("*", "").lower()
    kept = [c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCED.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: str) -> list[str]:
    return LINK.findall(_prose((ROOT / page).read_text(encoding="utf-8")))


def _docs(lang: str) -> list[str]:
    return sorted(p.name for p in (ROOT / "docs" / lang).glob("*.md"))


RELATIVE = [
    (page, target) for page in PAGES for target in links(page) if target and not re.match(r"[a-z][a-z0-9+.-]*:", target)
]  # http:, https:, mailto: go out


def test_the_slug_follows_github():
    assert slug("Train on your own text") == "train-on-your-own-text"
    assert slug("내 텍스트로 학습하기") == "내-텍스트로-학습하기"
    assert slug("What `bench.py` measures: speed, memory (CPU)") == "what-benchpy-measures-speed-memory-cpu"
    assert slug("TensorBoard에서 볼 수 있는 것") == "tensorboard에서-볼-수-있는-것"
    assert slug("Sweeps and TensorBoard: comparing configurations") == "sweeps-and-tensorboard-comparing-configurations"


def test_the_pages_have_links_to_check():
    assert len(RELATIVE) >= 60
    assert any("#" in target for _, target in RELATIVE)
    assert any(target.endswith(".png") for _, target in RELATIVE)


@pytest.mark.parametrize("page,target", RELATIVE, ids=[f"{p}->{t}" for p, t in RELATIVE])
def test_every_relative_link_and_image_resolves(page, target):
    path_part, _, fragment = target.partition("#")
    source = ROOT / page
    dest = (source.parent / path_part).resolve() if path_part else source
    assert dest.is_relative_to(ROOT), f"{page}: {target} points outside the repository"
    assert dest.exists(), f"{page}: {target} does not exist ({dest.relative_to(ROOT)})"
    if fragment and re.fullmatch(r"L\d+", fragment) and dest.suffix == ".py":
        return  # a line of code: tests/docs/test_code_links.py checks it still holds the code the link names
    if fragment:
        assert dest.suffix == ".md", f"{page}: {target}: an anchor into a file that is not a page"
        found = anchors(dest)
        assert fragment in found, f"{page}: {target}: no heading makes #{fragment} (has: {sorted(found)})"


def test_every_image_is_used():
    used = {(ROOT / page).parent.joinpath(t.partition("#")[0]).resolve() for page, t in RELATIVE}
    images = {p.resolve() for p in (ROOT / "docs").rglob("*.png")}
    assert images and images <= used, f"images no page shows: {sorted(str(p) for p in images - used)}"


def test_english_and_korean_have_the_same_pages():
    assert _docs("en") and _docs("en") == _docs("ko")
    stray = [
        p
        for p in (ROOT / "docs").rglob("*.md")
        if p.parent.name not in ("en", "ko") or p.parent.parent != ROOT / "docs"
    ]
    assert not stray, f"a page goes in docs/en/ and docs/ko/ (the same name in both): {stray}"


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_each_readme_lists_every_page_of_its_language(lang):
    listed = {(ROOT / t.partition("#")[0]).resolve() for t in links(README[lang])}
    missing = [name for name in _docs(lang) if (ROOT / "docs" / lang / name).resolve() not in listed]
    assert not missing, f"{README[lang]}'s table of contents does not link docs/{lang}/: {missing}"


@pytest.mark.parametrize("lang,other", [("en", "ko"), ("ko", "en")])
def test_each_page_links_its_readme_and_its_twin(lang, other):
    for name in _docs(lang):
        targets = {(ROOT / "docs" / lang / t.partition("#")[0]).resolve() for t in links(f"docs/{lang}/{name}")}
        assert (ROOT / README[lang]).resolve() in targets, f"docs/{lang}/{name} does not link {README[lang]}"
        assert (ROOT / "docs" / other / name).resolve() in targets, f"docs/{lang}/{name} does not link its twin"


@pytest.mark.parametrize("readme", README.values())
def test_the_readme_is_a_front_door(readme):
    lines = (ROOT / readme).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"{readme} has {len(lines)} lines; the manual's place is docs/"
    first_screens = "\n".join(lines[:100])
    assert "make train" in first_screens and "python generate.py" in first_screens
    assert "make serve" in first_screens or "python serve.py" in first_screens
    assert "docs/images/playground.png" in first_screens
