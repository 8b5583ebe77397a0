"""Small functions the tests share: where the course lives, its configuration, and how a checker's verdict on a
planted mistake is judged. Each is defined here once; tests import them from this module."""

from __future__ import annotations

import html.parser
import io
import pathlib
import re
import tokenize

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def notebooks() -> list[pathlib.Path]:
    """Every notebook of the book, in name order."""
    return sorted(p for p in BOOK.glob("*.ipynb"))


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repo_url() -> str:
    """The repository URL: kept in _config.yml only."""
    return config()["repository"]["url"]


def rejects(call, *fragments, kind=ValueError) -> None:
    """``call()`` raises ``kind`` with every fragment in its message."""
    with pytest.raises(kind) as e:
        call()
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


def assert_accepted(verdict) -> None:
    """A checker's verdict on a correct answer."""
    assert verdict.ok and verdict.mistake is None, verdict
    assert repr(verdict).startswith("✓ correct")


def assert_named(verdict, label: str, *fragments: str) -> None:
    """A checker's verdict on a planted mistake: rejected, recognised as that mistake, and (when ``fragments``
    are given) saying each of them."""
    assert not verdict.ok and verdict.mistake == label, (label, verdict)
    assert repr(verdict).startswith("✗ not yet")
    missing = [f for f in fragments if f not in verdict.message]
    assert not missing, (missing, verdict)


def assert_each_mistake_named(check, mistakes, exact: bool = True) -> None:
    """The checker names every planted mistake of its table as itself, with that mistake's own first hint and the
    pointer to the second level where there is one: the whole message when ``exact``, else its start and end
    (for checkers that add what they measured in between)."""
    from attnlib.checks._core import MORE

    for m in mistakes:
        verdict = check(m.wrong)
        assert_named(verdict, m.label)
        end = MORE if m.more else ""
        if exact:
            assert verdict.message == m.hint + end, (m.label, verdict)
        else:
            assert verdict.message.startswith(m.hint) and verdict.message.endswith(end), (m.label, verdict)


# What counts as a hint that gives the fix away (tests/test_exercise_hints.py): a backticked expression of the
# solution's code, or a run of HINT_RUN of its tokens in a row, that the learner does not already have.
HINT_RUN = 5
TOKEN = re.compile(r"\w+|\*\*|//|[-+*/@%<>=!]=?|\S")
BACKTICKED = re.compile(r"`([^`]+)`")


def _tokens(text: str) -> list[str]:
    """The tokens of code or prose alike; both quote characters count as one."""
    return TOKEN.findall(text.replace("'", '"'))


def _code_tokens(source: str) -> list[str]:
    """The tokens of Python code without its comments (a comment is prose, not the fix)."""
    try:
        kept = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        kept = [source]
    return _tokens(" ".join(kept))


def _runs(ts: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(ts[i:i + n]) for i in range(len(ts) - n + 1)}


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def hint_leak(text: str, solution: str, known_text: str = "", known_code: str = "") -> str | None:
    """The part of a hint ``text`` that is ``solution``'s code and not already in what the learner has (the
    exercise's ``known_text`` and the stub's ``known_code``), or None."""
    secret = _code_tokens(solution)
    known = _tokens(known_text) + ["<>"] + _code_tokens(known_code)
    secret_runs, known_runs = _runs(secret, HINT_RUN), _runs(known, HINT_RUN)
    for run in _runs(_tokens(text), HINT_RUN):
        if run in secret_runs and run not in known_runs:
            return " ".join(run)
    for span in BACKTICKED.findall(text):
        ts = _tokens(span)
        if len(ts) >= 2 and any(not t.isidentifier() for t in ts) and _contains(secret, ts) \
                and not _contains(known, ts):
            return span
    return None


def assert_named_at_both_levels(check, m) -> None:
    """``check(m.wrong)`` names ``m`` with its first hint and points to ``hint=2``, which names it with its second."""
    from attnlib.checks._core import AS_GIVEN, MORE, SAME_AS_GIVEN

    first, second = check(m.wrong), check(m.wrong, hint=2)
    assert_named(first, m.label)
    assert_named(second, m.label)
    # a planted copy of a mistake is not the function as given: it is told it computes the same
    hint, more = (text.replace(AS_GIVEN, SAME_AS_GIVEN) for text in (m.hint, m.more))
    assert first.message.startswith(hint) and first.message.endswith(MORE), first
    assert second.message.startswith(more) and MORE not in second.message, second


def assert_no_hint_quotes(check, solutions) -> None:
    """No first-level hint of ``check`` quotes the code of any of the functions ``solutions`` (correct answers
    other than the book's, which tests/test_exercise_hints.py covers)."""
    import inspect

    for m in check.mistakes:
        for f in solutions:
            assert hint_leak(m.hint, inspect.getsource(f)) is None, (m.label, f.__name__)


def stub(*args):
    """An exercise's stub, untouched: the learner edition's function body is `raise NotImplementedError`."""
    raise NotImplementedError


def assert_mistakes_distinct(case: tuple, reference, mistakes) -> None:
    """On ``case``, the answer and every planted mistake give pairwise different outputs, so each can be named."""
    from attnlib.checks._core import _close

    outs = [reference(*case)] + [m.wrong(*case) for m in mistakes]
    for i in range(len(outs)):
        for j in range(i + 1, len(outs)):
            assert not _close(outs[i], outs[j], 1e-5), (i, j)


class HtmlParts(html.parser.HTMLParser):
    """Tags, attributes and the text of every <script> of an HTML fragment."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = dict(attrs)
            self.scripts.append((self._in, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def html_parts(html: str) -> HtmlParts:
    p = HtmlParts()
    p.feed(html)
    return p
