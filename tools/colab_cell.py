"""The hidden first cell of every notebook: on Colab it fetches the course; anywhere else it does nothing.

One template, written into every notebook of book/ by ``python tools/colab_cell.py`` (``make colab-cell``);
tests/test_notebook_hygiene.py checks that every copy is identical to it. The repository URL and branch come
from _config.yml, the one place they are kept.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]

TEMPLATE = '''\
# On Colab: fetch the course (or bring an earlier copy up to date) and make its library importable.
# Anywhere else this cell does nothing.
import os, subprocess, sys
if "google.colab" in sys.modules:
    REPO_URL, BRANCH = "{url}", "{branch}"
    repo = os.environ.get("COURSE_REPO", REPO_URL)
    home = os.environ.get("COURSE_HOME", "/content/causal-self-attention")
    git = ["git", "-C", home]
    if not os.path.isdir(os.path.join(home, ".git")):
        subprocess.run(["git", "clone", "--depth", "1", "--branch", BRANCH, repo, home], check=True)
    else:  # a copy from earlier in this runtime: refresh it, so the library matches this notebook
        subprocess.run(git + ["fetch", "--depth", "1", repo, BRANCH], check=True)
        subprocess.run(git + ["reset", "--hard", "FETCH_HEAD"], check=True)
    sys.path.insert(0, os.path.join(home, "lib"))
    import torch
    commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    print(f"course at commit {{commit.strip()}} of {{repo}}; torch {{torch.__version__}}")'''


def source() -> str:
    """The set-up cell's source, with the repository of _config.yml."""
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return TEMPLATE.format(url=repository["url"], branch=repository.get("branch", "main"))


def sync(paths) -> list[pathlib.Path]:
    """Write the template into the first cell of each notebook; return the notebooks that changed."""
    changed = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0]
        if first.cell_type != "code" or "remove-cell" not in first.metadata.get("tags", []):
            raise SystemExit(f"{path}: the first cell is not the hidden set-up cell (tag remove-cell)")
        if first.source != source():
            first.source = source()
            nbformat.write(nb, path)
            changed.append(path)
    return changed


if __name__ == "__main__":
    for p in sync(sorted((ROOT / "book").glob("*.ipynb"))):
        print("updated", p.relative_to(ROOT), file=sys.stderr)
