"""mt/output_pieces.py: model.output_pieces: target. The output layer, softmax and loss over the pieces of
the training targets give what the whole layer gives restricted to them; search, scoring and
CTranslate2 work in piece ids as before; a run keeps its pieces through checkpoints."""

import dataclasses
import json
import math
import shutil

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT, TEXT_MODEL, needs_multi30k

from mt.batching import make_batch
from mt.config import EOS, PAD, UNK, load_config
from mt.data import load_split
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.output_pieces import target_pieces
from mt.rescoring.score import score_lines, score_pairs
from mt.training.corpus import learn_tokenizer
from mt.training.step import batch_loss
from mt.training.train import train
from mt.training.validation import make_validation
from mt.translate import SearchRequest, search_lines
from mt.translator import Translator

SOURCES = ["ein Hund läuft im Park .", "zwei Männer", "eine Frau sitzt auf einer Bank ."]
TARGETS = ["a dog runs in the park .", "two men", "a woman sits on a bench ."]


def test_the_pieces_are_the_targets_and_the_specials_sorted():
    views = [torch.tensor([9, 5, 7, 5], dtype=torch.int32), torch.tensor([11], dtype=torch.int32)]
    assert target_pieces(views, 12).tolist() == [0, 1, 2, 3, 5, 7, 9, 11]


def twins(tokenizer, targets: list[str] = TARGETS) -> tuple[Seq2Seq, Seq2Seq, torch.Tensor]:
    """A random model over all pieces and the same weights with an output layer over `targets`'."""
    torch.manual_seed(0)
    full = Seq2Seq(TEXT_MODEL, tokenizer.vocab_size).eval()
    ids = target_pieces(
        [torch.tensor([p for line in tokenizer.encode(targets) for p in line])], tokenizer.vocab_size
    )
    part = Seq2Seq(dataclasses.replace(TEXT_MODEL, output_pieces="target"), tokenizer.vocab_size, ids).eval()
    part.load_state_dict(full.state_dict() | {"output.ids": ids})
    return full, part, ids


