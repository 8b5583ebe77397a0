"""The machinery behind every exercise checker.

A checker runs the learner's function on fixed inputs and compares it with the library's answer. When
the answer is wrong it also runs each known mistake (a planted wrong version) on the same inputs: if the
learner's output matches one of them, the verdict names that mistake. A checker never raises.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Verdict", "Mistake", "judge"]


@dataclass(frozen=True)
class Verdict:
    """What a checker says: ``ok``, a message for the learner, and the label of a recognised mistake."""

    ok: bool
    message: str
    mistake: str | None = None

    def __repr__(self) -> str:
        text = ("✅ correct: " if self.ok else "❌ not yet: ") + self.message
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
