"""Reading code that nobody here wrote: an installed function's source, one of its lines found, and the function
run with that line recorded, changed or taken out.

The capstone hands the learner the source of GPT-2's attention as the installed ``transformers`` has it. A line
that the learner quotes is confirmed by behaviour, not by comparing strings: :func:`find_line` finds where it
stands, and :func:`line_changed` runs the function with a probe after that line (which sees, and may replace,
what the line assigns), with the line taken out, or with another line in its place. The change swaps the code
of the function object itself, so every caller sees it (a default argument, a dispatch table, a decorator's
wrapper), and it is undone when the ``with`` block ends, whatever happens inside.

This is a notebook and checker helper: nothing in the library's models uses it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import itertools
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ._validate import _integer, _show, boundary, require_flags

__all__ = ["Place", "source_lines", "show_code", "find_line", "line_changed"]

_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef, ast.Match) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _function(fn, name: str = "fn") -> types.FunctionType:
    """The plain Python function behind ``fn``: a method's function, a decorator's wrapped original."""
    target = inspect.unwrap(getattr(fn, "__func__", fn))
    if not isinstance(target, types.FunctionType):
        shown = repr(fn) if len(repr(fn)) <= 48 else repr(fn)[:45] + "..."
        raise TypeError(f"{name} must be a function written in Python, got {shown} ({type(fn).__name__})")
    return target


def _functions(functions, name: str = "functions") -> list[types.FunctionType]:
    if isinstance(functions, (str, bytes)) or not isinstance(functions, (list, tuple)) or not functions:
        raise TypeError(f"{name} must be a non-empty list of functions (e.g. gpt2_sources()), got {_show(functions)}")
    return [_function(fn, f"{name}[{i}]") for i, fn in enumerate(functions)]


def _source_lines_args(fn, docstring):
    _function(fn)
    docstring, = require_flags(docstring=docstring)
    return {"docstring": docstring}


def _show_code_args(fn, replace):
    target = _function(fn)
    if replace is not None and not (isinstance(replace, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                      for k, v in replace.items())):
        raise TypeError(f"replace must be a dict of line → new line (strings), or None, got {_show(replace)}")
    lines = {line.strip() for line in _tree(target)[0]}
    absent = [old for old in replace or {} if old.strip() not in lines]
    if absent:
        raise ValueError(f"replace's keys must be lines of {target.__qualname__}'s source, compared without their "
                         f"indentation: {target.__qualname__} has no line {absent[0].strip()!r}")


def _find_line_args(line, functions):
    if not isinstance(line, str):
        raise TypeError(f"line must be a str, got {_show(line)}")
    _functions(functions)


def _line_changed_args(places, probe, delete, new):
    delete, = require_flags(delete=delete)   # delete=1 is not True
    if new is not None and not isinstance(new, str):
        raise TypeError(f"new must be a line of code (a str) or None, got {_show(new)}")
    if sum((probe is not None, delete, new is not None)) != 1:
        raise ValueError("line_changed needs exactly one of probe=, delete=True, new=")
    if probe is not None and not callable(probe):
        raise TypeError(f"probe must be callable, got {type(probe).__name__}")
    if isinstance(places, (str, bytes)) or not isinstance(places, (list, tuple)) or not places \
            or not all(isinstance(p, Place) for p in places):
        raise TypeError(f"places must be a non-empty list of Place (from find_line), got {_show(places)}")
    for p in places if new is not None else ():
        lines, _, _ = _tree(p.fn)
        try:
            ast.parse(textwrap.dedent("".join(_replaced(lines, {p.line}, new))))
        except SyntaxError as e:
            raise ValueError(f"new must be one line of valid Python in place of line {p.line} of "
                             f"{p.fn.__qualname__}, got {new!r} ({e.msg})") from None
    return {"delete": delete}


def _replaced(lines: list[str], numbers: set[int], new: str) -> list[str]:
    """A copy of a function's source lines with each line of ``numbers`` replaced by ``new`` (same indentation)."""
    lines = list(lines)
    for n in numbers:
        old = lines[n - 1]
        lines[n - 1] = old[: len(old) - len(old.lstrip())] + new.strip() + "\n"
    return lines