def test_the_layer_scores_its_pieces_as_the_whole_layer_does(tokenizer):
    full, part, ids = twins(tokenizer)
    batch = make_batch(tokenizer.encode(SOURCES), tokenizer.encode(TARGETS))
    with torch.no_grad():
        everything = full(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
        mine = part(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V')
    assert mine.shape[-1] == len(ids) == part.output_size < tokenizer.vocab_size
    assert torch.allclose(mine, everything[..., ids], atol=1e-6)
    lprobs = torch.log_softmax(part.to_pieces(mine), -1)  # (B, T, V): by piece id
    assert torch.allclose(lprobs[..., ids], torch.log_softmax(everything[..., ids], -1), atol=1e-5)
    outside = torch.ones(tokenizer.vocab_size, dtype=torch.bool).index_fill_(0, ids, False)
    assert lprobs[..., outside].exp().max() == 0.0


def test_a_search_after_an_update_uses_the_updated_output_rows(tokenizer):
    """The rows a search keeps are dropped when training resumes: fused Adam updates the weights without
    bumping their version, so a validation after an update must not reuse the last one's rows."""
    _, part, ids = twins(tokenizer)
    batch = make_batch(tokenizer.encode(SOURCES), tokenizer.encode(TARGETS))

    def validated() -> torch.Tensor:  # as validation runs: eval mode, no autograd, then training again
        part.eval()
        with torch.no_grad():
            logits = part(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
        part.train()
        return logits

    before = validated()
    optimizer = torch.optim.Adam(part.parameters(), lr=1e-2, fused=True)
    batch_loss(part, batch, 0.1)[0].backward()
    optimizer.step()
    fresh = Seq2Seq(part.cfg, tokenizer.vocab_size, ids).eval()
    fresh.load_state_dict(part.state_dict())
    with torch.no_grad():
        want = fresh(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)
    after = validated()
    assert not torch.allclose(before, after) and torch.equal(after, want)


def test_scoring_gives_a_piece_the_layer_lacks_minus_infinity(tokenizer):
    full, part, ids = twins(tokenizer)
    src, tgt = tokenizer.encode(SOURCES[:1]), tokenizer.encode(TARGETS[:1])
    batch = make_batch(src, tgt)
    with torch.no_grad():
        everything = full(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)[0, :, ids]  # (T, V')
    position = {piece: i for i, piece in enumerate(ids.tolist())}
    by_hand = torch.log_softmax(everything, -1)[range(len(tgt[0]) + 1), [position[t] for t in tgt[0] + [EOS]]]
    (inside,) = score_pairs(part, src, tgt, DecodeConfig())
    assert inside.token_logprobs == pytest.approx(by_hand.tolist(), abs=1e-5)
    outside = next(i for i in range(4, tokenizer.vocab_size) if i not in position)
    (lacking,) = score_pairs(part, src, [tgt[0][:1] + [outside]], DecodeConfig())
    assert lacking.token_logprobs[1] == float("-inf") and lacking.logprob == float("-inf")


def outside_piece(tokenizer, ids: torch.Tensor, words: list[str]) -> tuple[str, int]:
    """One of `words` that the joint BPE makes one piece the English targets lack, each of its
    characters one they hold."""
    written = set(ids.tolist())
    return next(
        (word, piece)
        for word in words
        for (piece,) in [tokenizer.encode([word])[0][:1]]
        if len(tokenizer.encode([word])[0]) == 1
        and piece not in written
        and all(tokenizer.sp.piece_to_id(c) in written for c in word)
    )


def test_target_text_is_cut_into_the_pieces_the_layer_writes(tokenizer, toy):
    """Issue 80: a reference or prefix holding a piece only the other language uses is cut into the
    smaller pieces the layer writes, where it had been scored -inf and refused as a prefix; a line of
    written pieces is cut as before, and a character no target holds is <unk>."""
    _, part, ids = twins(tokenizer, toy["train"][1][:2000])
    written = tokenizer.writing(ids.tolist())
    word, piece = outside_piece(tokenizer, ids, " ".join(toy["train"][0][:200]).split())
    (cut,) = written.encode_target([word])
    assert len(cut) > 1 and set(cut) <= set(ids.tolist()) and written.decode([cut]) == [word]
    assert written.encode_target(toy["train"][1][:2000]) == tokenizer.encode(toy["train"][1][:2000])
    assert written.encode(SOURCES) == tokenizer.encode(SOURCES)  # the source side: every piece
    assert tokenizer.writing(None).encode_target([word]) == [[piece]]
    german = next(c for c in "äöüß" if tokenizer.sp.piece_to_id(c) not in (UNK, *ids.tolist()))
    assert UNK in written.encode_target([f"a {german}"])[0]
    (scored,) = score_lines(part, written, SOURCES[:1], [f"{word} ."], DecodeConfig())
    (raw,) = score_pairs(part, written.encode(SOURCES[:1]), [cut + written.encode(["."])[0]], DecodeConfig())
    assert math.isfinite(scored.logprob) and scored.token_logprobs == raw.token_logprobs
    (batch,) = make_validation(SOURCES[:1], [word], tokenizer, part, 1000).batches  # the val loss's
    assert batch.tgt_out[0].tolist() == cut + [EOS]


@needs_multi30k
def test_the_defaults_english_is_written_with_the_pieces_it_writes():
    """configs/multi30k.yaml's joint BPE and target layer (4,273 pieces): 6 val and 4 test2016
    references hold a piece no English training line has (e.g. '▁Ban' of "Bananas"), scored -inf
    and counted <unk> by the val loss before issue 80; cut for the target side, every piece of every
    reference is one the layer writes, with no <unk>, and the other lines keep their pieces."""
    cfg = load_config(ROOT / "configs/multi30k.yaml")
    tokenizer = learn_tokenizer(cfg)[0]
    english = load_split(cfg.data, "train")[1]
    targets = tokenizer.encode(english)
    ids = target_pieces([torch.tensor([p for line in targets for p in line])], tokenizer.vocab_size)
    assert len(ids) == 4273
    written, pieces = tokenizer.writing(ids.tolist()), set(ids.tolist())
    assert written.encode_target(english) == targets
    for split, lacking in [("val", 6), ("test", 4)]:
        references = load_split(cfg.data, split)[1]
        whole, cut = tokenizer.encode(references), written.encode_target(references)
        assert sum(not set(line) <= pieces for line in whole) == lacking
        assert all(set(line) <= pieces - {UNK} for line in cut)
        assert [a for a in whole if set(a) <= pieces] == [b for a, b in zip(whole, cut) if set(a) <= pieces]
    assert written.sp.id_to_piece(written.encode_target(["Bananas and"])[0]) == ["▁B", "an", "anas", "▁and"]
    assert tokenizer.pieces("Bananas and")[0] == "▁Ban"


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_the_loss_is_cross_entropy_over_the_target_pieces(tokenizer, epsilon):
    full, part, ids = twins(tokenizer)
    batch = make_batch(tokenizer.encode(SOURCES), tokenizer.encode(TARGETS))
    loss, nll = batch_loss(part, batch, epsilon)
    logits = full(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)[..., ids].flatten(0, 1)
    position = {piece: i for i, piece in enumerate(ids.tolist())}
    target = torch.tensor([position[t] for t in batch.tgt_out.flatten().tolist()])  # PAD stays 0
    by_hand = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum", label_smoothing=epsilon)
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert nll.item() == pytest.approx(
        F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum").item(), rel=1e-5
    )
    assert part.output_ids(torch.tensor([PAD, EOS])).tolist() == [PAD, EOS]  # the specials keep their ids


TARGET_LINES = ["Der Hund sieht die Katze .", "Ein Mann läuft ."]


@pytest.fixture(scope="module")
def target_run(tiny, tmp_path_factory):
    """A toy run with the target-only output layer, 30 updates, resumed for 4 more. Read only."""
    run = tmp_path_factory.mktemp("target") / "run"
    overrides = tiny + ["train.max_steps=30", "train.lr=5e-3", "model.output_pieces=target"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    ids = torch.load(run / "best.pt", weights_only=False)["model"]["output.ids"]
    train(load_config(ROOT / "configs/toy.yaml", overrides + ["train.max_steps=34"]), run)  # resumed
    return run, ids


def prefixes_outside(translator, ids) -> list[str]:
    """No prefix, and a piece the layer lacks (written in smaller pieces: issue 80)."""
    tok = translator.tokenizer
    outside = next(
        tok.sp.decode([i])
        for i in range(4, tok.vocab_size)
        if i not in ids.tolist() and tok.encode([tok.sp.decode([i])]) == [[i]]
    )
    return ["", outside]


@pytest.mark.slow
def test_a_target_layer_run_trains_translates_and_resumes(target_run):
    run, ids = target_run
    assert 4 < len(ids) < torch.load(run / "best.pt", weights_only=False)["vocab_size"]
    assert ids[:4].tolist() == [0, 1, 2, 3]
    assert torch.equal(torch.load(run / "last.pt", weights_only=False)["model"]["output.ids"], ids)  # kept
    translator = Translator.from_run(run, device="cpu")
    lines = TARGET_LINES
    for beam in (1, 3):  # greedy and the beam write only the layer's pieces
        found = search_lines(
            SearchRequest(translator.model, translator.tokenizer, lines), DecodeConfig(beam=beam, n_best=beam)
        )
        assert {t for hyps in found for h in hyps for t in h.tokens} <= set(ids.tolist())
    greedy = search_lines(SearchRequest(translator.model, translator.tokenizer, lines), DecodeConfig(beam=1))
    assert translator.translate(lines, beam=1) == translator.tokenizer.decode([h[0].tokens for h in greedy])
    prefixes = prefixes_outside(translator, ids)
    led = translator.translate(lines, prefixes=prefixes, beam=3)
    assert led[1].startswith(prefixes[1].strip()) and led[0] == translator.translate(lines[:1], beam=3)[0]


@pytest.mark.slow
def test_a_target_layer_run_exports_to_ctranslate2_and_decodes_as_mt(target_run, tmp_path):
    pytest.importorskip("ctranslate2")
    from mt.cli import main

    run = tmp_path / "run"
    shutil.copytree(target_run[0], run)
    assert main(["export", "--run", str(run)]) == 0
    ct2 = Translator.from_run(run, device="cpu", engine="ctranslate2")
    mine = Translator.from_run(run, device="cpu")
    lines, prefixes = TARGET_LINES, prefixes_outside(mine, target_run[1])
    assert ct2.translate(lines, beam=1) == mine.translate(lines, beam=1)
    assert ct2.translate(lines, prefixes=prefixes, beam=3) == mine.translate(lines, prefixes=prefixes, beam=3)
    assert json.loads((run / "ct2" / "mt_export.json").read_text())["checkpoint"] == "best.pt"
