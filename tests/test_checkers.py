"""What every exercise checker promises, whatever the chapter, and the core they are built on (checks._core).

The chapter files (test_checks_<chapter>.py) prove that each checker accepts its solution and names each planted
mistake; this file covers the behaviour they all share: a checker never raises, recognises the stub, leaves the
learner's random state alone, compares tuples element by element, blames a planted mistake only for the same
error and only when it matches on every case, names an answer that changes its inputs in place or shares a
parameter with them, compares dtype and device, and keeps its second hint level for ``hint=2``.
"""

from __future__ import annotations

import copy
import inspect
import math
import sys

import pytest
import torch
from torch import nn

from attnlib import checks
from attnlib.checks import _core
from attnlib.checks._core import Group, Guess, Mistake, Verdict, checker, judge, judge_number, named, progress, variants
from helpers import assert_accepted, assert_named, stub

CHECKERS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]


def n_answers(check) -> int:
    """How many answers a checker takes (most take one; a prediction may ask for several)."""
    params = inspect.signature(inspect.unwrap(check)).parameters.values()
    return sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def call(check, answer) -> Verdict:
    """The checker on ``answer`` given for each of its parameters."""
    return check(*[answer] * n_answers(check))


# A prediction checker of this file, so the prediction contract is exercised even before a chapter has one.
@checker(kind="predict")
def check_demo_prediction(value) -> Verdict:
    """Predict the variance of q · k for q, k with d_k = 16 independent standard normal entries."""
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 4000, 16, generator=g).unbind(0)
    measured = (q * k).sum(-1).var().item()
    return judge_number(value, measured, [Guess("one", "each term has variance 1, but there are d_k terms.", 1.0)])


# A function checker of this file, for the tests that need one whose inner workings they know.
@checker
def check_demo_double(fn) -> Verdict:
    return judge(fn, [(torch.arange(4.0),), (torch.ones(2, 3),)], lambda x: 2 * x,
                 [Mistake("square", "you squared x; double it instead.", lambda x: x * x)])


# Each checker declares its exercise's kind on @checker, and is held to that kind's contract below.
FUNCTION_CHECKERS = [c for c in CHECKERS if c.kind == "function"] + [check_demo_double]
PREDICTION_CHECKERS = [c for c in CHECKERS if c.kind == "predict"] + [check_demo_prediction]


def ids(cs):
    return [c.__name__ for c in cs]


def crashes(*args):
    raise RuntimeError("boom")


def draws_then_zeros(*args):
    """A wrong answer that draws from the global generator, as a learner's `nn.Linear(...)` or `torch.randn` does."""
    torch.rand(5)
    nn.Linear(3, 3)
    return torch.zeros(1)


def draws_then_raises(*args):
    torch.randn(4)
    raise ValueError("shapes do not match")


def torch_not_implemented(*args):
    """Torch's own NotImplementedError, raised from its C++ core: not the stub."""
    return torch.eye(3).to_sparse().view(9)


def module_not_implemented(*args):
    """Torch's own NotImplementedError, raised by torch's Python code (a Module without forward): not the stub."""
    return nn.Module()(torch.zeros(1))


def could_not_judge(verdict: Verdict) -> bool:
    return verdict.message.startswith("the checker could not judge")


def test_every_checker_declares_a_kind_of_exercise():
    assert {c.kind for c in CHECKERS} == set(_core.KINDS)        # both kinds occur in the book
    assert check_demo_double.kind == "function" and check_demo_prediction.kind == "predict"
    with pytest.raises(ValueError, match="kind must be one of 'function', 'predict', got 'guess'"):
        checker(kind="guess")


def test_every_chapter_has_at_least_two_checkers():
    for module in checks._CHAPTERS:
        names = [n for n in module.__all__ if n.startswith("check_")]
        assert len(names) >= 2, (module.__name__, names)


# ----------------------------------------------------------------------------------------------------------------
# The contract of every function checker
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", FUNCTION_CHECKERS, ids=ids(FUNCTION_CHECKERS))
def test_the_stub_is_recognised(check):
    verdict = call(check, stub)
    assert_named(verdict, "stub", "stub")


@pytest.mark.parametrize("check", FUNCTION_CHECKERS, ids=ids(FUNCTION_CHECKERS))
@pytest.mark.parametrize("answer", [torch_not_implemented, module_not_implemented])
def test_torchs_own_not_implemented_error_is_not_taken_for_the_stub(check, answer):
    verdict = call(check, answer)
    assert_named(verdict, "error", "NotImplementedError")
    assert not could_not_judge(verdict), verdict


