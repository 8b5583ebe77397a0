"""The engine behind every exercise checker.

A checker runs the learner's function once per case, on a deep copy of fixed inputs, and compares the result with
the library's: values, shape, dtype, device, inputs changed in place, parameters shared with the inputs. A known
mistake (a planted wrong version) is named only when the learner's output matches it on every case. A checker
never raises. Hints are a ladder: level 1 (``check_…(fn)``) asks a question or names a failing property, level 2
(``hint=2`` or ``verdict.hint(2)``) says where to look, level 3 shows the smallest differing case, made from the
results already computed. No level holds the fix's code. A verdict shows itself at the call, exactly once.
"""

from __future__ import annotations

import contextvars
import copy
import dis
import functools
import inspect
import linecache
import math
import pathlib
import sys
import sysconfig
import textwrap
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .._validate import _show as _show_value
from .._validate import boundary

__all__ = ["Verdict", "Mistake", "Group", "variants", "Guess", "judge", "judge_number", "checker", "progress",
           "named", "hint_level", "shared_parameters"]

# both glyphs are in DejaVu Sans Mono, the fallback monospace font of a bare Linux machine
CORRECT, NOT_YET = "✓ correct: ", "✗ not yet: "


@dataclass(frozen=True)
class Verdict:
    """What a checker says: ``ok``, a message, a mistake's label, each hint level's message, the learner's error."""

    ok: bool
    message: str
    mistake: str | None = None
    more: bool = False   # a stronger hint level exists
    ladder: tuple[str, ...] = field(default=(), compare=False, repr=False)
    error: BaseException | None = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        text = (CORRECT if self.ok else NOT_YET) + self.message
        return "\n".join(textwrap.fill(part, width=88, subsequent_indent="   ", break_on_hyphens=False)
                         for part in text.split("\n"))

    __str__ = __repr__

    def hint(self, level: int = 2) -> Verdict:
        """This verdict at hint ``level`` (2: where to look; 3: the smallest case that differs), run again never."""
        return show(_bad_level(level) or _at_level(self, level))

    def _ipython_display_(self) -> None:
        # Jupyter's display hook: a verdict already shown in this cell is not shown again
        shell = _shell()
        if shell is not None and getattr(self, "_shown", None) == getattr(shell, "execution_count", None):
            return
        show(self)


def _shell():
    ipython = sys.modules.get("IPython")
    try:
        return ipython.get_ipython() if ipython is not None else None
    except Exception:  # noqa: BLE001 - a half-imported IPython is plain Python
        return None


_REPL_HOOK: list = []


def _repl_display(value) -> None:
    """The plain Python prompt's display hook: a verdict that printed itself at the call is not printed again."""
    if isinstance(value, Verdict) and getattr(value, "_shown", None) is True:
        import builtins
        builtins._ = value
        return
    _REPL_HOOK[0](value)


def show(verdict: Verdict) -> Verdict:
    """Show ``verdict`` now (display in Jupyter, print in plain Python), once, and return it."""
    shell = _shell()
    if shell is not None and hasattr(shell, "display_pub"):
        from IPython.display import display
        display({"text/plain": repr(verdict)}, raw=True)
        object.__setattr__(verdict, "_shown", getattr(shell, "execution_count", None))
        return verdict
    print(repr(verdict), flush=True)
    object.__setattr__(verdict, "_shown", True)
    if hasattr(sys, "ps1") and not _REPL_HOOK and sys.displayhook is sys.__displayhook__:
        _REPL_HOOK.append(sys.displayhook)
        sys.displayhook = _repl_display
    return verdict


def _bad_level(level) -> Verdict | None:
    if level not in (1, 2, 3) or isinstance(level, bool):
        return Verdict(False, f"hint is 1 (where to look), 2 or 3 (more), got {level!r}.", "error")
    return None


MORE = " (For a stronger hint, call .hint(2) on this verdict, or run the check again with hint=2.)"


def _at_level(verdict: Verdict, level: int, pointer: bool = True) -> Verdict:
    """The verdict's message at hint ``level``, with a pointer to the next level when that one says more."""
    ladder = verdict.ladder or (verdict.message,)
    text = ladder[min(level, len(ladder)) - 1]
    stronger = level == 1 and len(ladder) > 1 and ladder[1] != ladder[0]
    return Verdict(verdict.ok, text + (MORE if stronger and pointer else ""), verdict.mistake, more=stronger,
                   ladder=ladder, error=verdict.error)


