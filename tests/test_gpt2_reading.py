"""Reading code nobody here wrote (attnlib.reading) and GPT-2's attention read with the four questions
(attnlib.gpt2_reading): a line is found where it stands, a function runs with one line recorded, changed or taken
out and comes back unchanged afterwards, the four checks pass on GPT-2 and each planted copy fails exactly one.

GPT-2 is built from a GPT2Config at random init, never downloaded.
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest
import torch

from attnlib.reading import Place, find_line, line_changed, show_code, source_lines
from helpers import rejects


def sample(x, n: int = 2):
    """A function to read: its docstring is left out of what is shown."""
    y = x * n                      # double it
    y += 1
    if y > 100:
        return -1
    z, w = y, y - 1
    return z + w


def test_a_line_is_found_by_its_text_without_indentation():
    [place] = find_line("  y += 1 ", [sample])
    assert place.line == 4 and place.simple and str(place) == "sample, line 4"
    assert find_line("y+=1", [sample]) == [] and find_line("", [sample]) == []
    [header] = find_line("if y > 100:", [sample])
    assert not header.simple
    assert not find_line("def sample(x, n: int = 2):", [sample])[0].simple
    assert find_line("# double it", [sample]) == []             # a comment is not a line of its own here
    assert len(find_line("return z + w", [sample, sample])) == 2


def test_the_source_is_shown_as_installed_without_its_docstring():
    lines = source_lines(sample)
    assert lines[0] == "def sample(x, n: int = 2):" and not any("left out" in line for line in lines)
    assert any("left out" in line for line in source_lines(sample, docstring=True))
    shown = show_code(sample).data
    assert shown.startswith("```python\n# test_gpt2_reading.py, sample\n") and "    y += 1" in shown
    planted = show_code(sample, replace={"y += 1": "y += 2"}).data
    assert "    y += 2" in planted and "y += 1" not in planted
    rejects(lambda: show_code(sample, replace={"y += 3": "y"}), "has no line 'y += 3'")


def test_a_probe_sees_and_replaces_what_a_line_assigns_and_returns():
    seen = []

    def probe(line, values):
        seen.append((line, values))
        return tuple(v * 10 for v in values) if line == 7 else values

    assert sample(3) == 13
    with line_changed(find_line("z, w = y, y - 1", [sample]), probe=probe):
        assert sample(3) == 70 + 60
    assert seen == [(7, (7, 6))]
    with line_changed(find_line("return z + w", [sample]), probe=lambda line, values: (values[0] + 0.5,)):
        assert sample(3) == 13.5
    assert sample(3) == 13                                      # back as it was


def test_a_line_is_taken_out_or_replaced_for_the_with_block_only():
    code = sample.__code__
    with line_changed(find_line("y += 1", [sample]), delete=True):
        assert sample(3) == 11
    with line_changed(find_line("y += 1", [sample]), new="y -= 1"):
        assert sample(3) == 9
    assert sample.__code__ is code and sample(3) == 13


def test_the_function_comes_back_even_when_the_block_raises():
    code = sample.__code__
    with pytest.raises(ZeroDivisionError), line_changed(find_line("y += 1", [sample]), delete=True):
        sample(3) / 0
    assert sample.__code__ is code
    assert not any(name.startswith("__attnlib_probe__") for name in sample.__globals__)


def test_line_changed_takes_exactly_one_change_and_places_from_find_line():
    places = find_line("y += 1", [sample])
    for kwargs in ({}, {"delete": True, "new": "y"}, {"probe": print, "delete": True}):
        with pytest.raises(ValueError, match="exactly one of"), line_changed(places, **kwargs):
            pass
    with pytest.raises(TypeError, match="probe must be callable"), line_changed(places, probe=3):
        pass
    with pytest.raises(TypeError, match="non-empty list of Place"), line_changed([], delete=True):
        pass
    with pytest.raises(TypeError, match="non-empty list of Place"), line_changed(["y += 1"], delete=True):
        pass
    rejects(lambda: find_line(3, [sample]), "line must be a str", kind=TypeError)
    rejects(lambda: find_line("y", [len]), "a function written in Python", kind=TypeError)


def test_a_function_that_reads_an_enclosing_scope_is_not_changed():
    n = 3

    def inner(x):
        y = x + n
        return y

    with pytest.raises(ValueError, match="enclosing function"), line_changed(find_line("y = x + n", [inner]),
                                                                            delete=True):
        pass
    assert inner(1) == 4


def test_a_decorated_method_is_changed_behind_its_wrapper():
    import functools

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper

    class Thing:
        @logged
        def value(self, x):
            y = x + 1
            return y

    [place] = find_line("y = x + 1", [Thing.value])
    assert place.fn is inspect.unwrap(Thing.value)
    with line_changed([place], new="y = x + 2"):
        assert Thing().value(1) == 3
    assert Thing().value(1) == 2
    assert isinstance(place, Place)


# --- GPT-2 ----------------------------------------------------------------------------------------------------------

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed")


@pytest.fixture(scope="module")
def models():
    from attnlib.gpt2_reading import tiny_gpt2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {torch.float64: tiny_gpt2(), torch.float32: tiny_gpt2(seed=3, dtype=torch.float32, vocab_size=54)}
    torch.set_num_threads(threads)


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpt2_passes_its_four_checks(models, dtype):
    from attnlib.gpt2_reading import ask_gpt2

    answers = ask_gpt2(models[dtype])
    assert answers.failed() == [] and all(answers.passed.values())
    assert str(answers).count("✓") == 4 and all(len(line) <= 88 for line in str(answers).split("\n"))


@needs_transformers
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("letter, question", [("A", 1), ("B", 3), ("C", 2), ("D", 1)])
def test_each_planted_copy_fails_exactly_one_check_and_leaves_when_done(models, dtype, letter, question):
    from attnlib.gpt2_reading import ask_gpt2, gpt2_sources, planted_bug

    codes = [inspect.unwrap(fn).__code__ for fn in gpt2_sources()]
    with planted_bug(letter):
        answers = ask_gpt2(models[dtype])
    assert answers.failed() == [question], answers
    assert [inspect.unwrap(fn).__code__ for fn in gpt2_sources()] == codes
    assert ask_gpt2(models[dtype]).failed() == []


@needs_transformers
def test_each_planted_line_stands_in_the_installed_source_and_is_shown_changed():
    from attnlib.gpt2_reading import PLANTED, _planted, show_planted

    for letter, (_, old, new) in PLANTED.items():
        fn, _, _ = _planted(letter)
        assert len(find_line(old, [fn])) == 1, letter
        shown = show_planted(letter).data
        assert new in shown and old not in shown, letter
        assert "/work/" not in shown and "site-packages" not in shown
    rejects(lambda: show_planted("E"), "letter must be one of A, B, C, D")


@needs_transformers
def test_the_sources_are_the_functions_a_forward_pass_runs(models):
    """Each function handed to the learner runs when GPT-2 reads a prompt and takes a cached step."""
    import sys

    from attnlib.gpt2_reading import _cache_keyword, _cache_of, gpt2_sources

    called = set()

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code)

    model, ids = models[torch.float64], torch.arange(6)[None]
    sys.setprofile(profile)
    try:
        with torch.no_grad():
            out = model(ids[:, :4], use_cache=True)
            model(ids[:, 4:], **{_cache_keyword(model): _cache_of(out), "use_cache": True})
    finally:
        sys.setprofile(None)
    assert all(inspect.unwrap(fn).__code__ in called for fn in gpt2_sources())


@needs_transformers
def test_the_gpt2_helpers_reject_what_they_cannot_read(models):
    from transformers import GPT2Config, GPT2LMHeadModel

    from attnlib.gpt2_reading import ask_gpt2, line_finding, planted_bug

    rejects(lambda: ask_gpt2(torch.nn.Linear(2, 2)), "must be a transformers GPT2LMHeadModel", kind=TypeError)
    sdpa = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=8, n_embd=8, n_head=2, n_layer=1,
                                      attn_implementation="sdpa"))
    rejects(lambda: ask_gpt2(sdpa), 'attn_implementation="eager"')
    short = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_head=2, n_layer=1,
                                       attn_implementation="eager"))
    rejects(lambda: ask_gpt2(short), "n_positions=4")
    rejects(lambda: line_finding(5, [], models[torch.float64]), "question must be 1, 2, 3 or 4")
    model = models[torch.float64]
    rejects(lambda: ask_gpt2(model, [1, 2, 3]), "integer tensor (B, T), got list", kind=TypeError)
    rejects(lambda: ask_gpt2(model, torch.zeros(1, 6)), "integer tensor", kind=TypeError)
    rejects(lambda: ask_gpt2(model, torch.zeros(1, 4, dtype=torch.long)), "got T=4")
    rejects(lambda: ask_gpt2(model, torch.full((1, 6), 99)), "0 … 31")
    with pytest.raises(ValueError, match="letter must be one of"), planted_bug("a"):
        pass
