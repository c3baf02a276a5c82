"""Checking written claims: kept for the names of the first version; see ``verify``.

``check_all(ex, trace)`` is ``verify.verify``: each claim comes back as a
``Verdict`` (``ClaimCheck``) that is exact, rounding drift or wrong.
"""

from __future__ import annotations

from .verify import Verdict as ClaimCheck
from .verify import decimals, verify

check_all = verify

__all__ = ["ClaimCheck", "check_all", "decimals"]
