"""Exercise checkers for the heads chapter."""

from __future__ import annotations

__all__: list[str] = []