@pytest.mark.parametrize("check", FUNCTION_CHECKERS, ids=ids(FUNCTION_CHECKERS))
def test_a_checker_never_raises_on_a_broken_answer(check):
    for answer, label in [(crashes, "error"), (lambda *a: None, "none"), (42, "not-callable"), (..., "not-callable")]:
        verdict = call(check, answer)
        assert_named(verdict, label)
        assert verdict.message and not could_not_judge(verdict), verdict
    odd = (lambda *a: "not a tensor", lambda *a: (torch.zeros(1),) * 7, lambda *a: torch.full((2, 2), math.nan))
    for answer in odd:
        verdict = call(check, answer)
        assert not verdict.ok and verdict.message and not could_not_judge(verdict), verdict


# ----------------------------------------------------------------------------------------------------------------
# The contract of every prediction checker (its stub is `my_number = ...`)
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", PREDICTION_CHECKERS, ids=ids(PREDICTION_CHECKERS))
def test_a_prediction_stub_is_recognised(check):
    for stub_value in (..., None):
        verdict = call(check, stub_value)
        assert_named(verdict, "stub")


@pytest.mark.parametrize("check", PREDICTION_CHECKERS, ids=ids(PREDICTION_CHECKERS))
def test_a_prediction_checker_never_raises_on_odd_answers(check):
    for answer in ("0.5", math.nan, torch.tensor(math.nan), torch.ones(2, 2), [1.0, "two"], True, stub):
        verdict = call(check, answer)
        assert isinstance(verdict, Verdict) and not verdict.ok, (answer, verdict)
        assert verdict.mistake not in (None, "stub") and not could_not_judge(verdict), (answer, verdict)
    for answer in (-1e300, math.inf, torch.tensor([2.0]), [0, 1], 10**400):
        verdict = call(check, answer)             # judged, right or wrong, never a crash
        assert isinstance(verdict, Verdict) and not could_not_judge(verdict), (answer, verdict)


# ----------------------------------------------------------------------------------------------------------------
# The learner's random state
# ----------------------------------------------------------------------------------------------------------------