def _third(verdict: Verdict, extra: str, error: BaseException | None = None) -> Verdict:
    """A named ``verdict`` with a third level: its second plus ``extra``."""
    return replace(verdict, ladder=verdict.ladder[:2] + (verdict.ladder[-1] + extra,), error=error or verdict.error)


_LEVEL: contextvars.ContextVar[int] = contextvars.ContextVar("hint_level", default=1)


def hint_level() -> int:
    """The hint level of the checker call in progress (1, or 2 and 3 after ``check_…(…, hint=2)``)."""
    return _LEVEL.get()


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer ``wrong(*case)`` with its hints (levels 1 and 2); ``where(case)`` picks the cases on
    which it must match (all when None)."""

    label: str
    hint: str
    wrong: Callable | None = None
    more: str | None = None
    where: Callable[[tuple], bool] | None = None

    def say(self, **fields) -> str:
        text = self.more if hint_level() >= 2 and self.more else self.hint
        return text.format(**fields) if fields else text


def named(m: Mistake | Guess, suffix: str = "", **fields) -> Verdict:
    """The verdict that names mistake ``m`` (``fields`` fill its text), with its hint ladder."""
    first = (m.hint.format(**fields) if fields else m.hint) + suffix
    second = ((m.more.format(**fields) if fields else m.more) + suffix) if m.more else first
    return _at_level(Verdict(False, first, m.label, ladder=(first, second)), hint_level(), pointer=False)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- comparing a result with the expected one ---------------------------------------------------------------------

_NUMBER = (int, float)


def _values_differ(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float = 1e-4) -> float | None:
    """None when a and b (same shape) agree, NaN where NaN included; else the largest difference."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.is_complex() or b.is_complex():
        a, b = torch.view_as_real(a.to(torch.complex128)), torch.view_as_real(b.to(torch.complex128))
    a, b = a.double(), b.double()
    same_nan = torch.isnan(a) == torch.isnan(b)
    a0, b0 = a.nan_to_num(0.0, 1e300, -1e300), b.nan_to_num(0.0, 1e300, -1e300)
    if bool(same_nan.all()) and torch.allclose(a0, b0, atol=atol, rtol=rtol):
        return None
    return (a - b).abs().nan_to_num(math.inf).max().item() if a.numel() else math.inf


def _float64_close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two float64 tensors agree at float64 accuracy (far tighter than a float32 round trip)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    finite = b.isfinite()
    same = a[~finite].nan_to_num(0.0) == b[~finite].nan_to_num(0.0)   # NaN where NaN, the same infinities
    if not bool((a.isfinite() == finite).all()) or not bool(same.all()):
        return True   # infinities and NaN were judged already; only finite values are compared here
    a, b = a[finite], b[finite]
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    return bool(((a - b).abs() <= 1e-9 * scale + 1e-8 * b.abs()).all())


# The shared family: right values, but the wrong dtype, device or precision. No checker writes its own.
DTYPE = Mistake("dtype",
    "{the} has the right values but dtype {got}, expected {want}. Where does a new dtype enter your "
    "computation: a tensor you create, a constant, numpy?",
    more="a tensor created without a dtype (torch.zeros, torch.tensor, a new module's weights) is float32, and "
         "writing into it keeps that dtype. Compute in a wider dtype where you need to, but give back the dtype "
         "that came in: float16 stays float16, and float64 is never lowered to float32.")
DEVICE = Mistake("device",
    "{the} is on {got}, expected {want}, the device of the inputs. Which tensor do you create without saying "
    "where it lives?",
    more="a tensor created without a device lives on the CPU (or, here, wherever you said): create it with the "
         "device of the inputs, or from one of them (zeros_like, new_zeros).")
PRECISION = Mistake("precision",
    "{the} is float64 but holds only float32 accuracy{trip}. Where does your computation pass through float32: "
    "a tensor you create, a module's weights, a .float()?",
    more="numbers that pass through a float32 tensor keep only float32's seven digits, even when the result is "
         "promoted back to float64. Create every tensor of yours in the dtype of the inputs, and convert only "
         "when an input is narrower than float32.")
