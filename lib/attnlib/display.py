"""Notebook display helpers: the library's own source, shown as the page's listing.

``runtime.py`` sets a notebook up (seeds, threads, device); what a page *shows* lives here.
"""

from __future__ import annotations

import inspect
import re

from ._validate import boundary, require_flags

__all__ = ["show_source"]

_DECORATOR = re.compile(r"^[ \t]*@boundary\([^()]*\)[ \t]*\n", re.MULTILINE)


# ---------------------------------------------------------------------------------------------- argument specs
# Each public entry point below names its spec by reference, @boundary(_x_args), so a spec sits above it; the
# spec checks a call that comes in from outside the library and may return normalised values (ints, bools)
# for the names the function takes. Tensors are made contiguous in one place, by _validate.boundary.


def _show_source_args(obj, boundary):
    target = inspect.unwrap(obj) if callable(obj) else obj
    if not (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isclass(target)
            or inspect.ismodule(target)):
        shown = repr(obj) if len(repr(obj)) <= 48 else repr(obj)[:45] + "..."
        raise TypeError(f"show_source needs a function, method, class or module written in Python, got {shown} "
                        f"({type(obj).__name__})")
    boundary, = require_flags(boundary=boundary)
    return {"boundary": boundary}


@boundary(_show_source_args)
def show_source(obj, *, boundary: bool = False):
    """Display the library's own source of ``obj`` (a function, method, class or module) as a highlighted code
    block, never a pasted copy. The ``@boundary(…)`` line that checks a public function's arguments is left out
    (the computation is the listing), unless ``boundary=True``: the page that explains the boundary shows it."""
    from IPython.display import Markdown

    source = inspect.getsource(obj)
    if not boundary:
        source = _DECORATOR.sub("", source)
    return Markdown(f"```python\n{source.rstrip()}\n```")