def _tree(fn: types.FunctionType) -> tuple[list[str], int, ast.FunctionDef]:
    """(source lines, first line number in the file, the parsed definition) of a function. Read once per function
    (finding a function's source tokenizes its file): the lines and the tree are shared, never to be changed."""
    return _source(fn, fn.__code__.co_filename, fn.__code__.co_firstlineno)


@functools.lru_cache(maxsize=64)
def _source(fn: types.FunctionType, filename: str, firstlineno: int) -> tuple[list[str], int, ast.AST]:
    try:
        lines, first = inspect.getsourcelines(fn)
    except OSError:
        raise TypeError(f"fn must be a function whose source is in a file, got {fn.__qualname__}, whose source "
                        "cannot be found (typed at a prompt, or made by exec)") from None
    try:
        definition = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except SyntaxError:   # a lambda inside a longer statement: its lines are not a statement of their own
        definition = None
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TypeError(f"fn must be a function defined by a def statement, whose source can be read on its own, "
                        f"got {fn.__qualname__}, whose source lines are {lines[0].strip()[:48]!r}")
    return lines, first, definition


def _docstring_span(definition: ast.FunctionDef) -> range:
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return range(body[0].lineno, body[0].end_lineno + 1)
    return range(0)


@boundary(_source_lines_args)
def source_lines(fn, *, docstring: bool = False) -> list[str]:
    """The lines of ``fn``'s source as installed, dedented; the docstring left out unless ``docstring``."""
    fn = _function(fn)
    lines, _, definition = _tree(fn)
    skip = () if docstring else _docstring_span(definition)
    kept = [line for number, line in enumerate(lines, start=1) if number not in skip]
    return textwrap.dedent("".join(kept)).rstrip("\n").split("\n")


def _where(fn: types.FunctionType) -> str:
    """``package/module.py, Qualified.name``: where a function lives, without the paths of this machine."""
    return f"{fn.__module__.replace('.', '/')}.py, {fn.__qualname__}"


@boundary(_show_code_args)
def show_code(fn, *, replace: dict[str, str] | None = None):
    """Display the installed source of ``fn`` (docstring left out) as a highlighted code block, headed by the file
    and the function it comes from. ``replace`` maps a line (compared without its indentation) to the line shown
    in its place: a copy of the function with a planted change."""
    from IPython.display import Markdown

    target = _function(fn)
    lines = source_lines(target)
    for old, new in (replace or {}).items():
        hits = [i for i, line in enumerate(lines) if line.strip() == old.strip()]
        for i in hits:
            lines[i] = lines[i][: len(lines[i]) - len(lines[i].lstrip())] + new.strip()
    text = "\n".join(lines)
    return Markdown(f"```python\n# {_where(target)}\n{text}\n```")


@dataclass(frozen=True)
class Place:
    """Where a line stands: the function, and its line number (1 = the first line of the function's source)."""

    fn: types.FunctionType
    line: int

    def __post_init__(self):
        """A Python function and one of its source lines, 1 … its length (never counted from the end)."""
        fn = _function(self.fn)
        n = len(_tree(fn)[0])
        line = _integer(self.line, "line", f"a line number 1..{n}")
        if not 1 <= line <= n:
            raise ValueError(f"line must be a line of {fn.__qualname__}, 1..{n}, got {line}")
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "line", line)

    @property
    def statement(self) -> ast.stmt | None:
        """The statement that starts at this line, or None (a continuation, a comment, a blank line)."""
        _, _, definition = _tree(self.fn)
        return next((s for s in ast.walk(definition) if isinstance(s, ast.stmt) and s.lineno == self.line
                     and s is not definition), None)

    @property
    def simple(self) -> bool:
        """Whether a simple statement (an assignment, a call, a return) starts here: not a block's header."""
        s = self.statement
        return s is not None and not isinstance(s, _COMPOUND)

    def __str__(self) -> str:
        return f"{self.fn.__qualname__}, line {self.line}"


@boundary(_find_line_args)
def find_line(line: str, functions: Sequence[Callable]) -> list[Place]:
    """Every place where one of ``functions`` has ``line``, compared without the indentation on either side."""
    wanted = line.strip()
    places = []
    for fn in functions:
        target = _function(fn)
        lines, _, _ = _tree(target)
        places += [Place(target, number) for number, text in enumerate(lines, start=1)
                   if wanted and text.strip() == wanted]
    return places


