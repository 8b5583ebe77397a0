"""Shared paths and small functions for the test suite."""

from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def notebooks() -> list[pathlib.Path]:
    """Every notebook of the book, in name order."""
    return sorted(p for p in BOOK.glob("*.ipynb"))


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repo_url() -> str:
    """The repository URL: kept in _config.yml only."""
    return config()["repository"]["url"]
