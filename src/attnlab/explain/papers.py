"""The papers the walkthroughs cite: authors, year and link for each mechanism's ``Mechanism.paper`` key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """A citation: authors, year, link (no title: a walkthrough in Chinese has no English left)."""

    authors: str
    year: int
    url: str


PAPERS: dict[str, Paper] = {
    "bahdanau": Paper("Bahdanau, Cho, Bengio", 2015, "https://arxiv.org/abs/1409.0473"),
    "luong": Paper("Luong, Pham, Manning", 2015, "https://arxiv.org/abs/1508.04025"),
    "vaswani": Paper("Vaswani et al.", 2017, "https://arxiv.org/abs/1706.03762"),
    "child": Paper("Child, Gray, Radford, Sutskever", 2019, "https://arxiv.org/abs/1904.10509"),
    "woo": Paper("Woo, Park, Lee, Kweon", 2018, "https://arxiv.org/abs/1807.06521"),
    "gemma": Paper("Gemma Team", 2024, "https://arxiv.org/abs/2408.00118"),
    "katharopoulos": Paper("Katharopoulos, Vyas, Pappas, Fleuret", 2020, "https://arxiv.org/abs/2006.16236"),
    "ye": Paper("Ye et al.", 2024, "https://arxiv.org/abs/2410.05258"),
    "deepseek": Paper("DeepSeek-AI", 2024, "https://arxiv.org/abs/2405.04434"),
    "ainslie": Paper("Ainslie et al.", 2023, "https://arxiv.org/abs/2305.13245"),
    "hassani": Paper("Hassani, Walton, Li, Li, Shi", 2023, "https://arxiv.org/abs/2204.07143"),
    "zhou": Paper("Zhou et al.", 2018, "https://arxiv.org/abs/1706.06978"),
}


__all__ = ["Paper", "PAPERS"]
