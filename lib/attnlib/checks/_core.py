"""The machinery behind every exercise checker.

A checker runs the learner's function on fixed inputs and compares it with the library's answer: values,
shape, dtype and device. When the answer is wrong it also runs each known mistake (a planted wrong version)
on the same inputs: a mistake is named only when the learner's output matches it on every input. A checker
never raises.

Every call gets its own deep copy of the inputs (tensors and modules alike); after the call the copy is
compared with the original, so a function that changes an input in place is told so. A module that comes
back sharing a parameter with a module that went in is told so too.

Hints come in two levels. The first (``check_…(fn)``) points to where to look, as a question or a property
that fails, and never holds the code of the fix; ``check_…(fn, hint=2)`` says more.
"""

from __future__ import annotations

import contextvars
import copy
import dis
import functools
import inspect
import math
import pathlib
import sysconfig
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .._validate import _show as _show_value
from .._validate import boundary

__all__ = ["Verdict", "Mistake", "Group", "variants", "Guess", "judge", "judge_number", "checker", "progress",
           "named", "hint_level", "shared_parameters"]

# The verdict glyphs: both are in DejaVu Sans Mono, the fallback monospace font of a bare Linux machine,
# so they read correctly in a terminal, JupyterLab and the rendered book alike.
CORRECT, NOT_YET = "✓ correct: ", "✗ not yet: "


@dataclass(frozen=True)
class Verdict:
    """What a checker says: ``ok``, a message for the learner, and the label of a recognised mistake."""

    ok: bool
    message: str
    mistake: str | None = None
    more: bool = False   # a second hint level exists (``hint=2``)

    def __repr__(self) -> str:
        text = (CORRECT if self.ok else NOT_YET) + self.message
        return textwrap.fill(text, width=88, subsequent_indent="   ", break_on_hyphens=False)

    __str__ = __repr__


# The hint level of the verdict being made: 1 (where to look), or 2 (asked for with ``check_…(…, hint=2)``).
_LEVEL: contextvars.ContextVar[int] = contextvars.ContextVar("hint_level", default=1)


