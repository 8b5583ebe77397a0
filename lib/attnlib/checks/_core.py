"""The machinery behind every exercise checker.

A checker runs the learner's function on fixed inputs and compares it with the library's answer. When
the answer is wrong it also runs each known mistake (a planted wrong version) on the same inputs: if the
learner's output matches one of them, the verdict names that mistake. A checker never raises.

Every call gets its own deep copy of the inputs (tensors and modules alike), so a function that changes an
input in place cannot change the reference, a planted mistake, or a later verdict.
"""

from __future__ import annotations

import copy
import dis
import functools
import math
import pathlib
import sysconfig
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .._validate import _show as _show_value
from .._validate import boundary

__all__ = ["Verdict", "Mistake", "Group", "variants", "Guess", "judge", "judge_number", "checker", "progress"]

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


def _gen(seed: int) -> torch.Generator:
    """The seeded CPU generator that every checker draws its test inputs from."""
    return torch.Generator().manual_seed(seed)


# --- comparing a result with the expected one ---------------------------------------------------------------------

_NUMBER = (int, float)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _values_differ(a: torch.Tensor, b: torch.Tensor, atol: float) -> float | None:
    """None when a and b (same shape) agree, NaN where NaN included; else the largest difference."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.is_complex() or b.is_complex():
        a, b = torch.view_as_real(a.to(torch.complex128)), torch.view_as_real(b.to(torch.complex128))
    a, b = a.double(), b.double()
    same_nan = torch.isnan(a) == torch.isnan(b)
    a0, b0 = a.nan_to_num(0.0, 1e300, -1e300), b.nan_to_num(0.0, 1e300, -1e300)
    if bool(same_nan.all()) and torch.allclose(a0, b0, atol=atol, rtol=1e-4):
        return None
    return (a - b).abs().nan_to_num(math.inf).max().item() if a.numel() else math.inf


def _difference(got, want, atol: float, where: str | None = None) -> tuple[str, str] | None:
    """None when ``got`` matches ``want``; otherwise (label, message) describing the first difference.

    A tensor is compared shape first, then values. A tuple or list is compared element by element (length,
    then each element's type and shape, then values), never flattened, so each element's shape counts.
    """
    the = where or "the result"
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "type", f"{the} should be a tensor, got {type(got).__name__}."
        if _shape(got) != _shape(want):
            return "shape", f"{the} has shape {_shape(got)}, expected {_shape(want)}."
        diff = _values_differ(got, want, atol)
        if diff is None:
            return None
        return "values", (f"{the} has the right shape but the values differ (largest difference {diff:.3g}); "
                          f"compare your steps with the formula.")
    if isinstance(want, (tuple, list)):
        n = len(want)
        if not isinstance(got, (tuple, list)):
            return "type", f"{the} should be a tuple of {n} results, got {type(got).__name__}."
        if len(got) != n:
            return "length", f"{the} should be a tuple of {n} results, got {len(got)}."
        found = [d for i, (g, w) in enumerate(zip(got, want))
                 if (d := _difference(g, w, atol, f"element {i + 1} of {n} (index {i})"
                                      + ("" if where is None else f" of {where}"))) is not None]
        structural = [d for d in found if d[0] != "values"]
        return (structural or found or [None])[0]
    if isinstance(want, _NUMBER) and not isinstance(want, bool):
        if isinstance(got, bool) or not isinstance(got, _NUMBER):
            return "type", f"{the} should be a number, got {type(got).__name__}."
        if math.isclose(got, want, rel_tol=1e-4, abs_tol=atol) or (got != got and want != want):
            return None
        return "values", f"{the} is {got:.6g}, expected a different number; compare your steps with the formula."
    try:
        if type(got) is type(want) and bool(got == want):
            return None
    except Exception:  # an object whose == does not give one bool
        pass
    return "values", f"{the} is {got!r:.60}, which is not what was expected."


def _close(a, b, atol: float) -> bool:
    """Whether ``a`` matches ``b`` (tensors, or tuples of them compared element by element, shapes included)."""
    return _difference(a, b, atol) is None


# --- running the learner's function ---------------------------------------------------------------------------------

def _fresh(case: tuple) -> tuple:
    """A deep copy of one test input: tensors, modules and whatever they share, copied together."""
    try:
        return copy.deepcopy(tuple(case))
    except Exception:  # e.g. a non-leaf tensor: fall back to copying the tensors
        return tuple(c.detach().clone() if isinstance(c, torch.Tensor) else c for c in case)


def _folders_not_the_learners() -> tuple[pathlib.Path, ...]:
    paths = {pathlib.Path(torch.__file__).parent, pathlib.Path(__file__).resolve().parents[1]}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(pathlib.Path(p))
    return tuple(p.resolve() for p in paths)


_NOT_THE_LEARNERS = _folders_not_the_learners()


def _in_library(filename: str) -> bool:
    try:
        path = pathlib.Path(filename).resolve()
    except (OSError, ValueError):
        return False
    return any(path.is_relative_to(folder) for folder in _NOT_THE_LEARNERS)


def _is_stub(e: BaseException) -> bool:
    """A ``NotImplementedError`` raised by a ``raise`` statement of the learner's own code: the untouched stub.

    The last frame of the traceback must be outside torch, this library and the installed packages, and its
    last instruction must be a ``raise``: an error that torch raises from its C++ core (the last frame is the
    learner's call of a torch function) or from its Python code (the last frame is torch's) does not count.
    """
    if not isinstance(e, NotImplementedError) or e.__traceback__ is None:
        return False
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if _in_library(code.co_filename):
        return False
    for ins in dis.get_instructions(code):
        if ins.offset == tb.tb_lasti:
            return ins.opname == "RAISE_VARARGS"
    return True   # the instruction cannot be found (another interpreter): trust the frame


def _same_failure(a: BaseException, b: BaseException) -> bool:
    return type(a) is type(b) and str(a) == str(b)


def _explain_error(e: Exception, case: tuple, mistakes: Sequence[Mistake]) -> Verdict:
    """A known mistake that fails in exactly the same way (type and message) explains the error best."""
    raised = f"your function raised {type(e).__name__}: {e}"
    if isinstance(e, NotImplementedError):
        raised += " (raised inside torch, not by a `raise` in your code)"
    for m in mistakes:
        try:
            m.wrong(*_fresh(case))
        except Exception as planted:  # noqa: BLE001 - compared with the learner's error below
            if _same_failure(planted, e):
                return Verdict(False, f"{m.hint} ({raised})", m.label)
    return Verdict(False, raised, "error")


@dataclass(frozen=True)
class Group:
    """Test inputs judged with their own tolerance (float16 cases need a wider one than float32 cases)."""

    cases: Sequence[tuple]
    atol: float


def variants(wrong: Callable, table: Sequence[tuple[str, dict, str]]) -> list[Mistake]:
    """The mistakes that one planted function makes with its switches: rows of (label, switches, hint).

    ``wrong(*case, **switches)`` computes the wrong answer of each row, so a table reads as a list of mistakes,
    each with the switch that plants it and the hint that answers it.
    """
    return [Mistake(label, hint, functools.partial(wrong, **switches)) for label, switches, hint in table]


def judge(fn: Callable, cases: Sequence[tuple] | Sequence[Group], reference: Callable,
          mistakes: Sequence[Mistake] = (), *, success: str = "matches the library on every test input.",
          atol: float = 1e-5, diagnose: Callable[[Verdict], Verdict | None] | None = None) -> Verdict:
    """Compare ``fn(*case)`` with ``reference(*case)`` for every case; explain the first difference.

    The learner's function, the reference and each mistake get their own deep copy of ``case``.
    A tuple result is compared element by element, each element's shape included. ``cases`` may be groups,
    each with its own tolerance, judged in turn. ``diagnose(verdict)`` is a second look at a rejected answer
    (what the table of mistakes cannot say, such as which shapes came back): it returns a better verdict, or
    None to keep this one; if it fails, this one is kept.
    """
    groups = cases if cases and all(isinstance(c, Group) for c in cases) else [Group(cases, atol)]
    verdict = Verdict(True, success)
    for group in groups:
        verdict = _judge_cases(fn, group.cases, reference, mistakes, success, group.atol)
        if not verdict.ok:
            break
    if verdict.ok or diagnose is None:
        return verdict
    try:
        return diagnose(verdict) or verdict
    except Exception:  # noqa: BLE001 - the learner's code ran once already; keep the first verdict
        return verdict


def _judge_cases(fn: Callable, cases: Sequence[tuple], reference: Callable, mistakes: Sequence[Mistake],
                 success: str, atol: float) -> Verdict:
    if not callable(fn):
        return Verdict(False, f"pass a function, not a {type(fn).__name__}.", "not-callable")
    for case in cases:
        try:
            got = fn(*_fresh(case))
        except NotImplementedError as e:
            if _is_stub(e):
                return Verdict(False, "the function is still the stub: replace `raise NotImplementedError` "
                                      "with your code.", "stub")
            return _explain_error(e, case, mistakes)
        except Exception as e:  # the learner's bug must not crash the checker
            return _explain_error(e, case, mistakes)
        if got is None:
            return Verdict(False, "the function returned None: did you forget `return`?", "none")
        want = reference(*_fresh(case))
        difference = _difference(got, want, atol)
        if difference is None:
            continue
        for m in mistakes:
            try:
                wrong = m.wrong(*_fresh(case))
            except Exception:  # noqa: BLE001 - a mistake that cannot run on this case explains nothing
                continue
            if _close(got, wrong, atol):
                return Verdict(False, m.hint, m.label)
        label, message = difference
        if label == "type" and not isinstance(want, (tuple, list)):
            message = f"expected a tensor, got {type(got).__name__}."
        return Verdict(False, message, label)
    return Verdict(True, success)


# --- predictions ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Guess:
    """A typical wrong prediction for a "predict, then check" exercise: ``value`` and why it is wrong."""

    label: str
    hint: str
    value: float


def _as_number(value) -> float | None:
    if isinstance(value, (bool, str, bytes)):
        return None
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 and not value.dtype == torch.bool else None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if number != number else number  # NaN is no prediction


def _show(x: float) -> str:
    """A number as a learner wrote it: whole numbers in full with thousands separators, others to 4 digits."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:.4g}"


def judge_number(value, want: float, guesses: Sequence[Guess] = (), *, rtol: float = 0.1,
                 success: str = "your prediction matches the measurement.",
                 again: str = "redo the reasoning step by step and predict again.") -> Verdict:
    """Compare a learner's predicted number with the measured ``want`` (relative tolerance ``rtol``).

    The stub of a prediction is ``...`` (Ellipsis) or ``None``; a prediction close to one of ``guesses``
    gets that guess's hint; any other wrong number gets ``again``. For an exact count use a tiny ``rtol``.
    """
    if value is ... or value is None:
        return Verdict(False, "write your prediction first: replace `...` with a number, then run the cell.", "stub")
    number = _as_number(value)
    if number is None:
        quotes = " (write it without quotes)" if isinstance(value, str) else ""
        return Verdict(False, f"a prediction is one number{quotes}, got {type(value).__name__} {value!r:.40}.",
                       "type")

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= rtol * max(abs(b), 1e-12)

    if near(number, want):
        return Verdict(True, f"{success} (you said {_show(number)}, measured {_show(want)})")
    for g in guesses:
        if near(number, g.value) and not near(g.value, want):
            return Verdict(False, f"{g.hint} (you said {_show(number)})", g.label)
    side = "high" if number > want else "low"
    return Verdict(False, f"{_show(number)} is too {side}; {again}", "values")


# --- what the learner has done so far in this kernel --------------------------------------------------------------

_LAST: dict[str, Verdict] = {}


KINDS = ("function", "predict")


def checker(fn: Callable[..., Verdict] | None = None, *, kind: str = "function"):
    """Wrap an exercise checker: it never raises, never touches the learner's random state, and its last
    verdict is remembered for :func:`progress`.

    ``kind`` is the exercise's contract, kept on the checker as ``.kind``: ``@checker`` (``"function"``) judges a
    function the learner writes, whose stub raises ``NotImplementedError``; ``@checker(kind="predict")`` judges
    a predicted value, whose stub is ``...``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if fn is None:
        return functools.partial(checker, kind=kind)

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

    wrapped.kind = kind
    return wrapped


def _progress_args(exercises) -> None:
    for i, exercise in enumerate(exercises):
        pair = isinstance(exercise, (tuple, list)) and len(exercise) == 2
        if not (pair and all(isinstance(s, str) for s in exercise)):
            raise TypeError(f"progress takes (title, checker name) pairs of strings, e.g. (\"Build the causal "
                            f"mask\", \"check_causal_mask\"); exercise {i} is {_show_value(exercise)}")


@boundary(_progress_args)
def progress(*exercises: tuple[str, str]) -> None:
    """Print which exercises pass in this kernel: ``progress(("Build the causal mask", "check_causal_mask"), …)``."""
    width = max((len(title) for title, _ in exercises), default=0)
    for title, name in exercises:
        verdict = _LAST.get(name)
        state = "– not run yet" if verdict is None else ("✓ passes" if verdict.ok else "✗ not yet")
        print(f"{title:<{width}}  {state}")
    done = sum(1 for _, name in exercises if name in _LAST and _LAST[name].ok)
    print(f"{done} of {len(exercises)} exercises pass.")