_FAMILY = {m.label: m for m in (DTYPE, DEVICE, PRECISION)}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _difference(got, want, atol: float, where: str | None = None, strict: bool = True) -> tuple[str, str] | None:
    """None when ``got`` matches ``want``, else (label, message) of the first difference (dtype, device if strict)."""
    the = where or "the result"
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "type", f"{the} should be a tensor, got {type(got).__name__}."
        if got.shape != want.shape:
            shape = f"{the} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            if got.dim() < want.dim() and got.shape[-1:] == want.shape[-1:] and got.numel() == want.numel() \
                    and not got.is_meta and _values_differ(got, want.reshape(got.shape), atol) is None:
                return "flattened", f"{shape}: the right numbers, with the axes before the last merged into one. " \
                                    "Where do you flatten the batch axes, and where do you put them back?"
            return "shape", f"{shape}."
        if got.is_meta != want.is_meta:   # a meta tensor holds no values to compare
            return "device", DEVICE.hint.format(the=the, got=got.device, want=want.device)
        if got.dtype.is_complex != want.dtype.is_complex:
            return "dtype", f"{the} has dtype {got.dtype}, expected {want.dtype}."
        diff = _values_differ(got, want, atol)
        if diff is not None and strict and got.dtype != want.dtype and got.is_floating_point() \
                and want.is_floating_point():   # right to the accuracy of the narrower dtype: right values
            eps = 4 * max(torch.finfo(got.dtype).eps, torch.finfo(want.dtype).eps)
            diff = diff if _values_differ(got, want, max(atol, eps), eps) is not None else None
        if diff is not None and strict and got.dtype != want.dtype:   # dtype first, but the values are wrong too
            return "values", (f"{the} has dtype {got.dtype}, expected {want.dtype}, and its values differ too. "
                             f"Which step of yours makes a {got.dtype} tensor?")
        if diff is not None:
            largest = f"largest difference {diff:.3g}" if math.isfinite(diff) and diff <= 1e30 else \
                "some entries are infinite or NaN where the expected ones are not, or the other way round"
            return "values", f"{the} has the right shape but the values differ ({largest}); compare your steps " \
                             "with the formula."
        if strict and got.dtype != want.dtype:
            return "dtype", DTYPE.hint.format(the=the, got=got.dtype, want=want.dtype)
        if strict and got.device != want.device:
            return "device", DEVICE.hint.format(the=the, got=got.device, want=want.device)
        if strict and want.dtype == torch.float64 and got.dtype == torch.float64 and not _float64_close(got, want):
            g = got.detach().cpu()
            trip = torch.allclose(g, g.float().double(), rtol=0.0, atol=0.0, equal_nan=True)
            return "precision", PRECISION.hint.format(the=the, trip=": every value is a float32 number cast back "
                                                      "(a float32 round trip)" if trip else "")
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
        # structure first, then values, then dtype and device
        return min(found, key=lambda d: (d[0] in ("values", "dtype", "device")) + (d[0] in ("dtype", "device")),
                   default=None)
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
    """Whether ``a`` matches ``b`` in value and shape, in any dtype and on any device."""
    return _difference(a, b, atol, strict=False) is None


# --- what a call did to its inputs ----------------------------------------------------------------------------------

def _tensors_of(x, prefix: str) -> list[tuple[str, torch.Tensor]]:
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


def _changed_in_place(fn: Callable, after: tuple, before: tuple, mutable: Sequence[int | str]) -> str | None:
    """The name of the first input (outside ``mutable``: positions or names) whose tensors ``fn`` changed, or None."""
    names = _argument_names(fn, len(after))
    for i, (a, b) in enumerate(zip(after, before)):
        if i in mutable or names[i] in mutable:
            continue
        ta, tb = _tensors_of(a, names[i]), _tensors_of(b, names[i])
        if len(ta) != len(tb):
            return names[i]
        for (name, x), (_, y) in zip(ta, tb):
            if not _same_tensor(x, y):
                return name
    return None


IN_PLACE = Mistake("in-place",
    "your function changed its input {name} in place: after the call it no longer holds what was passed in, "
    "so the caller's tensor is changed too. Which line of yours writes into a tensor it was given?",
    more="your function changed its input {name} in place. Methods whose name ends in an underscore, "
         "augmented assignments such as += or -= on an input, and assignments through an index all write "
         "into the caller's tensor. Compute a new tensor instead and leave the inputs as they came.")

