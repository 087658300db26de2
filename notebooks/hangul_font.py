"""Hangul in the notebooks' pictures, on any machine (notebooks/README.md, "Pictures and Hangul").

Design choices:
- NanumGothic (SIL OFL) comes with the notebooks' requirements, in `koreanize-matplotlib`; its file is registered
  directly, since importing that package reads `distutils`, gone in Python 3.12.
- The family is DejaVu Sans, then NanumGothic, which lacks the minus sign (U+2212) mathtext takes from the first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FONT_PACKAGE = "koreanize_matplotlib"  # pip install koreanize-matplotlib
FONT_FILE = Path("fonts") / "NanumGothic.ttf"  # inside that package's folder
FIRST = "DejaVu Sans"  # matplotlib's own font, for everything but Hangul


def hangul_font_file() -> Path | None:
    spec = importlib.util.find_spec(FONT_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / FONT_FILE).is_file():
            return Path(folder) / FONT_FILE
    return None


def use_hangul_font() -> str | None:
    """Make matplotlib draw text in the packaged Hangul font -> its family name, or None without the package."""
    from matplotlib import font_manager, rcParams

    path = hangul_font_file()
    if path is None:
        return None
    font_manager.fontManager.addfont(str(path))
    name = font_manager.FontProperties(fname=str(path)).get_name()
    rcParams["font.family"] = [FIRST, name]
    return name
