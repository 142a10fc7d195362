"""mt/training/compute.py: a training's multiply-adds counted from the shapes, as torch's own flop
counter counts the matmuls of an update, and over exactly the batches a training consumed."""

import json
import sys

import pytest
import torch
from conftest import ROOT
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mt.batching import Pairs, make_batch, source_batch
from mt.config import ModelConfig
from mt.decode import Sources, search
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.output_pieces import target_pieces
from mt.training.compute import forward_multiply_adds, search_multiply_adds, training_multiply_adds
from mt.training.epochs import BatchStream
from mt.training.step import batch_loss


@pytest.mark.parametrize("pieces", ["all", "target"])
@pytest.mark.parametrize("layers", [(2, 2), (3, 1)])
def test_an_updates_multiply_adds_are_what_torchs_flop_counter_counts(pieces, layers):
    encoder, decoder = layers
    cfg = ModelConfig(
        d_model=32, d_ff=64, n_heads=4, encoder_layers=encoder, decoder_layers=decoder, output_pieces=pieces
    )
    src, tgt = [[5, 6, 7, 8, 9, 10, 11]], [[12, 13, 14, 15]]
    model = Seq2Seq(cfg, 100, target_pieces([torch.tensor(tgt[0])], 100) if pieces == "target" else None)
    batch = make_batch(src, tgt)  # one pair: no padding
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:  # attention as matmuls
        loss, _ = batch_loss(model, batch, 0.1)
        loss.backward()
    lengths = torch.tensor([7]), torch.tensor([4])
    assert counter.get_total_flops() == 2 * 3 * forward_multiply_adds(cfg, model.output_size, *lengths)


def test_a_trainings_multiply_adds_are_its_consumed_batches():
    torch.manual_seed(0)
    src = [torch.randint(4, 50, (int(n),)).tolist() for n in torch.randint(1, 20, (60,))]
    tgt = [torch.randint(4, 50, (int(n),)).tolist() for n in torch.randint(1, 20, (60,))]
    stream, cfg = BatchStream(Pairs.from_ids(src, tgt), 120, seed=3), ModelConfig(d_model=16, d_ff=32)
    epoch = index = 0
    taken = []
    for _ in range(13):  # across an epoch's end
        batches, epoch, index = stream.take(epoch, index, 2)
        taken += batches
    by_batch = sum(
        forward_multiply_adds(cfg, 60, b.src_mask.sum(1) - 1, (b.tgt_out != 0).sum(1) - 1) for b in taken
    )
    assert epoch > 1 and training_multiply_adds(cfg, 60, stream, epoch, index) == pytest.approx(3 * by_batch)


@pytest.mark.slow
def test_the_card_records_the_trainings_multiply_adds(trained):
    run, _ = trained
    training = json.loads((run / "card.json").read_text())["training"]
    assert training["multiply_adds"] > 0 and isinstance(training["multiply_adds"], float)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_searchs_multiply_adds_are_what_torchs_flop_counter_counts(beam):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, d_ff=64, n_heads=4, encoder_layers=2, decoder_layers=1, dropout=0.0)
    model = Seq2Seq(cfg, 50).eval()
    src, src_mask = source_batch([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        (best, *_), *_ = search(
            model, Sources(src, src_mask), DecodeConfig(beam=beam, max_len_a=0.0, max_len_b=6)
        )
    assert len(best.tokens) == 6  # cut at the limit: 6 steps, none of them eos
    expected = search_multiply_adds(cfg, 50, torch.tensor([6]), torch.tensor([5]), beam)  # 6 steps
    assert counter.get_total_flops() == 2 * expected


@pytest.mark.slow
def test_a_runs_compute_counted_again_from_last_pt_or_its_config_is_its_cards(trained):
    sys.path.insert(0, str(ROOT / "scripts"))
    from run_compute import config_compute, run_compute

    run, overrides = trained
    card = json.loads((run / "card.json").read_text())["training"]
    assert run_compute(str(run)) == {
        "run": str(run),
        "steps": 4,
        "epochs": card["epochs"],
        "multiply_adds": card["multiply_adds"],
    }
    counted = config_compute(str(ROOT / "configs/toy.yaml"), 4, overrides)  # untrained, the same batches
    assert counted["multiply_adds"] == card["multiply_adds"] and counted["epochs"] == card["epochs"]


def test_both_directions_adds_each_pair_reversed_and_training_reads_them():
    pairs = Pairs.from_ids([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    both = pairs.both_directions()
    rows = [both.batch(torch.tensor([i])) for i in range(4)]
    sources = [r.src[0][r.src_mask[0]].tolist()[:-1] for r in rows]  # without eos
    targets = [r.tgt_out[0][r.tgt_out[0] != 0].tolist()[:-1] for r in rows]
    assert sources == [[5, 6, 7], [8], [9, 10], [11, 12, 13]]
    assert targets == [[9, 10], [11, 12, 13], [5, 6, 7], [8]]
