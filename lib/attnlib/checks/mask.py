"""Exercise checkers for the mask chapter."""

from __future__ import annotations

__all__: list[str] = []