SHARED = Mistake("shared-parameters",
    "what you built shares its parameter {name} with the module that was passed in: training one would "
    "change the other. Did you copy the numbers, or hand over the same tensor?",
    more="the parameter {name} of what you built is the same storage as a parameter of the module passed "
         "in. Wrapping an existing tensor in a new Parameter, or assigning it, shares it; copy the values "
         "into the new layer's own parameters instead.")


def shared_parameters(built, given) -> list[str]:
    """Names of the parameters of ``built`` (modules, tuples of them) that share storage with a tensor of ``given``."""
    taken = {t.untyped_storage().data_ptr() for _, t in _tensors_of(given, "input") if t.numel()}
    return [name for name, p in _tensors_of(built, "result")
            if isinstance(p, torch.nn.Parameter) and p.numel() and p.untyped_storage().data_ptr() in taken]


# --- running the learner's function ---------------------------------------------------------------------------------

def _fresh(case: tuple) -> tuple:
    try:
        return copy.deepcopy(tuple(case))
    except Exception:  # e.g. a non-leaf tensor: fall back to copying the tensors
        return tuple(c.detach().clone() if isinstance(c, torch.Tensor) else c for c in case)


_NOT_THE_LEARNERS = tuple({pathlib.Path(p).resolve() for p in (
    pathlib.Path(torch.__file__).parent, pathlib.Path(__file__).resolve().parents[1],
    *map(sysconfig.get_paths().get, ("stdlib", "platstdlib", "purelib", "platlib"))) if p})


def _in_library(filename: str) -> bool:
    try:
        path = pathlib.Path(filename).resolve()
    except (OSError, ValueError):
        return False
    return any(path.is_relative_to(folder) for folder in _NOT_THE_LEARNERS)


def _is_stub(e: BaseException) -> bool:
    """A ``NotImplementedError`` raised by a ``raise`` of the learner's own code, not by torch: the stub."""
    if not isinstance(e, NotImplementedError) or e.__traceback__ is None:
        return False
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code   # an instruction that cannot be found (another interpreter): trust the frame
    return not _in_library(code.co_filename) and next(
        (ins.opname == "RAISE_VARARGS" for ins in dis.get_instructions(code) if ins.offset == tb.tb_lasti), True)


def _same_failure(a: BaseException, b: BaseException) -> bool:
    return type(a) is type(b) and a.args == b.args


FINITE = Mistake("finite",
    "masked_fill refused your fill value on the float16 scores: it does not fit in float16. Which value "
    "blocks a score in every dtype?",
    more="float16's largest magnitude is about 65504, so a finite stand-in such as -1e9 (or float32's "
         "smallest number) cannot be written into float16 scores. Block with minus infinity, or with the "
         "smallest number of the scores' own dtype.")


def _overflow_errors() -> list[BaseException]:
    """The errors torch raises for a fill value that does not fit the dtype (the learner's -1e9 in float16)."""
    found = []
    for dtype in (torch.float16, torch.bfloat16):
        try:
            torch.zeros(1, dtype=dtype).masked_fill(torch.ones(1, dtype=torch.bool), -1e300)
        except Exception as e:  # noqa: BLE001 - the error is what is kept
            found.append(e)
    return found


_OVERFLOWS = _overflow_errors()


STUB = Mistake("stub", "the function is still the stub: it stops at `raise NotImplementedError`. Remove that line "
                       "and write your code (in a Find-the-bug exercise, fix the code under it).")
NONE = Mistake("none", "the function returned None: did you forget `return`?")
NOT_CALLABLE = Mistake("not-callable", "pass a function, not a {kind}.")


@dataclass(frozen=True)
class Group:
    """Test inputs judged with their own tolerance (float16 cases need a wider one than float32 cases)."""

    cases: Sequence[tuple]
    atol: float


def variants(wrong: Callable, table: Sequence[tuple], where: Callable[[tuple], bool] | None = None) -> list[Mistake]:
    """The mistakes planted by ``wrong(*case, **switches)``, one per row (label, switches, hint[, more])."""
    return [Mistake(row[0], row[2], functools.partial(wrong, **row[1]), *row[3:], where=where) for row in table]