@pytest.fixture
def correct_answers(monkeypatch):
    """Make every checker judge its own reference (or measured number): the path of a correct answer.

    judge and judge_number are swapped, in each checker module, for versions that hand the reference to the
    real judge in place of the learner's answer; checkers stay untouched otherwise.
    """
    real_judge, real_judge_number = judge, judge_number

    def judge_reference(fn, cases, reference, *args, **kwargs):
        if reference is not None:   # a property judges how the learner computes, not what: the reference is exempt
            kwargs.pop("properties", None)
        return real_judge(reference if reference is not None else fn, cases, reference, *args, **kwargs)

    def judge_want(value, want, *args, **kwargs):
        return real_judge_number(want, want, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if module is not None and (name.startswith("attnlib.checks.") or name == __name__):
            if getattr(module, "judge", None) is real_judge:
                monkeypatch.setattr(module, "judge", judge_reference)
            if getattr(module, "judge_number", None) is real_judge_number:
                monkeypatch.setattr(module, "judge_number", judge_want)


ALL = FUNCTION_CHECKERS + PREDICTION_CHECKERS


def rng_after(check, *answers) -> tuple[Verdict, torch.Tensor, torch.Tensor]:
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    verdict = check(*answers) if len(answers) == n_answers(check) else call(check, *answers)
    return verdict, torch.rand(3), want


@pytest.mark.parametrize("check", ALL, ids=ids(ALL))
def test_a_checker_leaves_the_learners_random_state_alone_on_wrong_answers(check):
    answers = ([..., 0.0, "many"] if check in PREDICTION_CHECKERS
               else [stub, draws_then_zeros, draws_then_raises, crashes])
    for answer in answers:
        verdict, got, want = rng_after(check, answer)
        assert not verdict.ok, (answer, verdict)
        assert torch.equal(got, want), f"{getattr(answer, '__name__', answer)!r}: the global generator moved"


# Correct answers for the checkers that are not built on judge or judge_number (the fixture cannot make those
# judge their own reference). Each entry is the tuple of answers the checker takes.
def _deepened(blocks):
    """A correct deeper stack: each block's copy, then a copy whose output layers start at zero."""
    deeper = torch.nn.ModuleList()
    for block in blocks:
        new = copy.deepcopy(block)
        with torch.no_grad():
            for p in [*new.attn.W_O.parameters(), *new.mlp.W_2.parameters()]:
                p.zero_()
        deeper.extend([copy.deepcopy(block), new])
    return deeper


CORRECT: dict[str, tuple] = {
    "check_deepen": (_deepened,),   # judged by properties alone: no reference to hand in
    # the capstone's reading of GPT-2: lines of the installed transformers source, and a question per planted copy
    "check_gpt2_lines": ({1: "query_states, key_states, value_states = self.c_attn(hidden_states)"
                             ".split(self.split_size, dim=2)",
                          2: "attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling",
                          3: "attn_weights = attn_weights + attention_mask",
                          4: "attn_output = torch.matmul(attn_weights, value)"},),
    "check_which_question": ({"A": 1, "B": 3, "C": 2, "D": 1},),
    # the audit page: a core with one planted bug (no 1/√d_k) and the audit's verdict on it
    "check_audit_prediction": (lambda Q, K, V: (Q @ K.mT).masked_fill(torch.ones(
        Q.shape[-2], K.shape[-2], dtype=torch.bool).triu(1 + K.shape[-2] - Q.shape[-2]), -math.inf).softmax(-1) @ V,
        {"scale"}),
    "check_audit_labels": ({"mask-offset", "nan-empty-row"},),
}


@pytest.mark.parametrize("check", ALL, ids=ids(ALL))
def test_a_checker_leaves_the_learners_random_state_alone_on_a_correct_answer(check, correct_answers):
    answers = CORRECT.get(check.__name__, (lambda *a: None,))
    verdict, got, want = rng_after(check, *answers)
    assert verdict.ok, (f"{check.__name__} did not accept a correct answer: {verdict}. If it is not built on "
                        f"judge or judge_number, add a correct answer to CORRECT in this file.")
    assert torch.equal(got, want), "the global generator moved while the checker judged a correct answer"


def test_the_checker_decorator_is_what_protects_the_random_state():
    """Control: the same checker without @checker lets the learner's draws move the global generator."""
    raw = inspect.unwrap(check_demo_double)
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    assert_named(raw(draws_then_zeros), "shape")
    assert not torch.equal(torch.rand(3), want), "the control is void: the answer did not draw"
    verdict, got, want = rng_after(check_demo_double, draws_then_zeros)
    assert_named(verdict, "shape")
    assert torch.equal(got, want)


# ----------------------------------------------------------------------------------------------------------------
# The core: tuples, errors, the stub, inputs changed in place
# ----------------------------------------------------------------------------------------------------------------

def _pair_cases():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 4, generator=g), torch.randn(4, 6, generator=g))]


def _pair(A, W):
    """A (3, 4), W (4, 6) → (A @ W (3, 6), W.T (6, 4)): two results of different shapes."""
    return A @ W, W.T


def test_a_tuple_result_is_accepted_as_a_tuple_or_a_list():
    assert judge(_pair, _pair_cases(), _pair).ok
    assert judge(lambda A, W: list(_pair(A, W)), _pair_cases(), _pair).ok


def test_each_element_of_a_tuple_keeps_its_shape():
    """Same numbers, same count, wrong shape: flattening the elements would accept it."""
    verdict = judge(lambda A, W: (A @ W, W), _pair_cases(), _pair)      # (4, 6) instead of (6, 4)
    assert_named(verdict, "shape", "element 2 of 2", "(4, 6)", "(6, 4)")
    verdict = judge(lambda A, W: ((A @ W).reshape(6, 3), W.T), _pair_cases(), _pair)
    assert_named(verdict, "shape", "element 1 of 2")


def test_a_tuple_with_the_wrong_number_of_elements_is_named():
    verdict = judge(lambda A, W: (A @ W,), _pair_cases(), _pair)
    assert_named(verdict, "length", "2 results, got 1")
    verdict = judge(lambda A, W: (*_pair(A, W), A), _pair_cases(), _pair)
    assert_named(verdict, "length", "got 3")


