"""mt/training/step.py: the learning-rate schedules' values, and what one update (`train_step`) does:
micro-batches, clipping, a skipped non-finite update, an fp16 overflow."""

import copy
import math

import pytest
import torch

import mt.training.step
from mt.batching import Pairs, make_batch
from mt.config import ModelConfig, TrainConfig
from mt.model import Seq2Seq
from mt.training.epochs import widened
from mt.training.step import batch_loss, dropout_on, inverse_sqrt_lr, learning_rate, train_step


def test_warmup_schedule_values():
    peak, warmup = 1e-3, 400
    assert inverse_sqrt_lr(100, peak, warmup) == pytest.approx(2.5e-4)
    assert inverse_sqrt_lr(400, peak, warmup) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(1600, peak, warmup) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(0, peak, warmup) == pytest.approx(2.5e-6)


def test_linear_schedule_ends_at_zero_with_the_budget():
    t = TrainConfig(lr=1e-3, warmup_steps=100, schedule="linear", max_steps=1000)
    assert learning_rate(t, 50) == pytest.approx(5e-4)  # warmup, as inverse_sqrt
    assert learning_rate(t, 100) == pytest.approx(9e-4)  # the decay line, 1 - 100/1000, is lower
    assert learning_rate(t, 600) == pytest.approx(4e-4)
    assert learning_rate(t, 1000) == 0.0
    assert learning_rate(TrainConfig(lr=1e-3, warmup_steps=400), 1600) == inverse_sqrt_lr(1600, 1e-3, 400)


def test_dropout_comes_on_after_its_share_of_the_budget():
    t = TrainConfig(max_steps=10, dropout_start=0.55)
    assert [dropout_on(t, step) for step in range(1, 11)] == [False] * 5 + [True] * 5
    assert [dropout_on(TrainConfig(max_steps=4, dropout_start=0.5), step) for step in (2, 3)] == [False, True]
    assert dropout_on(TrainConfig(max_steps=10), 1)  # 0: on from the first update


def _model_and_batches(seed: int = 0):
    torch.manual_seed(seed)
    model = Seq2Seq(ModelConfig(d_model=16, n_heads=2, layers=1, d_ff=32, dropout=0.0), 30)
    pairs = [
        ([5, 6, 7], [8, 9]),
        ([10, 11], [12, 13, 14, 15]),
        ([16], [17]),
        ([18, 19, 20, 21], [22, 23, 24]),
    ]
    return model, pairs


def test_train_step_over_micro_batches_equals_one_batch():
    """Two micro-batches make the same update as one batch of all their sentences (the loss is
    normalised by the update's target tokens, not per micro-batch), and the stats are their sums."""
    model, pairs = _model_and_batches()
    twin, twin_before = copy.deepcopy(model), copy.deepcopy(model)
    micro = [make_batch(*zip(*pairs[:2])), make_batch(*zip(*pairs[2:]))]
    whole = make_batch(*zip(*pairs))
    cfg = TrainConfig(label_smoothing=0.1, clip_norm=0.0)
    stats = train_step(model, torch.optim.SGD(model.parameters()), micro, cfg, lr=1.0)
    one = train_step(twin, torch.optim.SGD(twin.parameters()), [whole], cfg, lr=1.0)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert stats.target_tokens == one.target_tokens == 2 + 4 + 1 + 3 + 4  # targets + eos each
    assert stats.tokens == 14 + 3 + 2 + 1 + 4 + 4  # + sources with eos
    assert stats.loss == pytest.approx(one.loss, rel=1e-5) and stats.nll == pytest.approx(one.nll, rel=1e-5)
    with torch.no_grad():
        by_hand = sum(batch_loss(twin_before, b, 0.1)[0].item() for b in micro)
    assert stats.loss == pytest.approx(by_hand, rel=1e-5)
    assert (stats.stepped, stats.overflow, stats.stop) == (True, False, False)


def test_padding_a_batch_to_a_multiple_changes_no_update():
    """train.pad_multiple only widens the batch with masked positions: the loss and the update are the
    unpadded batch's (within float rounding)."""
    model, pairs = _model_and_batches()
    twin = copy.deepcopy(model)
    plain = Pairs.from_ids(*zip(*pairs)).batch(torch.arange(len(pairs)))
    padded = widened(plain, 8, most=512)
    assert padded.src.size(1) == padded.tgt_in.size(1) == 8 > plain.src.size(1)
    cfg = TrainConfig(label_smoothing=0.1, clip_norm=1.0)
    one = train_step(model, torch.optim.SGD(model.parameters()), [plain], cfg, lr=1.0)
    other = train_step(twin, torch.optim.SGD(twin.parameters()), [padded], cfg, lr=1.0)
    assert other.loss == pytest.approx(one.loss, rel=1e-6) and other.tokens == one.tokens
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_train_step_applies_lr_and_clips_the_gradient_norm():
    model, pairs = _model_and_batches()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters())
    train_step(model, optimizer, [make_batch(*zip(*pairs))], TrainConfig(clip_norm=0.5), lr=0.1)
    assert optimizer.param_groups[0]["lr"] == 0.1
    moved = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())])  # = lr * grad
    assert moved.norm().item() == pytest.approx(0.1 * 0.5, rel=1e-4)
    assert all(p.grad is None for p in model.parameters())  # gradients cleared for the next update


def test_train_step_skips_a_non_finite_update(monkeypatch):
    model, pairs = _model_and_batches()
    before = copy.deepcopy(model.state_dict())
    monkeypatch.setattr(
        mt.training.step,
        "batch_loss",
        lambda m, b, eps: (torch.tensor(float("nan"), requires_grad=True), torch.tensor(1.0)),
    )
    stats = train_step(
        model,
        torch.optim.SGD(model.parameters()),
        [make_batch(*zip(*pairs))],
        TrainConfig(),
        lr=1.0,
        stop_requested=True,
    )
    assert not stats.stepped and not stats.overflow and stats.stop
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_an_fp16_style_overflow_skips_the_update_without_an_error(monkeypatch):
    """The grad scaler's overflow (here a CPU scaler whose first scales overflow float32 gradients)
    is no step and no error: the parameters stay, the scale goes down, later updates go through."""
    real = mt.training.step.batch_loss
    monkeypatch.setattr(
        mt.training.step, "batch_loss", lambda m, b, eps: tuple(x * 1e6 for x in real(m, b, eps))
    )
    model, pairs = _model_and_batches()
    before = copy.deepcopy(model.state_dict())
    optimizer, batch = torch.optim.SGD(model.parameters()), make_batch(*zip(*pairs))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
    stats = train_step(model, optimizer, [batch], TrainConfig(), lr=0.1, scaler=scaler)
    assert (stats.stepped, stats.overflow) == (False, True) and math.isfinite(stats.loss)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert scaler.get_scale() == 2.0**126
    again = train_step(model, optimizer, [batch], TrainConfig(), lr=0.1, scaler=scaler)
    while again.overflow:
        again = train_step(model, optimizer, [batch], TrainConfig(), lr=0.1, scaler=scaler)
    assert again.stepped and not all(torch.equal(before[k], v) for k, v in model.state_dict().items())
