"""CJK-capable fonts for plots whose labels are Chinese (or Japanese, Korean).

matplotlib's default DejaVu Sans has no CJK glyphs: labels like 猫 would be
drawn as empty boxes. ``cjk_font()`` looks for an installed CJK font (Debian's
``fonts-wqy-microhei`` or ``fonts-noto-cjk``, or any font whose name says so)
and ``use_cjk_font()`` puts it first in the font list. When none is installed
the plot is still drawn, with a warning that names the packages to install.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

CANDIDATES = (
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC",
    "Source Han Sans SC", "Droid Sans Fallback", "AR PL UMing CN", "SimHei", "Microsoft YaHei", "PingFang SC",
)
FILES = (
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
)
INSTALL_HINT = "install a CJK font, e.g. `apt-get install fonts-wqy-microhei` (or fonts-noto-cjk)"


def has_cjk(texts) -> bool:
    """True when any text contains a CJK character (ideographs, kana, hangul, CJK punctuation)."""
    for s in texts or ():
        for ch in str(s):
            o = ord(ch)
            if 0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF:
                return True
    return False


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The family name of an installed CJK font, or None."""
    from matplotlib import font_manager

    for path in FILES:
        if Path(path).exists():
            try:
                font_manager.fontManager.addfont(path)
                return font_manager.FontProperties(fname=path).get_name()
            except (OSError, RuntimeError):  # pragma: no cover - a broken font file
                pass
    names = {f.name for f in font_manager.fontManager.ttflist}
    for name in CANDIDATES:
        if name in names:
            return name
    for name in sorted(names):
        if "CJK" in name or "Hei" in name or "WenQuanYi" in name:
            return name
    return None


def use_cjk_font(texts=None) -> str | None:
    """Make matplotlib draw CJK labels; warn (and return None) when no CJK font is installed.

    With ``texts`` given, nothing happens unless one of them contains CJK.
    """
    if texts is not None and not has_cjk(texts):
        return None
    import matplotlib

    name = cjk_font()
    if name is None:
        warnings.warn(f"no CJK font found: Chinese labels will show as boxes; {INSTALL_HINT}", stacklevel=2)
        return None
    families = list(matplotlib.rcParams["font.sans-serif"])
    if not families or families[0] != name:
        matplotlib.rcParams["font.sans-serif"] = [name] + [f for f in families if f != name]
    matplotlib.rcParams["font.family"] = "sans-serif"
    matplotlib.rcParams["axes.unicode_minus"] = False
    return name


__all__ = ["cjk_font", "use_cjk_font", "has_cjk"]
