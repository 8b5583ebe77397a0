"""Exercise checkers for the embeddings chapter."""

from __future__ import annotations

__all__: list[str] = []
