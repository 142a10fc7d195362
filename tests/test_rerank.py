"""mt/rescoring/rerank.py, its parts alone: MBR's utilities equal sacreBLEU's sentence scores, the channel
score adds the weighted reverse term, refusals, names and the reverse runs' stored paths (end to end,
through trained runs, commands and the server: tests/test_rerank_end_to_end.py)."""

import dataclasses
import itertools
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch

from mt.config import ModelConfig
from mt.decode_config import DecodeConfig, decoding
from mt.model import Seq2Seq
from mt.plumbing.errors import ConfigError
from mt.rescoring.rerank import (
    Candidate,
    bleu_matrix,
    channel_scores,
    chrf_matrix,
    expected_utilities,
    reverse_logprobs,
)
from mt.rescoring.score import score_pairs
from mt.run.folder import runs_from, stored_runs
from mt.run.names import chooser_text, evaluation_name

TEXTS = [
    "A man rides a bike.",
    "A man is riding a bicycle .",
    "A man rides a bike.",
    "",
    "a",
    "Two dogs (brown) play in the snow!",
    "Zwei Hunde spielen im Schnee.",
    "the the the the the",
    "A man",
]


def test_the_private_sacrebleu_step_the_bleu_matrix_rests_on_is_still_there():
    """mt.rescoring.rerank.bleu_matrix tokenizes with sacreBLEU's private `BLEU._preprocess_segment`, written
    against sacreBLEU 2.6.0 (pyproject accepts >= 2.4): on another version this says whether the step
    still exists and still gives the words sentence_bleu counts."""
    from sacrebleu.metrics import BLEU

    where = f"sacreBLEU {sacrebleu.__version__} (written against 2.6.0)"
    assert callable(getattr(BLEU, "_preprocess_segment", None)), f"{where}: BLEU._preprocess_segment is gone"
    assert BLEU(tokenize="13a")._preprocess_segment("A dog, running.") == "A dog , running .", where
    assert BLEU(tokenize="none")._preprocess_segment("A dog, running.") == "A dog, running.", where


def test_the_chrf_matrix_is_sacrebleus_sentence_chrf_for_every_pair():
    matrix = chrf_matrix(TEXTS)
    for (i, hyp), (j, ref) in itertools.product(enumerate(TEXTS), repeat=2):
        assert matrix[i, j].item() == pytest.approx(sacrebleu.sentence_chrf(hyp, [ref]).score, abs=1e-9)


@pytest.mark.parametrize("tokenize", ["13a", "intl"])
def test_the_bleu_matrix_is_sacrebleus_sentence_bleu_for_every_pair(tokenize):
    matrix = bleu_matrix(TEXTS, tokenize)
    for (i, hyp), (j, ref) in itertools.product(enumerate(TEXTS), repeat=2):
        expected = sacrebleu.sentence_bleu(hyp, [ref], tokenize=tokenize).score
        assert matrix[i, j].item() == pytest.approx(expected, abs=1e-9), (hyp, ref)


def test_expected_utility_is_the_mean_over_the_pool_with_duplicates_counted():
    texts = ["a b c d", "a b c e", "a b c d", "x y"]
    chrf = lambda h, r: sacrebleu.sentence_chrf(h, [r]).score  # noqa: E731
    found = expected_utilities(texts, "chrf", "13a")
    for text, value in zip(texts, found):
        assert value == pytest.approx(sum(chrf(text, ref) for ref in texts) / 4, abs=1e-9)
    assert found[0] == found[2] and max(found) == found[0]


def test_mbr_and_reranking_are_refused_where_they_cannot_choose():
    cases = {
        ("mbr_samples", 8): "--mbr-samples 8 draws samples for MBR's pool: add --mbr chrf",
        (
            "sample",
            "topk:5",
        ): "--mbr chrf chooses among the beam's hypotheses, --sample draws one translation; "
        "leave --sample out (MBR draws its own: --mbr-samples)",
        ("rerank", "runs/en-de"): "--mbr chrf and --rerank each choose the translation; give one of them",
        (
            "engine",
            "ctranslate2",
        ): "--mbr chrf chooses among mt's own search's candidates: add --engine torch",
        ("beam", 1): "--mbr chrf has one candidate a line with beam 1: add --beam 5 or --mbr-samples 16",
    }
    from mt.plumbing.spelling import COMMAND_LINE

    for (key, value), message in cases.items():
        options = {"beam": 5, "mbr": "chrf", key: value}
        if key == "mbr_samples":
            options.pop("mbr")
        if key == "sample":
            options["beam"] = 1
            options["mbr_samples"] = 4
        with pytest.raises(ConfigError) as e:
            decoding(DecodeConfig(), options, COMMAND_LINE)
        assert str(e.value) == message


