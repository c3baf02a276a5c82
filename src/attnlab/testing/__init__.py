"""Check anyone's attention against attnlab's contract.

``check(fn, signature="qkv_mask")`` calls ``fn`` on small inputs built for each rule and compares it
with a float64 reference (``reference``): values (also with a broadcast (q, k) mask and
non-contiguous inputs, and the same bits on a second call); NaN in masked values and inf in masked
keys must reach neither the output nor the gradients of q, k, v; a fully masked row gives zeros and
finite gradients; empty keys, batch or queries give the right shape; a mask that forbids one key
must make the output independent of it (an inverted polarity is named); a NaN in a future key must
not reach an earlier row under a causal mask, aligned as declared when q < k; half precision within
a budget.

    >>> import attnlab, attnlab.testing
    >>> attnlab.testing.check(lambda q, k, v, mask: attnlab.attention(q, k, v, mask=mask)[0]).ok
    True

Each failure names its rule in plain words and carries the smallest input that shows it;
``failure.reproducer()`` is Python source that rebuilds it, calls ``fn`` and raises the same error.
``assert_conforms(fn, ...)`` is the one line for a test suite.
``check(fn, examples=N)`` also tries N generated inputs (``attnlab.testing.generate``, with hypothesis,
imported only then) and reports the first failure shrunk to the smallest input.
"""

from .check import assert_conforms, check
from .reference import reference
from .report import Failure, Report
from .rules import RuleBroken, judge
from .signatures import SIGNATURES

__all__ = ["SIGNATURES", "Failure", "Report", "RuleBroken", "assert_conforms", "check", "judge", "reference"]