def hint_level() -> int:
    """The hint level of the checker call in progress: 1 by default, 2 after ``check_…(…, hint=2)``."""
    return _LEVEL.get()


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: ``wrong(*args)`` computes it (None for one that only a diagnosis finds).

    ``hint`` is the first level: where to look, as a question or a failing property, never the fix's code.
    ``more`` is the second level (``hint=2``): what the mistake is, said plainly. Either may hold
    ``str.format`` fields that :func:`named` fills in.
    """

    label: str
    hint: str
    wrong: Callable | None = None
    more: str | None = None

    def say(self, **fields) -> str:
        text = self.more if hint_level() >= 2 and self.more else self.hint
        return text.format(**fields) if fields else text


def named(m: Mistake | Guess, suffix: str = "", **fields) -> Verdict:
    """The verdict that names mistake ``m`` at the current hint level (``fields`` fill its text)."""
    return Verdict(False, m.say(**fields) + suffix, m.label, more=bool(m.more) and hint_level() < 2)


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


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    """Where two same-shape tensors first differ, for the second hint level."""
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    bad = ~((a - b).abs() <= 1e-5 + 1e-4 * b.abs()) & ~(a.isnan() & b.isnan())
    if not bad.any():
        return ""
    index = tuple(int(i) for i in bad.nonzero()[0]) if a.dim() else ()
    return f" The first difference is at index {index}: yours is {a[index].item():.4g}, " \
           f"expected {b[index].item():.4g}."


def _difference(got, want, atol: float, where: str | None = None, strict: bool = True) -> tuple[str, str] | None:
    """None when ``got`` matches ``want``; otherwise (label, message) describing the first difference.

    A tensor is compared shape first, then values, then (when ``strict``) dtype and device. A tuple or list is
    compared element by element (length, then each element's type and shape, then values), never flattened,
    so each element's shape counts.
    """
    the = where or "the result"
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "type", f"{the} should be a tensor, got {type(got).__name__}."
        if _shape(got) != _shape(want):
            return "shape", f"{the} has shape {_shape(got)}, expected {_shape(want)}."
        if got.is_meta != want.is_meta:   # a meta tensor holds no values to compare
            return "device", (f"{the} is on {got.device}, expected {want.device}, the device of the inputs. "
                              f"Which tensor do you create without saying where it lives?")
        if got.dtype.is_complex != want.dtype.is_complex:
            return "dtype", f"{the} has dtype {got.dtype}, expected {want.dtype}."
        diff = _values_differ(got, want, atol)
        if diff is not None:
            where_ = _first_difference(got, want) if hint_level() >= 2 else ""
            return "values", (f"{the} has the right shape but the values differ (largest difference {diff:.3g}); "
                              f"compare your steps with the formula.{where_}")
        if strict and got.dtype != want.dtype:
            return "dtype", (f"{the} has the right values but dtype {got.dtype}, expected {want.dtype}. Where "
                             f"does a new dtype enter your computation: a tensor you create, a constant, numpy?")
        if strict and got.device != want.device:
            return "device", (f"{the} is on {got.device}, expected {want.device}, the device of the inputs. "
                              f"Which tensor do you create without saying where it lives?")
        return None
    if isinstance(want, (tuple, list)):
        n = len(want)
        if not isinstance(got, (tuple, list)):
            return "type", f"{the} should be a tuple of {n} results, got {type(got).__name__}."
        if len(got) != n:
            return "length", f"{the} should be a tuple of {n} results, got {len(got)}."
        found = [d for i, (g, w) in enumerate(zip(got, want))
                 if (d := _difference(g, w, atol, f"element {i + 1} of {n} (index {i})"
                                      + ("" if where is None else f" of {where}"), strict)) is not None]
        structural = [d for d in found if d[0] not in ("values", "dtype", "device")]
        values = [d for d in found if d[0] == "values"]
        return (structural or values or found or [None])[0]
    if isinstance(want, torch.nn.Module):
        return _module_difference(got, want, atol, the, strict)
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


def _module_difference(got, want: torch.nn.Module, atol: float, the: str, strict: bool) -> tuple[str, str] | None:
    """A module is compared by its parameters and buffers: their names, then shapes, then values and dtypes."""
    if not isinstance(got, torch.nn.Module):
        return "type", f"{the} should be a module ({type(want).__name__}), got {type(got).__name__}."
    mine, theirs = got.state_dict(), want.state_dict()
    if set(mine) != set(theirs):
        extra, missing = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
        said = [f"has {', '.join(extra)} that it should not have"] if extra else []
        said += [f"lacks {', '.join(missing)}"] if missing else []
        return "structure", f"{the} {' and '.join(said)}."
    for name, w in theirs.items():
        d = _difference(mine[name], w, atol, f"{the}'s {name}", strict)
        if d is not None:
            return ("structure", d[1]) if d[0] == "shape" else d
    return None


def _close(a, b, atol: float) -> bool:
    """Whether ``a`` matches ``b`` in value (tensors, or tuples of them compared element by element, shapes
    included; dtype and device not compared, so a mistake is recognised in any dtype)."""
    return _difference(a, b, atol, strict=False) is None


# --- what a call did to its inputs ----------------------------------------------------------------------------------

def _tensors_of(x, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """Every tensor an input holds, named: a tensor itself, a module's state, the items of a tuple, list or dict."""
    if isinstance(x, torch.Tensor):
        return [(prefix, x)]
    if isinstance(x, torch.nn.Module):
        return [(f"{prefix}.{k}", v) for k, v in x.state_dict(keep_vars=True).items()]
    if isinstance(x, (tuple, list)):
        return [t for i, item in enumerate(x) for t in _tensors_of(item, f"{prefix}[{i}]")]
    if isinstance(x, dict):
        return [t for k, item in x.items() for t in _tensors_of(item, f"{prefix}[{k!r}]")]
    return []


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))


def _argument_names(fn: Callable, n: int) -> list[str]:
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"argument {i + 1}" for i in range(n)]


def _changed_in_place(fn: Callable, after: tuple, before: tuple, mutable: Sequence[int]) -> str | None:
    """The name of the first input (outside ``mutable``) whose tensors ``fn`` changed, or None."""
    names = _argument_names(fn, len(after))
    for i, (a, b) in enumerate(zip(after, before)):
        if i in mutable:
            continue
        ta, tb = _tensors_of(a, names[i]), _tensors_of(b, names[i])
        if len(ta) != len(tb):
            return names[i]
        for (name, x), (_, y) in zip(ta, tb):
            if not _same_tensor(x, y):
                return name
    return None


