"""Exercise checkers for the projections chapter."""

from __future__ import annotations

__all__: list[str] = []
