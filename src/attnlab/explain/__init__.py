"""attnlab.explain: step-by-step walkthroughs and worked-example checks, read from traces.

* ``load(name_or_path)`` / ``parse(text)``: a worked example (TOML), ``run(ex)``: its trace
* ``verify(ex)``: every claim exact, rounding drift, another convention, another step or wrong
  (rules in ``attnlab.explain.verify``); recomputed with ``attnlab.functional.steps``
* ``render`` (text), ``render_markdown`` (Markdown + LaTeX), ``document`` (JSON-ready dict)
"""

from .examples import Example, ExampleError, builtin_names, load, parse
from .mechanisms import MECHANISMS, run
from .render_markdown import render_markdown
from .render_text import render
from .verify import Verdict, verify
from .walkthrough import document

__all__ = [
    "Example", "ExampleError", "Verdict", "MECHANISMS", "builtin_names", "load", "parse",
    "run", "render", "render_markdown", "document", "verify",
]
