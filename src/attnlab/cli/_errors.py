"""The error a verb raises for something the user asked for wrongly: one line, no traceback.

Verbs import it from here, never from the package's loader (``attnlab.cli``), which imports
the verbs: the arrows inside ``attnlab.cli`` point one way.
"""

from __future__ import annotations


class UsageError(Exception):
    """An error in what the user asked for; printed without a traceback."""


__all__ = ["UsageError"]
