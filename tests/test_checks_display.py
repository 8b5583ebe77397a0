"""A verdict the learner always sees: shown once at the call, in Jupyter and in plain Python; and the hint ladder
that steps up from a verdict without running the learner's code again."""

import subprocess
import sys
import textwrap

import pytest
import torch
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from attnlib.checks import Mistake, Verdict, checker, judge

TRIPLE = Mistake("triple", "is each value scaled once?", lambda x: 3 * x, more="you multiplied by 3.")
CALLS = []


@checker(mistakes=[TRIPLE])
def check_demo_show(fn) -> Verdict:
    return judge(fn, [(torch.arange(1.0, 4.0),), (torch.ones(2, 3),)], lambda x: 2 * x, [TRIPLE])


def counted(x):
    CALLS.append(1)
    return 3 * x


class Recorder(DisplayPublisher):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.shown = []

    def publish(self, data, metadata=None, *args, **kwargs):
        self.shown.append(data.get("text/plain"))


@pytest.fixture
def shell(capsys):
    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance()
    sh.display_pub = Recorder(shell=sh)
    sh.user_ns.update(check=check_demo_show, bad=lambda x: 3 * x, good=lambda x: 2 * x, counted=counted)

    def run(cell: str) -> tuple[list[str], str]:
        sh.display_pub.shown.clear()
        capsys.readouterr()
        result = sh.run_cell(textwrap.dedent(cell), store_history=True)
        assert result.error_in_exec is None, result.error_in_exec
        return list(sh.display_pub.shown), capsys.readouterr().out

    yield run
    InteractiveShell.clear_instance()


def test_two_checks_in_one_cell_both_show(shell):
    shown, out = shell("check(bad)\ncheck(bad, hint=2)\n")
    assert len(shown) == 2 and shown[0].startswith("✗ not yet: is each value scaled once?"), shown
    assert "you multiplied by 3" in shown[1] and "not yet" not in out


def test_a_check_followed_by_a_statement_shows(shell):
    shown, out = shell("check(good)\nx = 1\n")
    assert len(shown) == 1 and shown[0].startswith("✓ correct: ") and "correct" not in out


def test_a_check_as_the_last_expression_shows_once(shell):
    shown, out = shell("check(bad)\n")
    assert len(shown) == 1 and "not yet" not in out, (shown, out)
    shown, out = shell("v = check(bad)\nv.hint(3)\n")            # the step up shows too, once
    assert len(shown) == 2 and "smallest test case" in shown[1] and "not yet" not in out, (shown, out)
    shown, out = shell("v\n")                                       # a later cell shows the verdict again
    assert len(shown) == 1 and shown[0].startswith("✗ not yet"), shown


def test_the_verdict_stays_usable_in_code(shell):
    shown, _ = shell("v = check(bad)\nok, label, text = v.ok, v.mistake, str(v)\n")
    ns = InteractiveShell.instance().user_ns
    assert (ns["ok"], ns["label"]) == (False, "triple") and ns["text"].startswith("✗ not yet")
    assert repr(ns["v"]) == ns["text"] and len(shown) == 1


PLAIN = """
import torch
from attnlib.checks import Mistake, checker, judge

@checker
def check_demo(fn):
    return judge(fn, [(torch.arange(1.0, 4.0),)], lambda x: 2 * x)

check_demo(lambda x: 3 * x)
x = 1
v = check_demo(lambda x: 2 * x)
assert v.ok and str(v).startswith("✓ correct")
"""


def test_plain_python_prints_each_verdict_at_the_call():
    out = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, check=True).stdout
    assert out.count("✗ not yet") == 1 and out.count("✓ correct") == 1, out


def test_the_plain_python_prompt_shows_a_verdict_once():
    lines = PLAIN.replace("check_demo(lambda x: 2 * x)\nassert", "check_demo(lambda x: 2 * x)\n\nassert")
    lines += "\ncheck_demo(lambda x: 3 * x)\n"
    done = subprocess.run([sys.executable, "-i", "-q"], input=lines, capture_output=True, text=True)
    assert done.stdout.count("✗ not yet") == 2 and done.stdout.count("✓ correct") == 1, done


def test_hint_steps_up_without_running_the_learners_code_again():
    CALLS.clear()
    first = check_demo_show(counted)
    runs = len(CALLS)
    second, third = first.hint(2), first.hint(3)
    assert len(CALLS) == runs, "a step up ran the learner's code again"
    assert first.mistake == second.mistake == third.mistake == "triple"
    assert "is each value scaled once?" in first.message and ".hint(2)" in first.message
    assert second.message.startswith("you multiplied by 3") and ".hint(2)" not in second.message
    assert "smallest test case that differs has inputs x float32 (3,)" in third.message, third
    assert "expected 2" in third.message and "3 * x" not in third.message          # never the code of a fix
    assert check_demo_show(counted, hint=2).message == second.message               # hint= keeps working
    assert check_demo_show(counted, hint=3).message == third.message
    assert first.hint(4).mistake == "error"
