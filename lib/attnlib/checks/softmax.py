"""Exercise checkers for the softmax chapter."""

from __future__ import annotations

__all__: list[str] = []
