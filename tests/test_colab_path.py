"""Where a chapter's kernel finds attnlib: on Colab (simulated, offline) and locally (JupyterLab from book/).

Colab is simulated without the internet: a fake ``google.colab`` module imported at kernel start, the course
cloned by the notebook's own set-up cell from a local git repository (COURSE_REPO) into a fresh folder
(COURSE_HOME), and the repository's editable attnlib install hidden from the kernel. The chapter runs from a
folder outside the repository, as it would in /content on Colab.

That every notebook's set-up cell names the repository of _config.yml is checked in test_notebook_hygiene.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import BOOK, ROOT, notebooks

LIB = ROOT / "lib"
PREFERRED = "01_embeddings.ipynb"

SITECUSTOMIZE = """\
# Started with every Python of the simulated Colab kernel: pretend to be Colab, hide the repository's library.
import sys

import google.colab  # noqa: F401  (the fake one next to this file)

_HIDE = {hidden!r}


def _hidden(entry):
    try:
        import os
        return os.path.realpath(entry or ".") == _HIDE
    except (TypeError, ValueError):
        return False


sys.path[:] = [p for p in sys.path if not _hidden(p)]
sys.meta_path[:] = [f for f in sys.meta_path if "attnlib" not in repr(f) and _HIDE not in repr(f)]
sys.path_importer_cache.clear()
"""


def colab_cell() -> str:
    """The set-up cell's source, as every notebook holds it (test_notebook_hygiene.py checks that they do)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import colab_cell as template
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return template.source()


def is_complete(path: pathlib.Path) -> bool:
    """A chapter written in full: the Colab set-up cell first, then real code."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return len(code) >= 3 and '"google.colab" in sys.modules' in code[0].source


def chapter_to_run() -> pathlib.Path | None:
    """The learner edition of a chapter (what Colab's button opens), else the book's."""
    learner = ROOT / "learner"
    candidates = [learner / PREFERRED, BOOK / PREFERRED] + [p for p in notebooks() if p.name != PREFERRED]
    return next((p for p in candidates if p.exists() and is_complete(p)), None)


def git(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["git", "-c", "user.name=Course", "-c", "user.email=course@example.invalid",
                    "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
                   cwd=cwd, check=True, capture_output=True, text=True)


@pytest.fixture
def fake_colab(tmp_path):
    """(env for the kernel, COURSE_HOME, the local 'GitHub' repository)."""
    # The course as GitHub would serve it: a git repository made from the working tree's lib/ and book/
    # (the working tree, not the last commit, so chapters being written are tested too).
    origin = tmp_path / "origin"
    origin.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".ipynb_checkpoints", "_build")
    for folder in ("lib", "book", "learner"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, origin / folder, ignore=ignore)
    for name in ("_config.yml", "_toc.yml", "pyproject.toml", "requirements.txt"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, origin / name)
    git("init", "-q", cwd=origin)
    git("add", "-A", cwd=origin)
    git("commit", "-q", "-m", "course", cwd=origin)

    fake = tmp_path / "fake_colab"
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab module."""\n')
    (fake / "sitecustomize.py").write_text(SITECUSTOMIZE.format(hidden=os.path.realpath(LIB)))

    home = tmp_path / "content" / "causal-self-attention"     # does not exist yet: the set-up cell clones it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNLIB_DEVICE")}
    env.update(PYTHONPATH=str(fake), COURSE_REPO=f"file://{origin}", COURSE_HOME=str(home),
               GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    return env, home, origin


def run_notebook(nb, cwd: pathlib.Path, env: dict | None = None, timeout: int = 180):
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(cwd)}})
    kwargs = {"env": env} if env is not None else {}
    client.execute(**kwargs)
    return nb


def stdout_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def test_a_chapter_runs_on_simulated_colab(fake_colab, tmp_path):
    env, home, origin = fake_colab
    chapter = chapter_to_run()
    if chapter is None:
        msg = "no chapter notebook is complete yet (the Colab set-up cell followed by code)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg)
        pytest.skip(msg)

    nb = nbformat.read(chapter, as_version=4)
    before = nbformat.v4.new_code_cell(textwrap.dedent("""\
        import importlib.util, sys
        assert "google.colab" in sys.modules, "the fake google.colab was not imported at start"
        assert importlib.util.find_spec("attnlib") is None, "attnlib is importable before the set-up cell"
        print("attnlib hidden before set-up")"""))
    after = nbformat.v4.new_code_cell(textwrap.dedent("""\
        import json, os, sys, attnlib
        print(json.dumps({"attnlib": os.path.realpath(attnlib.__file__), "cwd": os.getcwd(),
                          "home": os.path.realpath(os.environ["COURSE_HOME"])}))"""))
    nb.cells = [before] + nb.cells + [after]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []

    workdir = tmp_path / "content"                                # outside the repository
    workdir.mkdir(exist_ok=True)
    shutil.copy2(chapter, workdir / chapter.name)
    run_notebook(nb, workdir, env)

    assert stdout_of(nb.cells[0]).strip() == "attnlib hidden before set-up"
    assert (home / ".git").is_dir(), "the set-up cell did not clone the course into COURSE_HOME"
    assert (home / chapter.parent.name / chapter.name).is_file()
    info = json.loads(stdout_of(nb.cells[-1]).strip().splitlines()[-1])
    assert info["attnlib"].startswith(os.path.realpath(home / "lib")), info
    assert not info["cwd"].startswith(str(ROOT)), info
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors


def run_setup_cell(env: dict) -> str:
    """Run the set-up cell as a script (what the first cell does in a fresh Colab kernel); return its output."""
    out = subprocess.run([sys.executable, "-c", colab_cell()], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def head_of(repo: pathlib.Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_setup_cell_clones_then_refreshes_and_says_which_commit(fake_colab):
    env, home, origin = fake_colab
    first = run_setup_cell(env)
    assert head_of(home) == head_of(origin)
    assert f"course at commit {head_of(origin)}" in first and "torch " in first, first

    (origin / "lib" / "NEW_IN_ORIGIN.txt").write_text("a later commit\n")    # the course moves on
    git("add", "-A", cwd=origin)
    git("commit", "-q", "-m", "later", cwd=origin)
    (home / "lib" / "attnlib" / "__init__.py").write_text("stale = True\n")   # and the old copy went stale
    second = run_setup_cell(env)
    assert head_of(home) == head_of(origin) and f"course at commit {head_of(origin)}" in second, second
    assert (home / "lib" / "NEW_IN_ORIGIN.txt").is_file()
    assert "stale" not in (home / "lib" / "attnlib" / "__init__.py").read_text()


def test_setup_cell_does_nothing_outside_colab(fake_colab):
    env, home, _ = fake_colab
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}                 # no google.colab module
    assert run_setup_cell(env) == ""
    assert not home.exists()


@pytest.mark.parametrize("folder", ["learner", "book"])
def test_kernel_in_a_notebook_folder_imports_the_repository_library(folder):
    """`make lab` opens learner/ (the full notebooks are in book/); a kernel started in either imports attnlib
    from lib/ (the editable install)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, sys, attnlib\nprint(os.path.realpath(attnlib.__file__))\nprint(os.getcwd())")])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = ROOT / folder
    if not where.is_dir():
        pytest.fail(f"{folder}/ is missing: run `make learner`")
    run_notebook(nb, where, env, timeout=60)
    path, cwd = stdout_of(nb.cells[0]).strip().splitlines()[-2:]
    assert pathlib.Path(path) == (LIB / "attnlib" / "__init__.py").resolve(), path
    assert pathlib.Path(cwd).resolve() == where.resolve(), cwd
