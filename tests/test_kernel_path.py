"""The suite runs on a second kernel path (see conftest.py), so that stored outputs that only one processor
prints fail on the maintainer's own machine. These tests show that the path is really in force."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SECOND_KERNEL_PATH

pytestmark = pytest.mark.skipif(os.environ.get("ATTNLIB_KERNEL_PATH") == "native",
                                reason="ATTNLIB_KERNEL_PATH=native: the suite runs on this machine's own path")

PROBE = "import os, torch; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_ENABLE_INSTRUCTIONS'))"


def test_torch_in_this_process_uses_the_scalar_kernels():
    import torch

    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    for name, value in SECOND_KERNEL_PATH.items():
        assert os.environ[name] == value, name


def test_a_kernel_started_from_the_suite_inherits_the_path():
    """nbval starts its kernels from the test process, with its environment: a child process sees the same."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["DEFAULT", SECOND_KERNEL_PATH["MKL_ENABLE_INSTRUCTIONS"]]


def test_without_the_variables_torch_picks_its_own_path():
    """The control: the variables, not the machine, make the path (where torch has vector kernels at all)."""
    env = {k: v for k, v in os.environ.items() if k not in SECOND_KERNEL_PATH}
    native = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                            env=env).stdout.split()[0]
    assert native in {"DEFAULT", "AVX2", "AVX512", "NO AVX", "ZVECTOR", "VSX", "SVE256", "SVE128", "SVE512"}, native
    if native == "DEFAULT":
        pytest.skip("this machine's own path is already torch's scalar one")