PROBE = "__attnlib_probe__"
_COUNTER = itertools.count()


def _assigned_names(s: ast.stmt) -> list[str]:
    """The plain names a statement assigns (``a, b = …``, ``a += …``); attributes and items are not names."""
    targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AugAssign,
                                                                                        ast.AnnAssign)) else []
    names: list[str] = []
    for t in targets:
        for node in ast.walk(t):
            if isinstance(node, ast.Name) and node.id not in names:
                names.append(node.id)
    return names


class _Change(ast.NodeTransformer):
    """Rewrite the simple statements that start at ``lines``: a probe after them, or nothing in their place."""

    def __init__(self, lines: set[int], probe_name: str | None, delete: bool):
        self.lines, self.probe_name, self.delete = lines, probe_name, delete

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                new = [out for s in block for out in self._rewrite(s)]
                setattr(node, field, new or [ast.Pass()])
        return node

    def _rewrite(self, s: ast.stmt) -> list[ast.stmt]:
        if s.lineno not in self.lines or isinstance(s, _COMPOUND):
            return [s]
        if self.delete:
            return [ast.copy_location(ast.Pass(), s)]
        probe = ast.Name(self.probe_name, ast.Load())
        if isinstance(s, ast.Return) and s.value is not None:
            call = ast.Call(probe, [ast.Constant(s.lineno), ast.Tuple([s.value], ast.Load())], [])
            return [ast.copy_location(ast.Return(ast.Subscript(call, ast.Constant(0), ast.Load())), s)]
        names = _assigned_names(s)
        if not names:
            call = ast.Call(probe, [ast.Constant(s.lineno), ast.Tuple([], ast.Load())], [])
            return [s, ast.copy_location(ast.Expr(call), s)]
        values = ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())
        call = ast.Call(probe, [ast.Constant(s.lineno), values], [])
        again = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], call)
        return [s, ast.copy_location(again, s)]


def _compiled(fn: types.FunctionType, lines: list[str], first: int, change: _Change | None) -> types.CodeType:
    """The code object of ``fn`` rebuilt from ``lines`` (its source, maybe edited), with ``change`` applied."""
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if change is not None:
        change.visit(tree)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first - 1)        # tracebacks point at the installed file's own lines
    module = compile(tree, fn.__code__.co_filename, "exec")
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    if code.co_freevars != fn.__code__.co_freevars:
        raise ValueError(f"cannot change {fn.__qualname__}: it reads variables of an enclosing function")
    return code


@boundary(_line_changed_args)
@contextlib.contextmanager
def line_changed(places: Sequence[Place], *, probe: Callable | None = None, delete: bool = False,
                 new: str | None = None) -> Iterator[None]:
    """Run the functions of ``places`` with the statement at each place changed, for the ``with`` block only.

    Exactly one of: ``probe(line, values) -> values`` is called right after the statement with the values of the
    names it assigns (a ``return`` passes its value), and what it returns is assigned to them again;
    ``delete=True`` takes the statement out; ``new`` replaces the line by another one (same indentation).
    """
    by_function: dict[types.FunctionType, set[int]] = {}
    for p in places:
        by_function.setdefault(p.fn, set()).add(p.line)
    name = f"{PROBE}{next(_COUNTER)}"
    swapped: list[tuple[types.FunctionType, types.CodeType]] = []
    added: list[dict] = []
    try:
        for fn, numbers in by_function.items():
            lines, first, _ = _tree(fn)
            if new is not None:
                code = _compiled(fn, _replaced(lines, numbers, new), first, None)
            else:
                code = _compiled(fn, lines, first, _Change(numbers, name, delete))
            if probe is not None and name not in fn.__globals__:
                fn.__globals__[name] = probe
                added.append(fn.__globals__)
            swapped.append((fn, fn.__code__))
            fn.__code__ = code
        yield
    finally:
        for fn, code in reversed(swapped):
            fn.__code__ = code
        for namespace in added:
            namespace.pop(name, None)
