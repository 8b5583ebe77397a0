"""The book is published from main to the repository's GitHub Pages, by a workflow that the suite validates offline.

check-jsonschema ships (vendors) the schema of GitHub workflows, so the validation needs no network. The workflow
builds the book the README's way (`make book`: the lock, then `jupyter-book build . -W -n`) and the Chinese book
beside it under zh/ (`make book-zh`, as strict), and the README names
the published address, which follows from `repository.url` in _config.yml.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT, repo_url

WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"


def validate(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True, timeout=120)


def test_the_workflow_is_valid_against_the_github_workflow_schema():
    run = validate(WORKFLOW)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("breakage", [
    lambda w: w["jobs"]["build"].update({"steps": "make book"}),        # steps must be a list
    lambda w: w["jobs"]["deploy"].update({"runs-on": None, "needs": 3}),
    lambda w: w.pop("jobs"),
])
def test_a_broken_workflow_fails_the_validation(tmp_path, breakage):
    workflow = yaml.safe_load(WORKFLOW.read_text())
    breakage(workflow)
    broken = tmp_path / "pages.yml"
    broken.write_text(yaml.safe_dump(workflow))
    assert validate(broken).returncode != 0


def test_the_workflow_builds_the_book_the_readmes_way_and_deploys_it():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["build"]["steps"]
    assert [s.get("run") for s in steps if "run" in s] == ["make book",
                                                           "make book-zh && mv _build/zh/html _build/html/zh"]
    assert any(s.get("uses", "").startswith("actions/upload-pages-artifact") and s["with"]["path"] == "_build/html"
               for s in steps)
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in workflow["jobs"]["deploy"]["steps"])
    assert workflow[True]["push"]["branches"] == ["main"]          # YAML 1.1 reads the key `on` as True
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^book:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "jupyter-book build . -W -n --keep-going" in recipe
    recipe_zh = re.search(r"^book-zh:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "-W -n --keep-going" in recipe_zh and "_build/zh/html" in recipe_zh


def test_the_readme_names_the_published_address_of_the_repository():
    owner, name = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", repo_url()).groups()
    address = f"https://{owner.lower()}.github.io/{name}/"
    readme = (ROOT / "README.md").read_text()
    assert address in readme
    assert set(re.findall(r"https://[\w.-]+\.github\.io/[\w./-]*", readme)) == {address}