IN_PLACE = Mistake(
    "in-place",
    "your function changed its input {name} in place: after the call it no longer holds what was passed in, "
    "so the caller's tensor is changed too. Which line of yours writes into a tensor it was given?",
    more="your function changed its input {name} in place. Methods whose name ends in an underscore, "
         "augmented assignments such as += or -= on an input, and assignments through an index all write "
         "into the caller's tensor. Compute a new tensor instead and leave the inputs as they came.")

SHARED = Mistake(
    "shared-parameters",
    "what you built shares its parameter {name} with the module that was passed in: training one would "
    "change the other. Did you copy the numbers, or hand over the same tensor?",
    more="the parameter {name} of what you built is the same storage as a parameter of the module passed "
         "in. Wrapping an existing tensor in a new Parameter, or assigning it, shares it; copy the values "
         "into the new layer's own parameters instead.")


def shared_parameters(built, given) -> list[str]:
    """Names of the parameters of ``built`` (a module, or a tuple of them) that share storage with a tensor of
    ``given`` (the inputs: modules, tensors, tuples of them)."""
    taken = {t.untyped_storage().data_ptr() for _, t in _tensors_of(given, "input") if t.numel()}
    return [name for name, p in _tensors_of(built, "result")
            if isinstance(p, torch.nn.Parameter) and p.numel() and p.untyped_storage().data_ptr() in taken]


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


STUB = Mistake("stub", "the function is still the stub: replace `raise NotImplementedError` with your code.")
NONE = Mistake("none", "the function returned None: did you forget `return`?")
NOT_CALLABLE = Mistake("not-callable", "pass a function, not a {kind}.")


@dataclass(frozen=True)
class Group:
    """Test inputs judged with their own tolerance (float16 cases need a wider one than float32 cases)."""

    cases: Sequence[tuple]
    atol: float


def variants(wrong: Callable, table: Sequence[tuple]) -> list[Mistake]:
    """The mistakes that one planted function makes with its switches: rows of (label, switches, hint) or
    (label, switches, hint, more).

    ``wrong(*case, **switches)`` computes the wrong answer of each row, so a table reads as a list of mistakes,
    each with the switch that plants it and the hints that answer it (first level, then second).
    """
    return [Mistake(row[0], row[2], functools.partial(wrong, **row[1]), *row[3:]) for row in table]


class _Run:
    """The learner's function on every case, each call on its own deep copy, run once and remembered."""

    def __init__(self, fn: Callable, mutable: Sequence[int | str]):
        self.fn, self.mutable, self._seen = fn, mutable, {}

    def __call__(self, case: tuple) -> tuple[object, BaseException | None, tuple]:
        key = id(case)
        if key not in self._seen:
            args = _fresh(case)
            try:
                self._seen[key] = (self.fn(*args), None, args)
            except Exception as e:  # noqa: BLE001 - the learner's bug must not crash the checker
                self._seen[key] = (None, e, args)
        return self._seen[key]


def _matches_everywhere(m: Mistake, run: _Run, cases: Sequence[tuple[tuple, float]]) -> bool:
    """Whether the learner's function gives mistake ``m``'s output (or its error) on every case.

    A case on which the planted mistake cannot run, while the learner's function can, says nothing either
    way and is skipped.
    """
    for case, atol in cases:
        try:
            wrong, planted = m.wrong(*_fresh(case)), None
        except Exception as e:  # noqa: BLE001
            wrong, planted = None, e
        got, raised, _ = run(case)
        if planted is not None:
            if raised is not None and not _same_failure(planted, raised):
                return False
            continue
        if raised is not None or got is None or not _close(got, wrong, atol):
            return False
    return True


def _explain_error(e: Exception, case: tuple, mistakes: Sequence[Mistake], run: _Run,
                   cases: Sequence[tuple[tuple, float]]) -> Verdict:
    """A known mistake that fails in exactly the same way (type and message) explains the error best."""
    raised = f"your function raised {type(e).__name__}: {e}"
    if isinstance(e, NotImplementedError):
        raised += " (raised inside torch, not by a `raise` in your code)"
    for m in mistakes:
        if m.wrong is None:
            continue
        try:
            m.wrong(*_fresh(case))
        except Exception as planted:  # noqa: BLE001 - compared with the learner's error below
            if _same_failure(planted, e) and _matches_everywhere(m, run, cases):
                return named(m, f" ({raised})")
    return Verdict(False, raised, "error")


