"""The kernels' compiler decorators cost nothing at import and behave as torch.compiler's own.

``attnlab.kernels._compile`` marks a function constant the way ``assume_constant_result``
does and applies ``torch.compiler.disable`` only when ``torch.compile`` traces, so importing the
kernels does not import the compiler (``torch._dynamo``, seconds of start-up).
"""

from __future__ import annotations

import subprocess
import sys

import torch

from attnlab.kernels import _compile, block_sparse_attention
from attnlab.patterns import Window


def test_importing_the_kernels_and_modules_does_not_import_the_compiler():
    code = ("import sys, attnlab, attnlab.kernels, attnlab.nn, attnlab.models; attnlab.create; "
            "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_assume_constant_marks_a_function_as_torch_compiler_does():
    def ours():
        return 1

    def theirs():
        return 1

    assert _compile.assume_constant(ours) is ours
    assert torch.compiler.assume_constant_result(theirs) is theirs
    assert vars(ours) == vars(theirs) == {_compile._CONSTANT_MARK: True}


def test_weights_of_a_compiled_call_match_the_eager_call():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 4) for _ in range(3))
    pattern = Window(3, 0)

    def f(q, k, v):
        return block_sparse_attention(q, k, v, pattern, block=4, need_weights=True)

    want_out, want_w = f(q, k, v)
    got_out, got_w = torch.compile(f, backend="eager")(q, k, v)
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_w.to_dense(), want_w.to_dense())
