"""Exercise checkers for the block chapter."""

from __future__ import annotations

__all__: list[str] = []