def _mutable_indices(fn: Callable, n: int, mutable: Sequence[int | str]) -> tuple[int, ...]:
    names = _argument_names(fn, n)
    return tuple(i if isinstance(i, int) else names.index(i) for i in mutable if isinstance(i, int) or i in names)


def judge(fn: Callable, cases: Sequence[tuple] | Sequence[Group], reference: Callable,
          mistakes: Sequence[Mistake] = (), *, success: str = "matches the library on every test input.",
          atol: float = 1e-5, diagnose: Callable[[Verdict], Verdict | None] | None = None,
          mutable: Sequence[int] = ()) -> Verdict:
    """Compare ``fn(*case)`` with ``reference(*case)`` for every case; explain the first difference.

    The learner's function, the reference and each mistake get their own deep copy of ``case``. The result
    must match in values, shape, dtype and device; a tuple result is compared element by element. After
    the call every input is compared with the original (an in-place change is named, except for the
    argument positions in ``mutable``), and a module in the result must not share a parameter with one in
    the inputs. A mistake is named only when the learner's output matches it on every case. ``cases`` may be
    groups, each with its own tolerance. ``diagnose(verdict)`` is a second look at a rejected answer (what the
    table of mistakes cannot say, such as which shapes came back): it returns a better verdict, or None to
    keep this one; if it fails, this one is kept.
    """
    if not callable(fn):
        return named(NOT_CALLABLE, kind=type(fn).__name__)
    groups = cases if cases and all(isinstance(c, Group) for c in cases) else [Group(cases, atol)]
    every = [(case, g.atol) for g in groups for case in g.cases]
    verdict = _judge_cases(_Run(fn, mutable), every, reference, mistakes, success)
    if verdict.ok or diagnose is None:
        return verdict
    try:
        return diagnose(verdict) or verdict
    except Exception:  # noqa: BLE001 - the learner's code ran once already; keep the first verdict
        return verdict


def _judge_cases(run: _Run, cases: Sequence[tuple[tuple, float]], reference: Callable,
                 mistakes: Sequence[Mistake], success: str) -> Verdict:
    for case, atol in cases:
        got, e, args = run(case)
        if e is not None:
            if isinstance(e, NotImplementedError) and _is_stub(e):
                return named(STUB)
            return _explain_error(e, case, mistakes, run, cases)
        if got is None:
            return named(NONE)
        changed = _changed_in_place(run.fn, args, _fresh(case), _mutable_indices(run.fn, len(args), run.mutable))
        if changed is not None:
            return named(IN_PLACE, name=changed)
        shared = shared_parameters(got, args)
        if shared:
            return named(SHARED, name=shared[0].removeprefix("result."))
        want = reference(*_fresh(case))
        difference = _difference(got, want, atol)
        if difference is None:
            continue
        # right values in the wrong dtype or device: no planted mistake (each one a wrong value) explains that
        for m in mistakes if difference[0] not in ("dtype", "device") else ():
            if m.wrong is None:
                continue
            try:
                wrong = m.wrong(*_fresh(case))
            except Exception:  # noqa: BLE001 - a mistake that cannot run on this case explains nothing
                continue
            if _close(got, wrong, atol) and _matches_everywhere(m, run, cases):
                return named(m)
        label, message = difference
        if label == "type" and isinstance(want, torch.Tensor):
            message = f"expected a tensor, got {type(got).__name__}."
        return Verdict(False, message, label, more=label == "values" and hint_level() < 2)
    return Verdict(True, success)


# --- predictions ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Guess:
    """A typical wrong prediction for a "predict, then check" exercise: ``value`` and why it is wrong.

    ``hint`` (the first level) says which part of the count is off, never the formula; ``more`` (``hint=2``)
    says what the reasoning missed.
    """

    label: str
    hint: str
    value: float
    more: str | None = None

    say = Mistake.say


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


PREDICT_STUB = Mistake("stub", "write your prediction first: replace `...` with a number, then run the cell.")
NOT_A_NUMBER = Mistake("type", "a prediction is one number{quotes}, got {got}.")


