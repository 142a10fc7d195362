"""mt/score_filters.py: each rule on a step's scores, and the one function a search's loops apply them
through (the searches themselves, with each rule, in tests/test_decode.py)."""

import torch

from mt.config import EOS, PAD
from mt.decode_config import DecodeConfig
from mt.score_filters import Step, force_prefix, no_eos_before, score_filters

LOWEST = torch.finfo(torch.float32).min


def test_eos_is_banned_until_the_minimum_length():
    scores = torch.randn(2, 8)
    for t in (1, 2, 3):
        banned = no_eos_before(scores, t, 3)
        assert (banned[:, EOS] == LOWEST).all()
        assert torch.equal(banned[:, EOS + 1 :], scores[:, EOS + 1 :]) and torch.equal(
            banned[:, :EOS], scores[:, :EOS]
        )
    assert no_eos_before(scores, 4, 3) is scores


def test_a_default_config_has_no_rule_and_changes_no_score():
    scores = torch.randn(3, 8)
    filtered, mask = score_filters(DecodeConfig(), None)(
        scores, Step(1, torch.zeros(3, 0, dtype=torch.long), torch.arange(3))
    )
    assert filtered is scores and mask is None


def test_the_rules_apply_in_order_and_the_prefix_is_a_mask_that_keeps_its_pieces_score():
    """no_repeat_ngram then min_len edit the scores; the forced prefix comes back as a mask, so the
    forced piece's own score is untouched (a row past its prefix, PAD, is free)."""
    cfg = DecodeConfig(no_repeat_ngram=1, min_len=2)
    prefix = torch.tensor([[5], [PAD]])
    history = torch.tensor([[6], [7]])
    scores = torch.randn(2, 8)
    filtered, mask = score_filters(cfg, prefix)(scores, Step(2, history, torch.tensor([0, 1])))
    assert filtered[0, 6] == LOWEST and filtered[1, 7] == LOWEST  # each row's piece so far, once
    assert (filtered[:, EOS] == LOWEST).all()  # t = 2 <= min_len
    assert filtered[0, 5] == scores[0, 5]
    assert mask is None  # t = 2 is past every prefix
    mask = force_prefix(scores, prefix, torch.tensor([0, 1]), 1)
    assert mask[0].tolist() == [float("-inf")] * 5 + [0.0] + [float("-inf")] * 2
    assert mask[1].tolist() == [0.0] * 8