class Watch(TorchDispatchMode):
    """What one call did: its aten ``ops``, the ``shapes`` they made, the Python functions it ``calls``."""

    def __init__(self):
        super().__init__()
        self.ops, self.shapes, self.calls = set(), [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(func.overloadpacket.__name__)
        self.shapes += [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out

    def run(self, fn: Callable, args: tuple):
        def seen(frame, event, arg):
            if event == "call":
                self.calls.add(frame.f_code.co_qualname)
        previous = sys.getprofile()
        sys.setprofile(seen)
        try:
            with self:
                return fn(*args)
        finally:
            sys.setprofile(previous)


class _Run:
    """The learner's function on every case, each on its own deep copy, run once and remembered."""

    def __init__(self, fn: Callable, mutable: Sequence[int | str], watch: bool = False):
        self.fn, self.mutable, self._seen, self.watch, self.watches = fn, mutable, {}, watch, {}

    def __call__(self, case: tuple) -> tuple[object, BaseException | None, tuple]:
        key = id(case)
        if key not in self._seen:
            args, watch = _fresh(case), Watch()
            self.watches[key] = watch
            try:
                self._seen[key] = (watch.run(self.fn, args) if self.watch else self.fn(*args), None, args)
            except Exception as e:  # noqa: BLE001 - the learner's bug must not crash the checker
                self._seen[key] = (None, e, args)
        return self._seen[key]

    def outputs(self) -> list[tuple[tuple, object, BaseException | None]]:
        """(case, result, exception) for every case of the check, each run once: what a ``diagnose`` reads."""
        return [(case, *self(case)[:2]) for case, _ in self.cases]

    def right(self, case: tuple, atol: float | None = None) -> bool:
        """Whether the cached result of ``case`` has the reference's values (in any dtype); an error is not."""
        got, e, _ = self(case)
        atol = next(a for c, a in self.cases if c is case) if atol is None else atol
        return e is None and got is not None and _close(got, self.reference(*_fresh(case)), atol)


AS_GIVEN = "this is still the function as given"
SAME_AS_GIVEN = "your code still computes what the function as given computes"
_GIVEN = (AS_GIVEN, SAME_AS_GIVEN)


def _code_key(code) -> tuple:
    """What a code object computes, apart from its name, line numbers and docstring (LOAD_METHOD as LOAD_ATTR)."""
    return tuple((i.opname.replace("LOAD_METHOD", "LOAD_ATTR"),
                  _code_key(i.argval) if inspect.iscode(i.argval) else (type(i.argval).__name__, repr(i.argval)))
                 for i in dis.get_instructions(code)), code.co_varnames, code.co_freevars


def _found(m: Mistake, fn: Callable, suffix: str = "") -> Verdict:
    """The verdict naming ``m``, found in ``fn``; "still as given" is said only of code literally unchanged."""
    if AS_GIVEN in m.hint and not (inspect.isfunction(m.wrong) and hasattr(fn, "__code__")
                                   and _code_key(fn.__code__) == _code_key(m.wrong.__code__)):
        m = replace(m, hint=m.hint.replace(*_GIVEN), more=m.more and m.more.replace(*_GIVEN))
    return named(m, suffix)


def _matches_everywhere(m: Mistake, run: _Run, cases: Sequence[tuple[tuple, float]]) -> bool:
    """Whether the learner's function gives ``m``'s output (or its error) on every case where ``m`` runs."""
    seen = False   # it must match where the answer is wrong, not only where a planted copy could not run
    for case, atol in cases:
        if m.where is not None and not m.where(case):
            continue
        try:
            wrong, planted = m.wrong(*_fresh(case)), None
        except Exception as e:  # noqa: BLE001
            wrong, planted = None, e
        got, raised, _ = run(case)
        if planted is not None:
            if raised is not None and not _same_failure(planted, raised):
                return False
            seen = seen or raised is not None
            continue
        if raised is not None or got is None or not _close(got, wrong, atol):
            return False
        seen = seen or m.where is not None or getattr(run, "reference", None) is None or not run.right(case, atol)
    return seen


def describe(x, depth: int = 0) -> str:
    """What an input is, for a learner: a tensor's dtype and shape (and device off the CPU), a module's class."""
    if isinstance(x, torch.Tensor):
        where = "" if x.device.type == "cpu" else f" on {x.device}"
        return f"{str(x.dtype).removeprefix('torch.')} {tuple(x.shape)}{where}"
    if isinstance(x, torch.nn.Module):
        return f"a {type(x).__name__}"
    if isinstance(x, (tuple, list)) and depth < 2:
        inner = ", ".join(describe(i, depth + 1) for i in x[:4]) + (", …" if len(x) > 4 else "")
        return f"({inner})" if isinstance(x, tuple) else f"[{inner}]"
    if isinstance(x, (bool, int, float, str)) or x is None:
        return repr(x) if len(repr(x)) < 30 else type(x).__name__
    return f"a {type(x).__name__}"


def _inputs(fn: Callable, case: tuple) -> str:
    names = _argument_names(fn, len(case))
    return ", ".join(f"{n} {describe(c)}" for n, c in zip(names, case))


_WRAPPERS = ("checked", "wrapper", "wrapped", "inner", "decorated")


def _where_raised(e: BaseException) -> tuple[str, str]:
    """(the line of the learner's code that raised ``e``, what the library below it was given), "" when unknown."""
    frames = list(traceback.walk_tb(e.__traceback__))   # (frame, line number), outermost first
    mine = [i for i, (f, _) in enumerate(frames) if not _in_library(f.f_code.co_filename)]
    if not mine:
        return "", ""
    f, lineno = frames[mine[-1]]
    code = f.f_code
    source = linecache.getline(code.co_filename, lineno).strip()
    name = "your function" if code.co_name == "<lambda>" else f"`{code.co_name}`"
    line = f"line {lineno - code.co_firstlineno + 1} of {name}" + (f": `{source}`" if source else "")
    below = frames[mine[-1] + 1:]
    if below:
        lib = below[0][0]
        code = lib.f_code
        named_ = code.co_argcount + code.co_kwonlyargcount
        given = [f"{n} {describe(lib.f_locals[n])}" for n in code.co_varnames[:named_]
                 if n in lib.f_locals and n != "self"]
        if code.co_flags & inspect.CO_VARARGS:   # a wrapper's *args: what the learner's call handed over
            given += [describe(v) for v in lib.f_locals.get(code.co_varnames[named_], ())]
        who = f"`{code.co_name}`" if not code.co_name.startswith("_") and code.co_name not in _WRAPPERS else \
            "the library"
        return line, f"{who} raised it" + (f"; you passed {', '.join(given[:6])}" if given else "")
    tensors = [(n, v) for n, v in f.f_locals.items() if isinstance(v, torch.Tensor)]
    given = ", ".join(f"{n} {describe(v)}" for n, v in tensors[:6])
    return line, (f"at that line your tensors are {given}" if given else "")


def _explain_error(e: Exception, case: tuple, mistakes: Sequence[Mistake], run: _Run,
                   cases: Sequence[tuple[tuple, float]]) -> Verdict:
    """The learner's exception, with its case, inputs and line; a known mistake that fails the same way names it."""
    public = next(c.__name__ for c in type(e).__mro__ if not c.__name__.startswith("_"))   # never a checker's own
    raised = f"your function raised {public}: {e}"
    if isinstance(e, NotImplementedError):
        raised += " (raised inside torch, not by a `raise` in your code)"
    number = next((i for i, (c, _) in enumerate(cases) if c is case), 0)
    line, given = _where_raised(e)
    where = f" It raised on test case {number + 1} of {len(cases)} (inputs: {_inputs(run.fn, case)})" + (
        f", at {line}" if line else "") + "."
    if any(_same_failure(e, o) for o in _OVERFLOWS):
        return _third(named(FINITE, f" ({raised})"), where, e)
    ours = type(e).__module__.startswith(__name__.rpartition(".")[0])   # the checker's own guard: no repeat
    for m in mistakes:
        if m.wrong is None:
            continue
        try:
            outside = m.where is not None and not m.where(case)   # a mistake of a subset the raising case is not in
            if not outside:
                m.wrong(*_fresh(case))
        except Exception as planted:  # noqa: BLE001 - compared with the learner's error below
            outside = _same_failure(planted, e)
        if outside and _matches_everywhere(m, run, cases):
            return _third(_found(m, run.fn, "" if ours else f" ({raised})"), where, e)
    first = raised.rstrip(".") + "." + where
    second = first + (f" {given[0].upper()}{given[1:]}." if given else "")
    return Verdict(False, first, "error", ladder=(first, second), error=e)


def _smallest_case(run: _Run, reference: Callable, atol: float) -> str:
    """The smallest case (fewest input numbers) already run whose result differs: its inputs and first entries."""
    found = []
    for case, _ in run.cases:
        got, e, _ = run._seen.get(id(case), (None, None, None))
        if e is not None or got is None:
            continue
        try:
            want = reference(*_fresh(case))
        except Exception:  # noqa: BLE001 - a case the reference cannot run shows nothing
            continue
        shown = _entries(got, want, atol)
        if shown:
            size = sum(t.numel() for _, t in _tensors_of(case, "x"))
            found.append((size, len(found), case, shown))
    if not found:
        return ""
    _, _, case, shown = min(found, key=lambda f: f[:2])
    return f" The smallest test case that differs has inputs {_inputs(run.fn, case)}; {shown}."


def _entries(got, want, atol: float, where: str = "") -> str:
    if isinstance(want, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(want):
        for i, (g, w) in enumerate(zip(got, want)):
            if (text := _entries(g, w, atol, f" of element {i}")):
                return text
        return ""
    if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)) or got.shape != want.shape or \
            got.is_complex() or want.is_complex() or got.is_meta:
        return ""
    a, b = got.detach().cpu().double(), want.detach().cpu().double()
    bad = ~((a - b).abs() <= atol + 1e-4 * b.abs()) & ~(a.isnan() & b.isnan())
    if not bool(bad.any()):
        return ""
    shown = [f"at {i}{where} yours is {a[i].item():.4g}, expected {b[i].item():.4g}"
             for i in map(tuple, bad.nonzero()[:3].tolist())]
    more = int(bad.sum()) - len(shown)
    return "; ".join(shown) + (f" (and {more} more entries differ)" if more > 0 else "")


def judge(fn: Callable, cases: Sequence[tuple] | Sequence[Group], reference: Callable,
          mistakes: Sequence[Mistake] = (), *, success: str = "matches the library on every test input.",
          atol: float = 1e-5, diagnose: Callable[[Verdict], Verdict | None] | None = None,
          mutable: Sequence[int] = (), properties: Callable | None = None, watch: bool = False) -> Verdict:
    """Compare ``fn(*case)`` with ``reference(*case)`` for every case; explain the first difference. Inputs named in
    ``mutable`` may change. ``diagnose(verdict[, run])`` may improve a rejection from ``run.outputs()``;
    ``properties(case, result, inputs, watch)`` may reject a result before the comparison (or alone, without
    ``reference``)."""
    if not callable(fn):
        return named(NOT_CALLABLE, kind=type(fn).__name__)
    groups = cases if cases and all(isinstance(c, Group) for c in cases) else [Group(cases, atol)]
    every = [(case, g.atol) for g in groups for case in g.cases]
    run = _Run(fn, mutable, watch)
    run.cases, run.reference = every, reference
    verdict = _judge_cases(run, every, reference, mistakes, success, properties)
    if verdict.ok or diagnose is None:
        return verdict
    try:
        takes_results = len(inspect.signature(diagnose).parameters) > 1
        return (diagnose(verdict, run) if takes_results else diagnose(verdict)) or verdict
    except Exception:  # noqa: BLE001 - the learner's code ran once already; keep the first verdict
        return verdict


RIGHT_VALUES = "the values are right"   # how a property's verdict about the method, not the numbers, begins


def _judge_cases(run: _Run, cases: Sequence[tuple[tuple, float]], reference: Callable | None,
                 mistakes: Sequence[Mistake], success: str, properties: Callable | None = None) -> Verdict:
    pending = None
    for case, atol in cases:
        got, e, args = run(case)
        if e is not None:
            if _is_stub(e):
                return named(STUB)
            return _explain_error(e, case, mistakes, run, cases)
        if got is None:
            return named(NONE)
        changed = _changed_in_place(run.fn, args, _fresh(case), run.mutable)
        if changed is not None:
            return named(IN_PLACE, name=changed)
        if properties is not None:
            try:
                verdict = properties(case, got, args, run.watches[id(case)])
            except Exception:  # noqa: BLE001 - a property that cannot be read says nothing
                verdict = None
            if verdict is not None and verdict.message.startswith(RIGHT_VALUES) and reference is not None:
                pending, verdict = pending or verdict, None   # said once every case's values are right
            if verdict is not None:
                return verdict
        shared = shared_parameters(got, args)
        if shared:
            return named(SHARED, name=shared[0].removeprefix("result."))
        if reference is None:
            continue
        want = reference(*_fresh(case))
        difference = _difference(got, want, atol)
        if difference is None:
            continue
        # right values in the wrong dtype or device: no planted mistake (each one a wrong value) explains that
        right_values = difference[0] in _FAMILY and _close(got, want, atol)
        for m in mistakes if not right_values else ():
            if m.wrong is not None and _matches_everywhere(m, run, cases):
                return _third(_found(m, run.fn), _smallest_case(run, reference, atol))
        label, message = difference
        if label == "type" and isinstance(want, torch.Tensor):
            message = f"expected a tensor, got {type(got).__name__}."
        first = _entries(got, want, atol) if label == "values" else ""
        second = message + (f" First differences: {first}." if first else "") + (
            f" {_FAMILY[label].more[0].upper()}{_FAMILY[label].more[1:]}" if label in _FAMILY else "")
        smallest = _smallest_case(run, reference, atol) if label in ("values", "precision") else ""
        verdict = Verdict(False, message, label, ladder=(message, second, message + smallest if smallest else second))
        return _at_level(verdict, hint_level(), pointer=False)
    return pending or Verdict(True, success)


# --- predictions ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Guess:
    """A typical wrong prediction ``value``: ``hint`` says which part of the count is off, ``more`` why."""

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
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:.4g}"


