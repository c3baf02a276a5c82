"""Out of memory in the middle of a run: one line, as for any size the user can lower.

PyTorch reports a failed allocation as a ``RuntimeError`` (``DefaultCPUAllocator: can't allocate
memory``) or, on a GPU, ``torch.OutOfMemoryError``; ``out_of_memory()`` turns either into a
``MemoryError`` that the command line prints as one line (exit 2) instead of an internal error.
Sizes that are absurd on their face are refused earlier, by ``attnlab._limits``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_SIGNS = ("can't allocate memory", "out of memory", "not enough memory")


@contextlib.contextmanager
def out_of_memory(hint: str = "try smaller sizes (--batch-size, --dim, ...)") -> Iterator[None]:
    try:
        yield
    except RuntimeError as e:
        import torch  # loaded already: the run that raised used it

        if not (isinstance(e, torch.OutOfMemoryError) or any(s in str(e) for s in _SIGNS)):
            raise
        first = " ".join(str(e).split())[:160]
        raise MemoryError(f"not enough memory for this run ({first}); {hint}") from None


__all__ = ["out_of_memory"]
