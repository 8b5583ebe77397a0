"""Exercise checkers for the scaling chapter."""

from __future__ import annotations

__all__: list[str] = []
