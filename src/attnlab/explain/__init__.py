"""attnlab.explain: step-by-step walkthroughs and worked-example checks, read from traces."""

from .claims import ClaimCheck, check_all
from .examples import Example, ExampleError, builtin_names, load, parse, run
from .render_text import render

__all__ = ["Example", "ExampleError", "ClaimCheck", "builtin_names", "load", "parse", "run", "render", "check_all"]