def test_a_single_tensor_is_not_a_tuple():
    verdict = judge(lambda A, W: torch.cat([t.reshape(-1) for t in _pair(A, W)]), _pair_cases(), _pair)
    assert_named(verdict, "type", "tuple of 2")
    verdict = judge(lambda A, W: (A @ W, None), _pair_cases(), _pair)
    assert_named(verdict, "type", "element 2 of 2")


def test_values_of_one_element_are_reported_with_its_position():
    verdict = judge(lambda A, W: (A @ W, 2 * W.T), _pair_cases(), _pair)
    assert_named(verdict, "values", "element 2 of 2")
    verdict = judge(lambda A, W: (A @ W, W.T[:, :2]), _pair_cases(), _pair)   # shape beats values in the hint
    assert_named(verdict, "shape")


def test_a_mistake_is_matched_element_by_element():
    swapped = Mistake("swapped", "swap them back.", lambda A, W: (W.T, A @ W))
    verdict = judge(lambda A, W: (W.T, A @ W), _pair_cases(), _pair, [swapped])
    assert_named(verdict, "swapped")
    reshaped = Mistake("reshaped", "a mistake of other shapes must not claim it.",
                       lambda A, W: ((A @ W).reshape(6, 3), W))
    verdict = judge(lambda A, W: ((A @ W).reshape(3, 6), W), _pair_cases(), _pair, [reshaped])
    assert_named(verdict, "shape")


def test_an_error_is_blamed_on_a_mistake_only_when_type_and_message_match():
    case = [(torch.ones(3),)]

    def wrong_axis(x):
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")

    mistakes = [Mistake("wrong-axis", "use the last axis.", wrong_axis)]
    same = judge(wrong_axis, case, lambda x: x, mistakes)
    assert_named(same, "wrong-axis", "IndexError")

    def other_index_error(x):
        return x[7]

    other = judge(other_index_error, case, lambda x: x, mistakes)
    assert_named(other, "error")
    assert "use the last axis" not in other.message, other

    def same_message_other_type(x):
        raise ValueError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")

    assert_named(judge(same_message_other_type, case, lambda x: x, mistakes), "error")


def test_only_a_raise_in_the_learners_own_code_is_the_stub():
    case = [(torch.ones(3),)]
    assert_named(judge(stub, case, lambda x: x), "stub")
    assert_named(judge(lambda x: stub(x), case, lambda x: x), "stub")      # a helper of the learner's
    for answer in (torch_not_implemented, module_not_implemented):
        verdict = judge(answer, case, lambda x: x)
        assert_named(verdict, "error", "inside torch")


def test_an_exception_from_a_checkers_own_code_is_not_blamed_on_the_learner():
    @checker
    def check_broken(fn) -> Verdict:
        raise KeyError("the checker's own bug")

    verdict = check_broken(lambda: None)
    assert_named(verdict, "error", "the checker could not judge")


def _linear_case():
    g = torch.Generator().manual_seed(1)
    lin = nn.Linear(4, 3)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(3, 4, generator=g))
        lin.bias.copy_(torch.randn(3, generator=g))
    return (torch.randn(2, 4, generator=g), lin)


CACHED = [_linear_case()]            # a cached case, as module-level test inputs are


def _apply(x, lin):
    return lin(x)


def test_an_answer_that_changes_its_input_in_place_is_named_with_the_argument():
    saved_x, saved_w = CACHED[0][0].clone(), CACHED[0][1].weight.detach().clone()

    def correct_then_vandal(x, lin):
        out = lin(x)
        x.fill_(7.0)
        return out

    def changes_the_layer(x, lin):
        out = lin(x)
        with torch.no_grad():
            lin.bias.zero_()
        return out

    assert_named(judge(correct_then_vandal, CACHED, _apply), "in-place", "input x")
    assert_named(judge(changes_the_layer, CACHED, _apply), "in-place", "lin.bias")
    # the cases themselves, the reference and a later verdict are untouched
    assert torch.equal(CACHED[0][0], saved_x) and torch.equal(CACHED[0][1].weight, saved_w)
    assert judge(_apply, CACHED, _apply).ok


@pytest.mark.parametrize("write", [
    lambda S: S.add_(1.0),
    lambda S: S.masked_fill_(S > 0, 0.0),
    lambda S: S.exp_(),
    lambda S: S.__isub__(S.mean()),
    lambda S: S.__setitem__((0, 0), 5.0),
])
def test_each_kind_of_in_place_write_is_named(write):
    def answer(S):
        out = 2 * S
        write(S)
        return out

    assert_named(judge(answer, [(torch.randn(3, 3),)], lambda S: 2 * S), "in-place", "S")


