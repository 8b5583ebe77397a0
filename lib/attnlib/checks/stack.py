"""Exercise checkers for the stack chapter."""

from __future__ import annotations

__all__: list[str] = []
