"""The machinery behind every exercise checker.

A checker runs the learner's function on fixed inputs and compares it with the library's answer. When
the answer is wrong it also runs each known mistake (a planted wrong version) on the same inputs: if the
learner's output matches one of them, the verdict names that mistake. A checker never raises.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Verdict", "Mistake", "Guess", "judge", "judge_number", "checker", "progress"]

# The verdict glyphs: both are in DejaVu Sans Mono, the fallback monospace font of a bare Linux machine,
# so they read correctly in a terminal, JupyterLab and the rendered book alike.
CORRECT, NOT_YET = "✓ correct: ", "✗ not yet: "


@dataclass(frozen=True)
class Verdict:
    """What a checker says: ``ok``, a message for the learner, and the label of a recognised mistake."""

    ok: bool
    message: str
    mistake: str | None = None

    def __repr__(self) -> str:
        text = (CORRECT if self.ok else NOT_YET) + self.message
        return textwrap.fill(text, width=88, subsequent_indent="   ", break_on_hyphens=False)

    __str__ = __repr__


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: ``wrong(*args)`` computes it, ``hint`` says how to fix it."""

    label: str
    hint: str
    wrong: Callable


def _as_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return torch.stack([t.reshape(-1) for t in x]) if len({t.numel() for t in x}) == 1 else None
    return None


def _close(a, b, atol: float) -> bool:
    a, b = _as_tensor(a), _as_tensor(b)
    if a is None or b is None or a.shape != b.shape:
        return False
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    same_nan = torch.isnan(a) == torch.isnan(b)
    a, b = a.nan_to_num(0.0, 1e300, -1e300), b.nan_to_num(0.0, 1e300, -1e300)
    return bool(same_nan.all()) and torch.allclose(a, b, atol=atol, rtol=1e-4)


def _explain_error(e: Exception, case: tuple, mistakes: Sequence[Mistake]) -> Verdict:
    """A known mistake that fails in the same way explains the error better than the error alone."""
    raised = f"your function raised {type(e).__name__}: {e}"
    for m in mistakes:
        try:
            m.wrong(*case)
        except type(e):
            return Verdict(False, f"{m.hint} ({raised})", m.label)
        except Exception:
            continue
    return Verdict(False, raised, "error")


def judge(fn: Callable, cases: Sequence[tuple], reference: Callable, mistakes: Sequence[Mistake] = (), *,
          success: str = "matches the library on every test input.", atol: float = 1e-5) -> Verdict:
    """Compare ``fn(*case)`` with ``reference(*case)`` for every case; explain the first difference."""
    if not callable(fn):
        return Verdict(False, f"pass a function, not a {type(fn).__name__}.", "not-callable")
    for case in cases:
        try:
            got = fn(*[c.clone() if isinstance(c, torch.Tensor) else c for c in case])
        except NotImplementedError:
            return Verdict(False, "the function is still the stub: replace `raise NotImplementedError` "
                                  "with your code.", "stub")
        except Exception as e:  # the learner's bug must not crash the checker
            return _explain_error(e, case, mistakes)
        want = reference(*case)
        if got is None:
            return Verdict(False, "the function returned None: did you forget `return`?", "none")
        if _close(got, want, atol):
            continue
        for m in mistakes:
            try:
                wrong = m.wrong(*case)
            except Exception:
                continue
            if _close(got, wrong, atol):
                return Verdict(False, m.hint, m.label)
        got_t, want_t = _as_tensor(got), _as_tensor(want)
        if got_t is None:
            return Verdict(False, f"expected a tensor, got {type(got).__name__}.", "type")
        if got_t.shape != want_t.shape:
            return Verdict(False, f"the result has shape {tuple(got_t.shape)}, expected "
                                  f"{tuple(want_t.shape)}.", "shape")
        diff = (got_t.detach().double().cpu() - want_t.detach().double().cpu()).abs().nan_to_num(float("inf"))
        return Verdict(False, f"the shape is right but the values differ (largest difference "
                              f"{diff.max().item():.3g}); compare your steps with the formula.", "values")
    return Verdict(True, success)


@dataclass(frozen=True)
class Guess:
    """A typical wrong prediction for a "predict, then check" exercise: ``value`` and why it is wrong."""

    label: str
    hint: str
    value: float


def _as_number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 and not value.dtype == torch.bool else None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN is no prediction


def judge_number(value, want: float, guesses: Sequence[Guess] = (), *, rtol: float = 0.1,
                 success: str = "your prediction matches the measurement.") -> Verdict:
    """Compare a learner's predicted number with the measured ``want`` (relative tolerance ``rtol``).

    The stub of a prediction is ``...`` (Ellipsis) or ``None``; a prediction close to one of ``guesses``
    gets that guess's hint.
    """
    if value is ... or value is None:
        return Verdict(False, "write your prediction first: replace `...` with a number, then run the cell.", "stub")
    number = _as_number(value)
    if number is None:
        return Verdict(False, f"a prediction is one number, got {type(value).__name__} {value!r:.40}.", "type")

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= rtol * max(abs(b), 1e-12)

    if near(number, want):
        return Verdict(True, f"{success} (you said {number:.4g}, measured {want:.4g})")
    for g in guesses:
        if near(number, g.value) and not near(g.value, want):
            return Verdict(False, f"{g.hint} (you said {number:.4g})", g.label)
    side = "high" if number > want else "low"
    return Verdict(False, f"{number:.4g} is too {side}; redo the reasoning step by step and predict again.", "values")


# --- what the learner has done so far in this kernel --------------------------------------------------------------

_LAST: dict[str, Verdict] = {}


def checker(fn: Callable[..., Verdict]) -> Callable[..., Verdict]:
    """Wrap an exercise checker: it never raises, never touches the learner's random state, and its last
    verdict is remembered for :func:`progress`."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs) -> Verdict:
        with torch.random.fork_rng(devices=[]):
            try:
                verdict = fn(*args, **kwargs)
            except Exception as e:  # a checker's own failure must not look like the learner's
                verdict = Verdict(False, f"the checker could not judge this answer ({type(e).__name__}: {e}).",
                                  "error")
        _LAST[fn.__name__] = verdict
        return verdict

    return wrapped


def progress(*exercises: tuple[str, str]) -> None:
    """Print which exercises pass in this kernel: ``progress(("Build the causal mask", "check_causal_mask"), …)``."""
    width = max((len(title) for title, _ in exercises), default=0)
    for title, name in exercises:
        verdict = _LAST.get(name)
        state = "– not run yet" if verdict is None else ("✓ passes" if verdict.ok else "✗ not yet")
        print(f"{title:<{width}}  {state}")
    done = sum(1 for _, name in exercises if name in _LAST and _LAST[name].ok)
    print(f"{done} of {len(exercises)} exercises pass.")