def test_an_argument_the_exercise_may_change_is_exempt():
    def appends(cache, x):
        cache.append(x)
        return x * 2

    def updates(acc, x):
        acc += x
        return acc.clone()

    assert judge(appends, [([], torch.ones(2))], lambda cache, x: x * 2, mutable=(0,)).ok
    assert_named(judge(appends, [([], torch.ones(2))], lambda cache, x: x * 2), "in-place", "cache")
    assert judge(updates, [(torch.zeros(2), torch.ones(2))], lambda acc, x: acc + x, mutable=("acc",)).ok
    assert_named(judge(updates, [(torch.zeros(2), torch.ones(2))], lambda acc, x: acc + x), "in-place", "acc")


def test_tensors_shared_inside_one_case_stay_shared_in_the_learners_copy():
    """The case is copied as a whole, so an alias inside it is still an alias (as outside a checker)."""
    x = torch.randn(2, 4)
    case = (x, x)

    def aliased(a, b):
        return b.clone() if a is b else None

    assert judge(aliased, [case], lambda a, b: b.clone()).ok
    assert torch.equal(case[0], x) and case[0] is case[1]


def _copy_layer(lin):
    new = nn.Linear(lin.in_features, lin.out_features)
    with torch.no_grad():
        new.weight.copy_(lin.weight)
        new.bias.copy_(lin.bias)
    return new


def test_a_new_layer_that_shares_a_parameter_with_its_input_is_named():
    def shares(lin):
        new = nn.Linear(lin.in_features, lin.out_features)
        new.weight = lin.weight
        with torch.no_grad():
            new.bias.copy_(lin.bias)
        return new

    case = [(nn.Linear(3, 2),)]
    assert_named(judge(shares, case, _copy_layer), "shared-parameters", "weight")
    assert judge(_copy_layer, case, _copy_layer).ok


def test_a_module_is_compared_by_its_parameters():
    case = [(nn.Linear(3, 2),)]

    def no_bias(lin):
        new = nn.Linear(3, 2, bias=False)
        with torch.no_grad():
            new.weight.copy_(lin.weight)
        return new

    def wider(lin):
        return nn.Linear(3, 4)

    def zeroed(lin):
        return nn.Linear(3, 2).requires_grad_(False).apply(lambda m: [p.zero_() for p in m.parameters()])

    assert_named(judge(no_bias, case, _copy_layer), "structure", "lacks bias")
    assert_named(judge(wider, case, _copy_layer), "structure", "weight", "(4, 3)")
    assert_named(judge(zeroed, case, _copy_layer), "values", "weight")
    assert_named(judge(lambda lin: lin.weight.detach().clone(), case, _copy_layer), "type", "module")


def test_dtype_is_compared_before_the_values_and_named_with_them():
    cases = [(torch.randn(4),)]
    assert_named(judge(lambda x: (2 * x).double(), cases, lambda x: 2 * x), "dtype", "float64", "float32")
    assert_named(judge(lambda x: 2 * x > 0, cases, lambda x: (2 * x > 0).float()), "dtype", "torch.bool")
    assert_named(judge(lambda x: (2 * x).to("meta"), cases, lambda x: 2 * x), "device", "meta")
    # a wrong value in another dtype is told its dtype first, and that its values differ too
    assert_named(judge(lambda x: (3 * x).double(), cases, lambda x: 2 * x), "values", "dtype torch.float64",
                 "values differ too")
    # a float mask where a boolean one is expected: no astronomic "largest difference"
    inf = judge(lambda x: torch.zeros(4).masked_fill(x > 0, -math.inf), cases, lambda x: x < 0)
    assert_named(inf, "values", "dtype torch.float32, expected torch.bool")
    assert "e+3" not in inf.message


def test_a_mistake_is_named_only_when_it_matches_on_every_case():
    cases = [(torch.tensor([1.0, 2.0]),), (torch.tensor([-1.0, 3.0]),)]
    mistakes = [Mistake("abs", "did you drop the sign?", lambda x: x.abs())]
    # x.abs() equals x on the first case only: an answer that clamps at 0 is not "abs"
    assert_named(judge(lambda x: x.abs(), cases, lambda x: x, mistakes), "abs")
    assert judge(lambda x: x.clamp(min=0) * 0 + 5, cases, lambda x: x, mistakes).mistake == "values"
    half = lambda x: x if x[0] > 0 else x * 0.5
    assert judge(lambda x: x + 1, cases, lambda x: x, mistakes + [Mistake("p", "?", lambda x: x + 1)]).mistake == "p"
    assert judge(half, cases, lambda x: x, mistakes).mistake == "values"


