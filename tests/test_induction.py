"""Head scores of chapter 6: right on hand-made tables, and the shipped trained heads as stated."""

import pytest
import torch

from attnlib.induction import (
    CONFIG,
    SEEDS,
    WEIGHTS,
    ablate_heads,
    half_losses,
    head_scores,
    induction_score,
    induction_targets,
    load_models,
    previous_token_score,
    repeated_blocks,
    stored_losses,
    train_induction,
)

# What chapter 6 asserts about the shipped models. Block 1 holds induction heads (induction score above
# 0.5), all in block 1, standing above every other head of the model by INDUCTION_MARGIN; every block-0
# head has a previous-token score above every block-1 head's by PREVIOUS_MARGIN.
INDUCTION_MARGIN = 0.3
PREVIOUS_MARGIN = 0.15
N_REPLAY = 25   # training steps replayed against the stored loss curve


def previous_token_table(T):
    """Query 0 reads itself; every other query puts all its weight on the position before it."""
    P = torch.zeros(T, T)
    P[0, 0] = 1
    P[torch.arange(1, T), torch.arange(T - 1)] = 1
    return P


def uniform_causal_table(T):
    P = torch.tril(torch.ones(T, T))
    return P / P.sum(-1, keepdim=True)


def perfect_induction_table(ids):
    """Each repeated token reads the token right after its earlier copy; the others read themselves."""
    T = len(ids)
    P = torch.eye(T)
    for i in range(T):
        earlier = [j for j in range(i) if ids[j] == ids[i]]
        if earlier:
            P[i] = 0
            P[i, earlier[-1] + 1] = 1
    return P


def test_previous_token_score_on_hand_made_tables():
    assert previous_token_score(previous_token_table(7)).item() == pytest.approx(1.0)
    uniform = previous_token_score(uniform_causal_table(7)).item()
    assert uniform == pytest.approx(sum(1 / (i + 1) for i in range(1, 7)) / 6)
    assert uniform < 0.5
    assert previous_token_score(torch.eye(7)).item() == 0.0


def test_previous_token_score_keeps_leading_axes():
    P = torch.stack([previous_token_table(5), torch.eye(5)])[None]   # (1, 2, 5, 5)
    torch.testing.assert_close(previous_token_score(P), torch.tensor([[1.0, 0.0]]))


def test_induction_targets_point_after_the_latest_earlier_copy():
    ids = torch.tensor([3, 1, 4, 1, 5, 1])
    target = induction_targets(ids)
    want = torch.zeros(6, 6, dtype=torch.bool)
    want[3, 2] = True   # 1 at 3: earlier 1 at 1, the token after it sits at 2
    want[5, 4] = True   # 1 at 5: the latest earlier 1 is at 3, not at 1
    assert torch.equal(target, want)


def test_induction_score_on_hand_made_tables():
    ids = torch.tensor([5, 2, 7, 0, 5, 2, 7, 0])
    assert induction_score(perfect_induction_table(ids), ids).item() == pytest.approx(1.0)
    assert induction_score(previous_token_table(8), ids).item() == 0.0
    assert induction_score(uniform_causal_table(8), ids).item() < 0.25
    # the scores of several heads and sequences at once, ids (B, T) with P (B, h, T, T)
    P = torch.stack([perfect_induction_table(ids), uniform_causal_table(8)])[None]
    scores = induction_score(P, ids[None])
    assert scores.shape == (1, 2)
    assert scores[0, 0].item() == pytest.approx(1.0)


def test_scores_refuse_bad_input():
    with pytest.raises(ValueError, match="square"):
        previous_token_score(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="nothing to score"):
        induction_score(uniform_causal_table(4), torch.arange(4))
    with pytest.raises(TypeError, match="integer"):
        induction_targets(torch.zeros(4))
    with pytest.raises(ValueError, match="vocab_size"):
        repeated_blocks(2, 9, 8, torch.Generator())


def test_repeated_blocks_are_distinct_tokens_repeated():
    ids = repeated_blocks(5, 6, 10, torch.Generator().manual_seed(0))
    assert ids.shape == (5, 12)
    assert torch.equal(ids[:, :6], ids[:, 6:])
    assert all(len(set(row[:6].tolist())) == 6 for row in ids)


@pytest.fixture(scope="module")
def shipped():
    models = load_models()
    ids = repeated_blocks(64, 16, CONFIG["model"].vocab_size, torch.Generator().manual_seed(6))
    return models, ids


def test_shipped_weights_are_small_and_hold_every_seed(shipped):
    assert WEIGHTS.stat().st_size < 2_000_000
    models, _ = shipped
    assert sorted(models) == sorted(SEEDS)


@pytest.mark.parametrize("seed", SEEDS)
def test_shipped_heads_specialise_by_the_stated_margins(shipped, seed):
    models, ids = shipped
    scores = head_scores(models[seed], ids)   # (L, h, 2)
    assert scores.shape == (CONFIG["model"].L, CONFIG["model"].h, 2)
    ind = scores[..., 1]
    assert ind[0].max() < 0.05                # no induction head in block 0
    assert (ind[1] > 0.5).any()
    assert ind[ind > 0.5].min() - ind[ind <= 0.5].max() > INDUCTION_MARGIN
    assert scores[0, :, 0].min() - scores[1, :, 0].max() > PREVIOUS_MARGIN


@pytest.mark.parametrize("seed", SEEDS)
def test_ablating_the_induction_heads_breaks_the_repeated_half(shipped, seed):
    models, ids = shipped
    model = models[seed]
    ind = head_scores(model, ids)[1, :, 1]
    induction = [(1, k) for k in range(len(ind)) if ind[k] > 0.5]
    first, repeated = half_losses(model, ids)
    with ablate_heads(model, induction):
        first_ab, repeated_ab = half_losses(model, ids)
    assert repeated < 0.1 and repeated_ab > 3.0
    assert repeated_ab - repeated > 5 * abs(first_ab - first)
    assert half_losses(model, ids) == (first, repeated)   # the hooks are gone after the block


def test_ablate_heads_zeroes_exactly_the_chosen_columns():
    model = load_models()[SEEDS[0]]
    attn = model.blocks[1].attn
    seen = []
    attn.W_O.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0].clone()))
    ids = repeated_blocks(2, 5, CONFIG["model"].vocab_size, torch.Generator().manual_seed(1))
    with ablate_heads(model, [(1, 2)]):
        model(ids)
    model(ids)
    d = attn.d_head
    assert (seen[0][..., 2 * d:3 * d] == 0).all()
    torch.testing.assert_close(seen[0][..., :2 * d], seen[1][..., :2 * d])
    assert seen[1][..., 2 * d:3 * d].abs().sum() > 0
    with pytest.raises(TypeError, match="pairs"):
        with ablate_heads(model, (1, 2)):
            pass
    with pytest.raises(ValueError, match="below h"):
        with ablate_heads(model, [(1, 9)]):
            pass


def test_training_replays_the_stored_loss_curve():
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, losses = train_induction(SEEDS[0], steps=N_REPLAY)
    finally:
        torch.set_num_threads(torch_threads)
    stored = stored_losses()[SEEDS[0]]
    assert len(stored) == CONFIG["steps"]
    assert losses == pytest.approx(stored[:N_REPLAY], abs=1e-4)