PREDICT_STUB = Mistake("stub", "write your prediction first: replace `...` with a number, then run the cell.")
PREDICT_NONE = Mistake("stub", "your prediction is None: give it a number, then run the cell.")
NOT_A_NUMBER = Mistake("type", "a prediction is one number{quotes}, got {got}.")


def judge_number(value, want: float, guesses: Sequence[Guess] = (), *, rtol: float = 0.1,
                 success: str = "your prediction matches the measurement.",
                 again: str = "redo the reasoning step by step and predict again.") -> Verdict:
    """Compare a predicted number with the measured ``want`` within ``rtol``, naming the nearest of ``guesses``."""
    if value is ... or value is None:
        return named(PREDICT_STUB if value is ... else PREDICT_NONE)
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
_GENERAL_OF = {"function": (STUB, NONE, NOT_CALLABLE, IN_PLACE, SHARED, FINITE, DTYPE, DEVICE, PRECISION),
               "predict": (PREDICT_STUB, PREDICT_NONE, NOT_A_NUMBER)}
_GENERAL = tuple(m for ms in _GENERAL_OF.values() for m in ms)
# How deep in checker calls we are: only the outermost shows its verdict.
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("checker_depth", default=0)


def checker(fn: Callable[..., Verdict] | None = None, *, kind: str = "function",
            mistakes: Sequence[Mistake | Guess] = ()):
    """Wrap an exercise checker: it never raises, keeps the random state, takes ``hint=``, shows its verdict at the
    outermost call only and remembers it for :func:`progress`; ``kind`` and ``mistakes`` are kept on it."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if fn is None:
        return functools.partial(checker, kind=kind, mistakes=mistakes)

    @functools.wraps(fn)
    def wrapped(*args, hint: int = 1, **kwargs) -> Verdict:
        verdict, outermost = _bad_level(hint), _DEPTH.get() == 0
        if verdict is None:
            depth, token = _DEPTH.set(_DEPTH.get() + 1), _LEVEL.set(hint)
            with torch.random.fork_rng(devices=[]):
                try:
                    verdict = fn(*args, **kwargs)
                except Exception as e:  # a checker's own failure must not look like the learner's
                    verdict = Verdict(False, f"the checker could not judge this answer ({type(e).__name__}: {e}).",
                                      "error")
                finally:
                    _LEVEL.reset(token)
                    _DEPTH.reset(depth)
            if not outermost:
                return verdict
            verdict = _at_level(verdict, hint)
        _LAST[fn.__name__] = verdict
        return show(verdict)

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