def test_groups_are_all_searched_before_a_mistake_is_named():
    groups = [Group([(torch.tensor([1.0, 2.0]),)], 1e-5), Group([(torch.tensor([-1.0, 2.0]).half(),)], 1e-2)]
    mistakes = [Mistake("abs", "did you drop the sign?", lambda x: x.abs())]
    assert_named(judge(lambda x: x.abs(), groups, lambda x: x, mistakes), "abs")
    assert judge(lambda x: x.abs() if x.dtype == torch.float32 else x + 1, groups, lambda x: x,
                 mistakes).mistake == "values"


WRONG = variants(lambda x, *, k: k * x, [
    ("triple", {"k": 3.0}, "is each value scaled once?", "you multiplied by 3 where the rule doubles."),
    ("half", {"k": 0.5}, "compare the size of your values with the inputs'."),
])


@checker(mistakes=WRONG)
def check_demo_levels(fn) -> Verdict:
    return judge(fn, [(torch.arange(1.0, 4.0),)], lambda x: 2 * x, WRONG)


def test_the_first_hint_points_and_the_second_says_more():
    first, second = check_demo_levels(WRONG[0].wrong), check_demo_levels(WRONG[0].wrong, hint=2)
    assert_named(first, "triple", "is each value scaled once?", "hint=2")
    assert_named(second, "triple", "you multiplied by 3")
    assert "hint=2" not in second.message
    # a mistake with no second level says the same at both levels, without pointing to hint=2
    assert check_demo_levels(WRONG[1].wrong).message == check_demo_levels(WRONG[1].wrong, hint=2).message
    assert "hint=2" not in check_demo_levels(WRONG[1].wrong).message


def test_the_second_level_of_a_generic_difference_says_where():
    v1, v2 = check_demo_levels(lambda x: 2 * x + (x == 2)), check_demo_levels(lambda x: 2 * x + (x == 2), hint=2)
    assert_named(v1, "values", "hint=2")
    assert_named(v2, "values", "at (1,) yours is 5", "expected 4")


@pytest.mark.parametrize("level", [0, 4, "2", True, None])
def test_a_hint_level_other_than_1_or_2_is_a_verdict_not_an_error(level):
    assert_named(check_demo_levels(WRONG[0].wrong, hint=level), "error", "hint is 1")


def test_named_fills_the_fields_of_a_hint():
    m = Mistake("finite", "your blocked entries hold {value}.", more="use -inf, not {value}.")
    assert named(m, value="-1e9").message == "your blocked entries hold -1e9."
    assert named(m, value="-1e9").more


def test_every_checker_registers_the_mistakes_it_can_name():
    for check in CHECKERS:
        assert all(isinstance(m, (Mistake, Guess)) for m in check.mistakes), check.__name__
        assert {"stub"} <= {m.label for m in check.mistakes}, check.__name__
        own = [m for m in check.mistakes if m not in _core._GENERAL]
        assert own, f"{check.__name__} registers no mistake of its own"


# ----------------------------------------------------------------------------------------------------------------
# judge_number and progress
# ----------------------------------------------------------------------------------------------------------------

GUESSES = [Guess("forgot-sqrt", "you forgot the square root.", 16.0), Guess("near", "too close to tell.", 4.2)]


@pytest.mark.parametrize("value, said", [(..., "replace `...`"), (None, "is None")])
def test_judge_number_stub(value, said):
    verdict = judge_number(value, 4.0, GUESSES)
    assert_named(verdict, "stub", said)
    assert value is ... or "`...`" not in verdict.message     # `my_variance = None` is not told to replace `...`


@pytest.mark.parametrize("value", [4.0, 4.3, 3.7, 4, torch.tensor(4.1), torch.tensor([3.9])])
def test_judge_number_accepts_within_the_relative_tolerance(value):
    verdict = judge_number(value, 4.0, GUESSES, rtol=0.1)
    assert_accepted(verdict)
    assert "measured 4" in verdict.message, verdict