def test_evaluations_of_mbr_and_reranking_are_named_for_their_options():
    decode = DecodeConfig(beam=5, length_penalty=1.5, mbr="chrf", mbr_samples=16, mbr_temperature=0.5, seed=3)
    assert evaluation_name("test", decode) == "test-beam5-lp1.5-mbrchrf-s16-t0.5-seed3"
    assert evaluation_name("test", DecodeConfig(beam=5, mbr="bleu")) == "test-beam5-mbrbleu"
    reranked = DecodeConfig(beam=5, rerank="runs/en-de,runs/en-de-2", rerank_weight=0.5)
    assert evaluation_name("test", reranked) == "test-beam5-rerank-en-de+en-de-2-w0.5"
    said = ", MBR by sentence chrf over the beam and 16 samples"
    assert chooser_text(dataclasses.asdict(decode)) == said  # the card's and the report's words
    assert (
        chooser_text({"rerank": "runs/en-de", "rerank_weight": 0.5})
        == ", reranked by runs/en-de at weight 0.5"
    )
    assert chooser_text(dataclasses.asdict(DecodeConfig(beam=5))) == ""


def test_the_channel_score_adds_the_weighted_reverse_term_to_the_beams_own_score():
    pool = [[Candidate("a b", -2.0, 3), Candidate("a", -1.0, 2)]]
    scores = channel_scores(pool, [[-0.4, -0.9]], 0.5, 1.5)
    assert scores == [[-2.0 / ((5 + 3) / 6) ** 1.5 - 0.2, -1.0 / ((5 + 2) / 6) ** 1.5 - 0.45]]
    unscorable = [[-0.4, float("-inf")]]  # the second pair is longer than the reverse model takes
    assert channel_scores(pool, unscorable, 0.0, 1.5) == channel_scores(pool, [[0.0, 0.0]], 0.0, 1.5)
    assert channel_scores(pool, unscorable, 0.5, 1.5)[0][1] == float("-inf")


class CountingTokenizer:
    """Text that is a count of pieces: "7" is seven."""

    def encode(self, lines: list[str]) -> list[list[int]]:
        return [[5] * int(line) for line in lines]

    encode_target = encode


def test_a_pair_that_fills_the_reverse_models_positions_is_scored_and_one_piece_more_is_not():
    """A reverse model of 8 positions takes 7 pieces a side (the source's eos, the target's bos): a
    candidate or a line of 7 pieces is scored as score_pairs scores it alone, per piece of the line
    with eos; one of 8 is -inf."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, layers=1, d_ff=16, dropout=0.0, max_positions=8)
    model, decode = Seq2Seq(cfg, vocab_size=10).eval(), DecodeConfig()

    def alone(candidate: int, line: int) -> float:
        scored = score_pairs(model, [[5] * candidate], [[5] * line], decode)[0]
        return scored.logprob / len(scored.token_logprobs)

    pool = [[Candidate(str(n), -1.0, n + 1) for n in counts] for counts in ([7, 8, 2], [2, 3], [2, 3])]
    found = reverse_logprobs([(CountingTokenizer(), model)], pool, ["3", "7", "8"], decode)
    inf = float("-inf")
    expected = [[alone(7, 3), inf, alone(2, 3)], [alone(2, 7), alone(3, 7)], [inf, inf]]
    assert found == [pytest.approx(row, abs=1e-5) for row in expected]


def test_several_reverse_runs_are_stored_relative_to_the_run_and_read_back_from_elsewhere(
    tmp_path, monkeypatch
):
    for name in ("runs/de-en", "runs/en-de", "other/en-de-2"):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "runs")
    stored = stored_runs("en-de, ../other/en-de-2", "de-en")
    assert stored == "../en-de,../../other/en-de-2"
    monkeypatch.chdir(tmp_path / "other")  # read from another folder, the run named from there
    assert runs_from(stored, Path("../runs/de-en")) == "../runs/en-de,en-de-2"


def test_a_run_folder_that_is_a_link_finds_its_reverse_runs_where_it_really_is(tmp_path, monkeypatch):
    """Issue 102: `ln -s ELSEWHERE/toy runs/toy-sym`, tuned to rerank by runs/toy-en-de."""
    for name in ("elsewhere/deeper/toy", "runs/toy-en-de"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "runs/toy-sym").symlink_to(tmp_path / "elsewhere/deeper/toy")
    monkeypatch.chdir(tmp_path)
    stored = stored_runs("runs/toy-en-de", "runs/toy-sym")
    assert stored == "../../../runs/toy-en-de"  # from the run's real folder
    assert runs_from(stored, Path("runs/toy-sym")) == "runs/toy-en-de"
    assert runs_from(stored, tmp_path / "runs/toy-sym") == str(tmp_path / "runs/toy-en-de")


def test_a_stored_reverse_run_beside_the_run_wins_over_one_at_that_path_from_the_working_folder(
    tmp_path, monkeypatch
):
    for name in ("runs/de-en", "runs/en-de", "elsewhere/en-de", "elsewhere/work"):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "elsewhere/work")  # ../en-de is a folder from here too
    assert runs_from("../en-de", tmp_path / "runs/de-en") == str(tmp_path / "runs/en-de")
    shutil.rmtree(tmp_path / "runs/en-de")  # an old card: named from the folder it was tuned in
    assert runs_from("../en-de", tmp_path / "runs/de-en") == "../en-de"


def test_a_run_reranked_by_itself_is_said_to_be(tmp_path, monkeypatch):
    (tmp_path / "runs/bit-both").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    chosen = {"rerank": runs_from(".", Path("runs/bit-both")), "rerank_weight": 2.0}
    assert chooser_text(chosen, "runs/bit-both") == ", reranked by itself at weight 2"
    assert chooser_text(chosen) == ", reranked by runs/bit-both at weight 2"
