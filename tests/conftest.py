"""The second kernel path the whole suite runs on, and how pytest-xdist shares the suite out. The functions the
tests share are in helpers.py."""

from __future__ import annotations

import os

# ---------------------------------------------------------------------------------------------------------------
# The second kernel path. `make notebooks` stores every output on a machine's own, fastest path; the suite then
# re-runs every notebook (nbval, the learner runs) on another one, so a stored digit that belongs to one processor
# fails here, on the maintainer's own machine, and not only on someone else's. Measured on an AVX-512 Xeon with
# torch 2.13 (MKL, oneDNN), before the notebooks were made portable, each knob alone changed the printed output of
# notebook cells: ATEN_CPU_CAPABILITY, torch's vectorised kernels (18 cells with `default`, 11 with `avx2`);
# MKL_ENABLE_INSTRUCTIONS, MKL's matrix products (17 with SSE4_2, 10 with AVX2); ONEDNN_MAX_CPU_ISA, oneDNN's
# kernels (7 with SSE41 or AVX2). A second thread (OMP_NUM_THREADS=2) changed none: `setup()` pins one thread in
# every notebook. The variables must be set before torch is imported, in this process and so in every kernel that
# nbval starts from it. ATTNLIB_KERNEL_PATH=native runs the suite on the machine's own path instead.
SECOND_KERNEL_PATH = {
    "ATEN_CPU_CAPABILITY": "default",     # torch's scalar kernels instead of AVX2 / AVX-512 ones
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",  # MKL's matrix products without AVX
    "ONEDNN_MAX_CPU_ISA": "SSE41",        # oneDNN's kernels without AVX
}
if os.environ.get("ATTNLIB_KERNEL_PATH", "second") != "native":
    os.environ.update(SECOND_KERNEL_PATH)

# One thread per xdist worker: `make test` starts one worker per core, and torch's own threads on top of them
# fight over the same cores (on a busy 2-core machine one checker test took 12 s with two threads, 1 s with one).
# The notebooks pin one thread themselves (`setup()`); a run without xdist keeps torch's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)   # in case torch was imported before this file set OMP_NUM_THREADS


# How pytest-xdist shares the suite out (`make test`: -n auto --dist loadfile). Workers take units, one at a time,
# and a unit is a whole file by default: its module fixtures are built once, and nbval runs a notebook's cells in
# order in one kernel, which they need. Two kinds of test are split finer, so that they spread over the workers:
# - SPREAD, the learner-notebook runs: each notebook is a unit of its own;
# - BY_PAGE, the browser tests: each page is a unit of its own (all of one page's tests together, so that the page
#   is opened once), after the unit that builds the book, which every worker then reads (book_in_browser.build).
# Units are handed out in collection order, the book's build first (while it runs, the other workers run the
# learner notebooks), then the slow units, then the small ones, which fill the gaps at the end.
SPREAD = ("test_learner_notebook_runs_and_every_checker_says_not_yet",)
BY_PAGE = ("test_rendered_book.py", "test_figures_in_browser.py", "test_book_zh.py")
ORDER = ("test_rendered_book.py", "test_book_zh.py", "test_learner_edition.py", "test_colab_path.py",
         "test_figures_in_browser.py")


def _per_page(nodeid: str) -> bool:
    return nodeid.split("::")[0].rsplit("/", 1)[-1] in BY_PAGE and nodeid.endswith("]")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        name = item.path.name
        if _per_page(item.nodeid):
            return len(ORDER)                       # the pages, after the slow units
        return ORDER.index(name) if name in ORDER else len(ORDER) + 1

    items.sort(key=rank)   # stable: the order within a file and among the other files is kept


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist, absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesPagesAndNotebooks(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            test = nodeid.split("::")[-1].split("[")[0]
            if test in SPREAD and "[" in nodeid:
                return nodeid
            if _per_page(nodeid):
                return nodeid.split("::")[0] + "[" + nodeid.split("[", 1)[1]
            return super()._split_scope(nodeid)

    config.option.loadscopereorder = False    # xdist would hand out the units with the most tests first
    return FilesPagesAndNotebooks(config, log)