def test_judge_number_names_a_typical_wrong_guess_only_when_it_is_wrong():
    verdict = judge_number(16.5, 4.0, GUESSES)
    assert_named(verdict, "forgot-sqrt", "square root")
    # 4.2 is also within 10 % of the measured 4.0: the answer is right, the guess does not claim it
    assert judge_number(4.2, 4.0, GUESSES).ok


@pytest.mark.parametrize("value, side", [(9.0, "high"), (1.0, "low"), (-4.0, "low")])
def test_judge_number_says_which_side_an_unknown_wrong_number_is_on(value, side):
    verdict = judge_number(value, 4.0, GUESSES)
    assert_named(verdict, "values", f"too {side}")


@pytest.mark.parametrize("value", ["4", "four", math.nan, True, torch.ones(2), torch.tensor(True), [4.0], 10**400])
def test_judge_number_rejects_what_is_not_one_number(value):
    verdict = judge_number(value, 4.0, GUESSES)
    assert_named(verdict, "type")


def test_judge_number_with_a_measured_zero():
    assert judge_number(0.0, 0.0).ok
    assert_named(judge_number(0.01, 0.0), "values")


@pytest.fixture
def fresh_progress(monkeypatch):
    monkeypatch.setattr(_core, "_LAST", {})


def test_progress_reports_the_last_verdict_of_each_checker(fresh_progress, capsys):
    exercises = (("Double a tensor", "check_demo_double"), ("Predict the variance", "check_demo_prediction"),
                 ("Never run", "check_nothing"))
    progress(*exercises)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["Double a tensor       – not run yet", "Predict the variance  – not run yet",
                       "Never run             – not run yet"]
    assert out[3] == "0 of 3 exercises pass."

    assert check_demo_double(lambda x: 2 * x).ok
    assert not check_demo_prediction(...).ok
    capsys.readouterr()                                   # each verdict showed itself at its call
    progress(*exercises)
    out = capsys.readouterr().out.splitlines()
    assert out == ["Double a tensor       ✓ passes", "Predict the variance  ✗ not yet",
                   "Never run             – not run yet", "1 of 3 exercises pass."]

    assert_named(check_demo_double(lambda x: x * x), "square")      # the latest verdict counts
    capsys.readouterr()
    progress(*exercises)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Double a tensor       ✗ not yet" and out[-1] == "0 of 3 exercises pass."


@pytest.mark.parametrize("bad, shown", [
    (("Double a tensor", "check_demo_double", "extra"), "('Double a tensor', 'check_demo_double', 'e"),
    ("Double a tensor", "'Double a tensor' (str)"),                               # a title without its pair
    (("Double a tensor", check_demo_double), "('Double a tensor', <function"),   # the checker, not its name
])
def test_progress_names_an_exercise_that_is_not_a_title_and_a_checker_name(fresh_progress, capsys, bad, shown):
    with pytest.raises(TypeError) as e:
        progress(("Predict the variance", "check_demo_prediction"), bad)
    assert str(e.value).startswith("progress takes (title, checker name) pairs of strings"), e.value
    assert f"exercise 1 is {shown}" in str(e.value), e.value
    assert capsys.readouterr().out == ""                                          # nothing half-printed


def test_progress_with_no_exercises(fresh_progress, capsys):
    progress()
    assert capsys.readouterr().out == "0 of 0 exercises pass.\n"


def test_a_verdict_prints_in_lines_of_at_most_88_characters():
    verdict = Verdict(False, "word " * 60, "values")
    lines = repr(verdict).splitlines()
    assert len(lines) > 2 and all(len(line) <= 88 for line in lines)
    assert lines[0].startswith("✗ not yet: ") and all(line.startswith("   ") for line in lines[1:])


def test_right_values_in_the_wrong_dtype_are_never_blamed_on_a_mistake():
    """A planted mistake that raises on one case and equals the answer on the others explains nothing about an
    answer whose values are right: its dtype is what is wrong."""
    cases = [(torch.tensor([1.0, 2.0]),), (torch.tensor([[1.0]]),)]

    def fails_on_a_matrix(x):
        if x.dim() > 1:
            raise ValueError("a matrix")
        return 2 * x

    mistakes = [Mistake("matrix", "does it take a matrix?", fails_on_a_matrix)]
    assert_named(judge(lambda x: (2 * x).double(), cases, lambda x: 2 * x, mistakes), "dtype")
