"""mt/rerank.py: MBR's utilities equal sacreBLEU's sentence scores, MBR and reranking choose what a
hand computation over the same candidates chooses, weight 0 reranks as the beam ranks, and `mt tune`
scores each of them as the run then translates."""

import dataclasses
import itertools
import shutil

import pytest
import sacrebleu
from conftest import ROOT

from mt.config import load_config, read_saved_config
from mt.data import load_split
from mt.decode_config import DecodeConfig, decoding
from mt.evaluate import evaluate_run
from mt.plumbing.errors import ConfigError, RunDirError
from mt.rerank import Candidate, bleu_matrix, channel_scores, choices, chrf_matrix, expected_utilities
from mt.run.card import read_card
from mt.run.folder import result_name
from mt.run.names import chooser_text, evaluation_name
from mt.training.train import train
from mt.training.tuning import make_grid, tune
from mt.translator import Translator

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
    from mt.decode_config import COMMAND_LINE

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


@pytest.fixture(scope="module")
def reverse(tiny, tmp_path_factory):
    """A toy run trained the other way (en->de), 30 updates. Read only."""
    run = tmp_path_factory.mktemp("reverse") / "en-de"
    overrides = tiny + ["data.src_lang=en", "data.tgt_lang=de", "train.max_steps=30", "train.lr=0.005"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), run)
    return run


def test_mbr_chooses_the_candidate_of_highest_expected_chrf_among_the_beam_and_the_samples(fluent):
    translator = Translator.from_run(fluent, device="cpu")
    src = load_split(translator.config.data, "val")[0][:12] + [""]
    beamed = translator.nbest(src, beam=4, n_best=4, length_penalty=1.0)
    drawn = translator.nbest(src, beam=1, sample="topp:1", n_best=3, temperature=0.7, seed=2)
    chosen = translator.translate(
        src, beam=4, length_penalty=1.0, mbr="chrf", mbr_samples=3, mbr_temperature=0.7, seed=2
    )
    assert len(chosen) == len(src) and chosen[-1] == ""
    for line, b, d in zip(chosen, beamed, drawn):
        pool = [text for text, _ in b + d]
        utilities = expected_utilities(pool, "chrf", "13a")
        assert line == pool[utilities.index(max(utilities))]


def test_reranking_scores_each_candidate_by_both_directions_and_weight_0_ranks_as_the_beam(fluent, reverse):
    src = load_split(read_saved_config(fluent / "config.yaml").data, "val")[0][:10]
    plain = Translator.from_run(fluent, device="cpu")
    reranked = Translator.from_run(fluent, device="cpu", rerank=str(reverse), beam=4)
    assert reranked.translate(src, beam=4, rerank_weight=0.0) == plain.translate(src, beam=4)
    back = Translator.from_run(reverse, device="cpu")
    found = reranked.nbest(src, beam=4, n_best=4, rerank_weight=0.5, length_penalty=0.0)
    beamed = plain.nbest(src, beam=4, n_best=4, length_penalty=0.0)  # scores: raw log-probabilities
    for line, ranked, candidates in zip(src, found, beamed):
        texts = [text for text, _ in candidates]
        backward = [s.logprob / len(s.token_logprobs) for s in back.score(texts, [line] * len(texts))]
        expected = [forward + 0.5 * b for (_, forward), b in zip(candidates, backward)]  # per piece of x
        best = sorted(range(len(texts)), key=lambda j: -expected[j])
        assert [text for text, _ in ranked] == [texts[j] for j in best]
        assert [score for _, score in ranked] == pytest.approx([expected[j] for j in best], abs=1e-4)


def test_the_channel_score_adds_the_weighted_reverse_term_to_the_beams_own_score():
    pool = [[Candidate("a b", -2.0, 3), Candidate("a", -1.0, 2)]]
    scores = channel_scores(pool, [[-0.4, -0.9]], 0.5, 1.5)
    assert scores == [[-2.0 / ((5 + 3) / 6) ** 1.5 - 0.2, -1.0 / ((5 + 2) / 6) ** 1.5 - 0.45]]
    unscorable = [[-0.4, float("-inf")]]  # the second pair is longer than the reverse model takes
    assert channel_scores(pool, unscorable, 0.0, 1.5) == channel_scores(pool, [[0.0, 0.0]], 0.0, 1.5)
    assert channel_scores(pool, unscorable, 0.5, 1.5)[0][1] == float("-inf")


def test_reranking_by_a_run_of_the_same_direction_or_none_is_one_line(fluent, tmp_path):
    with pytest.raises(RunDirError) as e:
        Translator.from_run(fluent, device="cpu", rerank=str(fluent), beam=5)
    assert (
        str(e.value) == f"rerank {fluent}: it translates de->en; reranking needs a run that translates en->de"
    )
    with pytest.raises(RunDirError) as e:
        Translator.from_run(fluent, device="cpu", rerank=str(tmp_path / "gone"), beam=5)
    assert str(e.value).startswith(f"rerank {tmp_path / 'gone'}: run directory not found;")


def test_tune_chooses_among_beam_mbr_and_reranking_as_the_run_then_translates(fluent, reverse, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(fluent, run)
    grid = make_grid((1, 5), (1.0, 2.0))
    tuning = tune(run, device="cpu", grid=grid, more=choices(True, str(reverse)))
    tried = tuning["tried"]
    # MBR: 3 pools x 2 utilities; reranking: 2 pools (beams 5 and 10) x 4 weights x 5 length penalties
    assert len(tried) == len(grid) + 3 * 2 + 2 * 4 * 5
    src, ref = load_split(read_saved_config(run / "config.yaml").data, "val")
    translator = Translator.from_run(run, device="cpu", rerank=str(reverse), mbr="", beam=5)
    options = ("beam", "length_penalty", "mbr", "mbr_samples", "mbr_temperature", "rerank_weight")
    for row in [tried[len(grid)], tried[len(grid) + 5], tried[-1]]:  # MBR chrF, MBR BLEU with 16, a reranking
        if row["mbr"]:
            hyps = Translator.from_run(run, device="cpu", rerank="").translate(
                src, **{k: row[k] for k in options}
            )
        else:
            hyps = translator.translate(src, **{k: row[k] for k in options})
        assert row["bleu"] == round(sacrebleu.corpus_bleu(hyps, [ref]).score, 2)
    chosen = tuning["chosen"]
    assert chosen["bleu"] == max(t["bleu"] for t in tried)
    opened = Translator.from_run(run, device="cpu")
    assert {k: getattr(opened.decode, k) for k in ("mbr", "rerank")} == {
        k: chosen[k] for k in ("mbr", "rerank")
    }
    result = evaluate_run(opened, "test")
    assert result["key"] == result_name(run, "test-tuned") and result["decode"]["mbr"] == chosen["mbr"]
    assert result["key"] in read_card(run)["results"]
