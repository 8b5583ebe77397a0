"""Head scores of book/trained_heads: right on hand-made tables, and the shipped trained heads as the page states."""

import pytest
import torch

from attnlib.induction import (
    CONFIG,
    SEEDS,
    WEIGHTS,
    ablate_heads,
    half_losses,
    head_scores,
    head_weights,
    induction_score,
    induction_targets,
    load_models,
    previous_token_score,
    qk_weights,
    repeated_blocks,
    stored_losses,
    stored_recipe,
    train_induction,
)

# What book/trained_heads asserts about every shipped run (blocks counted from 0 here, as in model.blocks).
# The second block holds three induction heads (induction score above 0.5) and a fourth whose score is still
# above INDUCTION_FLOOR times a uniform table's; no head of the first block reaches 0.05; every head of the
# first block has a previous-token score above every head's of the second.
INDUCTION_FLOOR = 4
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
    assert sorted(models) == sorted(SEEDS) and len(SEEDS) >= 3   # a conclusion rests on at least 3 runs


@pytest.mark.parametrize("seed", SEEDS)
def test_shipped_heads_specialise_by_the_stated_margins(shipped, seed):
    models, ids = shipped
    scores = head_scores(models[seed], ids)   # (L, h, 2)
    assert scores.shape == (CONFIG["model"].L, CONFIG["model"].h, 2)
    ind = scores[..., 1]
    assert ind[0].max() < 0.05                # no induction head in the first block
    assert (ind[1] > 0.5).sum() == 3
    uniform = torch.tril(torch.ones(32, 32))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert ind[1].min() > INDUCTION_FLOOR * induction_score(uniform, ids[0])
    assert scores[0, :, 0].min() > scores[1, :, 0].max()


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


@pytest.mark.parametrize("seed", SEEDS)
def test_training_replays_the_stored_loss_curve(seed):
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, losses = train_induction(seed, steps=N_REPLAY)
    finally:
        torch.set_num_threads(torch_threads)
    stored = stored_losses()[seed]
    assert len(stored) == CONFIG["steps"]
    assert losses == pytest.approx(stored[:N_REPLAY], abs=1e-4)


def test_qk_weights_with_one_stream_are_the_blocks_own_weights(shipped):
    models, ids = shipped
    model = models[SEEDS[0]]
    X = model.hidden_states(ids[:4])
    for l, block in enumerate(model.blocks):
        torch.testing.assert_close(qk_weights(block, X[l], X[l]), head_weights(model, ids[:4])[l])
    with pytest.raises(ValueError, match="one shape"):
        qk_weights(model.blocks[1], X[1], X[1][:, :5])


@pytest.mark.parametrize("seed", SEEDS)
def test_the_induction_heads_keys_read_the_first_blocks_heads(shipped, seed):
    """K-composition as book/trained_heads states it: with the keys reading the stream whose first block's heads
    were zeroed, the induction heads score about what a uniform table does; with the queries reading it, more
    than four times that."""
    models, ids = shipped
    model = models[seed]
    induction = head_scores(model, ids)[1, :, 1] > 0.5
    X_1 = model.hidden_states(ids)[1]
    with ablate_heads(model, [(0, n) for n in range(model.config.h)]):
        X_off = model.hidden_states(ids)[1]
    keys_off, queries_off = (induction_score(qk_weights(model.blocks[1], X_q, X_k), ids).mean(0)[induction].mean()
                             for X_q, X_k in [(X_1, X_off), (X_off, X_1)])
    assert keys_off < 0.08 and queries_off > 4 * keys_off


def test_the_weights_file_records_the_recipe_they_were_trained_with():
    """book/trained_heads prints the stored recipe: it is CONFIG, the model's fields and the training run's."""
    assert stored_recipe() == CONFIG


@pytest.mark.parametrize("seed", SEEDS)
def test_silencing_the_first_block_takes_the_induction_heads_to_a_uniform_table(shipped, seed):
    """The two-step circuit as book/trained_heads states it: all of the first block's heads zeroed, the induction
    heads score about what a uniform table does; any one of them zeroed, at least three times that."""
    models, ids = shipped
    model = models[seed]
    induction = head_scores(model, ids)[1, :, 1] > 0.5
    h = model.blocks[0].attn.h
    with ablate_heads(model, [(0, m) for m in range(h)]):
        silenced = head_scores(model, ids)[1, :, 1][induction].mean()
    assert silenced < 0.08
    for m in range(h):
        with ablate_heads(model, [(0, m)]):
            assert head_scores(model, ids)[1, :, 1][induction].mean() > 3 * silenced


def test_the_pages_figure_of_the_trained_heads_holds_their_weights(shipped):
    """The explore figure of book/trained_heads stores raw scores; through scale, mask and softmax they give
    the weights head_weights reads from the model."""
    from attnlib import causal_mask, scale, softmax
    from attnlib.explore import explore, model_scores

    models, _ = shipped
    model = models[0]
    short = repeated_blocks(1, 8, CONFIG["model"].vocab_size, torch.Generator().manual_seed(3))
    d_head = model.blocks[0].attn.d_head
    fig = explore(model_scores(model, short[0]), [str(t) for t in short[0].tolist()], d_head, layer=1)
    S = fig.scores                                       # the numbers written into the page
    P = softmax(scale(S, d_head) + causal_mask(S.shape[-1], dtype=S.dtype))
    P_lib = head_weights(model, short)[:, 0].double()
    assert S.shape == (2, 4, 16, 16)
    assert (P - P_lib).abs().max() < 5e-4