def judge_number(value, want: float, guesses: Sequence[Guess] = (), *, rtol: float = 0.1,
                 success: str = "your prediction matches the measurement.",
                 again: str = "redo the reasoning step by step and predict again.") -> Verdict:
    """Compare a learner's predicted number with the measured ``want`` (relative tolerance ``rtol``).

    The stub of a prediction is ``...`` (Ellipsis) or ``None``; a prediction close to one of ``guesses``
    gets that guess's hint; any other wrong number gets ``again``. For an exact count use a tiny ``rtol``.
    """
    if value is ... or value is None:
        return named(PREDICT_STUB)
    number = _as_number(value)
    if number is None:
        quotes = " (write it without quotes)" if isinstance(value, str) else ""
        return named(NOT_A_NUMBER, quotes=quotes, got=f"{type(value).__name__} {value!r:.40}")

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= rtol * max(abs(b), 1e-12)

    if near(number, want):
        return Verdict(True, f"{success} (you said {_show(number)}, measured {_show(want)})")
    for g in guesses:
        if near(number, g.value) and not near(g.value, want):
            return named(g, f" (you said {_show(number)})")
    side = "high" if number > want else "low"
    return Verdict(False, f"{_show(number)} is too {side}; {again}", "values")


# --- what the learner has done so far in this kernel --------------------------------------------------------------

_LAST: dict[str, Verdict] = {}


KINDS = ("function", "predict")
# The verdicts of the core that every checker of a kind can give, besides its own mistakes.
_GENERAL_OF = {"function": (STUB, NONE, NOT_CALLABLE, IN_PLACE, SHARED), "predict": (PREDICT_STUB, NOT_A_NUMBER)}
_GENERAL = tuple(m for ms in _GENERAL_OF.values() for m in ms)
MORE = " (For a stronger hint, run the check again with hint=2.)"


def checker(fn: Callable[..., Verdict] | None = None, *, kind: str = "function",
            mistakes: Sequence[Mistake | Guess] = ()):
    """Wrap an exercise checker: it never raises, never touches the learner's random state, takes a hint level
    (``check_…(answer, hint=2)``), and its last verdict is remembered for :func:`progress`.

    ``kind`` is the exercise's contract, kept on the checker as ``.kind``: ``@checker`` (``"function"``) judges a
    function the learner writes, whose stub raises ``NotImplementedError``; ``@checker(kind="predict")`` judges
    a predicted value, whose stub is ``...``. ``mistakes`` lists every mistake and guess the checker can name
    (kept as ``.mistakes``, with the general ones), so a test can read each hint the learner may see.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if fn is None:
        return functools.partial(checker, kind=kind, mistakes=mistakes)

    @functools.wraps(fn)
    def wrapped(*args, hint: int = 1, **kwargs) -> Verdict:
        if hint not in (1, 2) or isinstance(hint, bool):
            verdict = Verdict(False, f"hint is 1 (where to look) or 2 (more), got {hint!r}.", "error")
            _LAST[fn.__name__] = verdict
            return verdict
        token = _LEVEL.set(hint)
        with torch.random.fork_rng(devices=[]):
            try:
                verdict = fn(*args, **kwargs)
            except Exception as e:  # a checker's own failure must not look like the learner's
                verdict = Verdict(False, f"the checker could not judge this answer ({type(e).__name__}: {e}).",
                                  "error")
            finally:
                _LEVEL.reset(token)
        if verdict.more:
            verdict = Verdict(False, verdict.message + MORE, verdict.mistake, more=True)
        _LAST[fn.__name__] = verdict
        return verdict

    wrapped.kind = kind
    wrapped.mistakes = tuple(mistakes) + _GENERAL_OF[kind]
    return wrapped


def _progress_args(exercises) -> None:
    for i, exercise in enumerate(exercises):
        pair = isinstance(exercise, (tuple, list)) and len(exercise) == 2
        if not (pair and all(isinstance(s, str) for s in exercise)):
            raise TypeError(f"progress takes (title, checker name) pairs of strings, e.g. (\"Build: packed "
                            f"mask\", \"check_packed_mask\"); exercise {i} is {_show_value(exercise)}")


@boundary(_progress_args)
def progress(*exercises: tuple[str, str]) -> None:
    """Print which exercises pass in this kernel: ``progress(("Build: packed mask", "check_packed_mask"), …)``."""
    width = max((len(title) for title, _ in exercises), default=0)
    for title, name in exercises:
        verdict = _LAST.get(name)
        state = "– not run yet" if verdict is None else ("✓ passes" if verdict.ok else "✗ not yet")
        print(f"{title:<{width}}  {state}")
    done = sum(1 for _, name in exercises if name in _LAST and _LAST[name].ok)
    print(f"{done} of {len(exercises)} exercises pass.")

