"""mt/rescoring/rerank.py end to end, through trained runs: MBR and reranking choose what a hand computation
over the same candidates chooses, weight 0 reranks as the beam ranks, `mt tune` scores each of them as
the run then translates, and a run tuned to rerank translates, exports and serves as tuned (its parts
alone: tests/test_rerank.py)."""

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
from conftest import ROOT

from mt.cli import main
from mt.config import load_config, read_saved_config
from mt.data import load_split
from mt.evaluate import evaluate_run
from mt.plumbing.errors import ConfigError, RunDirError
from mt.rescoring.rerank import (
    expected_utilities,
)
from mt.run.card import read_card, update_card
from mt.run.folder import result_name
from mt.training.train import train
from mt.training.tuning import Grid, tune
from mt.translate import SearchRequest, search_lines
from mt.translator import Translator


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


def test_reranking_by_a_run_of_the_same_direction_or_none_is_one_line(fluent, tmp_path):
    with pytest.raises(RunDirError) as e:
        Translator.from_run(fluent, device="cpu", rerank=str(fluent), beam=5)
    assert str(e.value) == (
        f"rerank {fluent}: it translates de->en; reranking needs a run that translates en->de (or both "
        f"ways: data.both_directions)"
    )
    with pytest.raises(RunDirError) as e:
        Translator.from_run(fluent, device="cpu", rerank=str(tmp_path / "gone"), beam=5)
    assert str(e.value).startswith(f"rerank {tmp_path / 'gone'}: run directory not found;")


def test_tune_chooses_among_beam_mbr_and_reranking_as_the_run_then_translates(fluent, reverse, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(fluent, run)
    grid = Grid((1, 5), (1.0, 2.0), mbr=True, rerank=str(reverse))
    tuning = tune(run, device="cpu", grid=grid)
    tried = tuning["tried"]
    # MBR: 3 pools x 2 utilities; reranking: 2 pools (beams 5 and 10) x 4 weights x 2 length penalties
    assert len(tried) == 3 + 3 * 2 + 2 * 4 * 2
    assert {t["beam"] for t in tried if t["rerank"]} == {5, 10}
    src, ref = load_split(read_saved_config(run / "config.yaml").data, "val")
    translator = Translator.from_run(run, device="cpu", rerank=str(reverse), mbr="", beam=5)
    options = ("beam", "length_penalty", "mbr", "mbr_samples", "mbr_temperature", "rerank_weight")
    for row in [tried[3], tried[3 + 5], tried[-1]]:  # MBR chrF, MBR BLEU with 16, a reranking
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
    assert opened.decode.mbr == chosen["mbr"]
    assert opened.decode.rerank == (str(reverse) if chosen["rerank"] else "")
    result = evaluate_run(opened, "test")
    assert result["key"] == result_name(run, "test-tuned") and result["decode"]["mbr"] == chosen["mbr"]
    assert result["key"] in read_card(run)["results"]


@pytest.fixture(scope="module")
def reverse_pair(reverse, tmp_path_factory):
    """`reverse` and a copy whose best.pt weights are nudged: two reverse runs that score differently."""
    other = tmp_path_factory.mktemp("reverse2") / "en-de-2"
    shutil.copytree(reverse, other)
    ckpt = torch.load(other / "best.pt", weights_only=False)
    generator = torch.Generator().manual_seed(0)
    for weight in ckpt["model"].values():
        if weight.is_floating_point():
            weight += 0.05 * torch.randn(weight.shape, generator=generator)
    torch.save(ckpt, other / "best.pt")
    return reverse, other


def test_reranking_by_two_runs_scores_by_the_mean_of_each_alone(fluent, reverse_pair):
    src = load_split(read_saved_config(fluent / "config.yaml").data, "val")[0][:8]
    options = dict(beam=4, n_best=4, rerank_weight=0.5, length_penalty=1.0)
    first, second = (
        Translator.from_run(fluent, device="cpu", rerank=str(run), beam=4).nbest(src, **options)
        for run in reverse_pair
    )
    both = Translator.from_run(fluent, device="cpu", rerank=",".join(map(str, reverse_pair)), beam=4)
    found = both.nbest(src, **options)
    assert len(found) == len(src)
    assert dict(first[0]) != dict(second[0])  # the two runs do score differently
    for a, b, ab in zip(first, second, found):
        a, b = dict(a), dict(b)
        assert dict(ab) == pytest.approx({text: (a[text] + b[text]) / 2 for text in a}, abs=1e-5)


def test_weight_0_gives_the_beams_nbest_scores_exactly_where_hypotheses_are_cut(fluent, reverse):
    src = load_split(read_saved_config(fluent / "config.yaml").data, "val")[0][:20]
    plain = Translator.from_run(fluent, device="cpu")
    reranked = Translator.from_run(fluent, device="cpu", rerank=str(reverse), beam=4)
    for limit in ({"max_len_a": 0.0, "max_len_b": 3}, {}):
        options = dict(beam=4, n_best=4, length_penalty=1.5, **limit)
        hyps = search_lines(SearchRequest(plain.model, plain.tokenizer, src), plain.options(**options))
        assert not all(h.ended for line in hyps for h in line)  # cut at the limit (decode's tests: ended)
        assert reranked.nbest(src, rerank_weight=0.0, **options) == plain.nbest(src, **options)


def test_a_both_directions_run_reranks_as_a_reverse_run(fluent, tiny, tmp_path):
    both = tmp_path / "both"
    overrides = tiny + ["data.both_directions=true", "train.max_steps=4"]
    train(load_config(ROOT / "configs/toy.yaml", overrides), both)
    src = load_split(read_saved_config(fluent / "config.yaml").data, "val")[0][:6]
    translator = Translator.from_run(fluent, device="cpu", rerank=str(both), beam=4)
    back = Translator.from_run(both, device="cpu")
    found = translator.nbest(src, n_best=4, rerank_weight=0.5, length_penalty=0.0)
    beamed = Translator.from_run(fluent, device="cpu").nbest(src, beam=4, n_best=4, length_penalty=0.0)
    for line, ranked, candidates in zip(src, found, beamed):  # p(x | y): the en->de direction it learnt
        texts = [text for text, _ in candidates]
        backward = [s.logprob / len(s.token_logprobs) for s in back.score(texts, [line] * len(texts))]
        expected = {text: forward + 0.5 * b for (text, forward), b in zip(candidates, backward)}
        assert dict(ranked) == pytest.approx(expected, abs=1e-4)


def test_a_typo_in_tunes_reverse_run_fails_before_any_decoding(fluent, tmp_path, monkeypatch, capsys):
    import mt.training.tuning

    def decoded(*args, **kwargs):
        raise AssertionError("the grid was decoded before the reverse run was checked")

    monkeypatch.setattr(mt.training.tuning, "try_settings", decoded)
    run = tmp_path / "run"
    shutil.copytree(fluent, run)
    assert main(["tune", "--run", str(run), "--device", "cpu", "--rerank", str(tmp_path / "typo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"mt: error: rerank {tmp_path / 'typo'}: run directory not found;")
    assert main(["tune", "--run", str(run), "--device", "cpu", "--rerank", str(fluent)]) == 2
    assert "reranking needs a run that translates en->de" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tuned_to_rerank(fluent, reverse, tmp_path_factory):
    """A run tuned to rerank by a reverse run beside it, tuned from their parent folder with a relative
    --rerank, scored on test as tuned: runs/de-en (absolute path) and runs/en-de. Read only."""
    root = tmp_path_factory.mktemp("tuned")
    for source, name in ((fluent, "de-en"), (reverse, "en-de")):
        shutil.copytree(source, root / "runs" / name)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        tuning = tune("runs/de-en", device="cpu", grid=Grid((5,), (1.0,), rerank="runs/en-de"))
    finally:
        os.chdir(cwd)
    run = root / "runs" / "de-en"
    reranks = [row for row in tuning["tried"] if row["rerank"] and row["beam"] == 5]  # the cheaper pool
    update_card(run, tuning={**tuning, "chosen": max(reranks, key=lambda row: row["bleu"])})
    evaluate_run(Translator.from_run(run, device="cpu"), "test")
    return run


def test_a_tuned_reverse_run_is_stored_beside_the_run_and_opens_from_any_folder(
    tuned_to_rerank, tmp_path, monkeypatch
):
    assert read_card(tuned_to_rerank)["tuning"]["chosen"]["rerank"] == "../en-de"
    monkeypatch.chdir(tmp_path)
    translator = Translator.from_run(tuned_to_rerank, device="cpu")
    assert Path(translator.decode.rerank) == tuned_to_rerank.parent / "en-de"
    assert len(translator.reverse) == 1 and translator.decode.beam in (5, 10)
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n\n", encoding="utf-8")
    assert main(["translate", "--run", str(tuned_to_rerank), "--input", "in.txt", "--output", "out.txt"]) == 0
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 2
    assert main(["export", "--run", str(tuned_to_rerank), "--out", str(tmp_path / "ct2")]) == 0


@pytest.mark.parametrize("given", [{"beam": 1}, {"sample": "topk:3"}])
def test_one_candidate_a_line_drops_a_tuned_reranking_and_says_so(tuned_to_rerank, given, caplog):
    with caplog.at_level(logging.WARNING, logger="mt.translator"):
        translator = Translator.from_run(tuned_to_rerank, device="cpu", **given)
    assert (translator.decode.rerank, translator.decode.beam, translator.reverse) == ("", 1, [])
    said = [r.getMessage() for r in caplog.records if r.name == "mt.translator"]
    spelled = ", ".join(f"{k}={v}" for k, v in given.items())
    assert said == [
        f"{spelled} gives one candidate a line: translating without the run's rerank="
        f"{translator.config.decode.rerank}"
    ]
    reranked = Translator.from_run(tuned_to_rerank, device="cpu")
    assert reranked.translate(["Ein Hund rennt ."], **given) == translator.translate(["Ein Hund rennt ."])
    unranked = Translator.from_run(tuned_to_rerank, device="cpu", rerank="")  # said nothing: asked for
    assert reranked.translate(["Ein Hund ."], rerank="") == unranked.translate(["Ein Hund ."])


def test_the_command_line_drops_a_tuned_reranking_for_beam_1(tuned_to_rerank, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n", encoding="utf-8")
    assert (
        main(["translate", "--run", str(tuned_to_rerank), "--input", str(tmp_path / "in.txt"), "--beam", "1"])
        == 0
    )
    assert (
        capsys.readouterr().out
        == "\n".join(
            Translator.from_run(tuned_to_rerank, device="cpu", beam=1, rerank="").translate(
                ["Ein Hund rennt ."]
            )
        )
        + "\n"
    )


REQUIRED = {f"tuning.{key}" for key in ("split", "checkpoint", "checkpoint_sha256", "chosen", "tried")} | {
    f"tuning.chosen.{key}" for key in ("beam", "length_penalty", "length_ratio", "bleu", "chrf")
}


LEAST = {"beam": ">= 1", "length_penalty": ">= 0.0", "mbr_samples": ">= 0", "mbr_temperature": "> 0.0"}


LEAST["rerank_weight"] = ">= 0.0"


UNEVALUATED = {"tuning.chosen.rerank", "tuning.chosen.rerank_weight"}


def damaged_cards(card: dict):
    """(key path, what was done, the one-line error expected or "" for none, the card) for each key of
    the card's tuning and its chosen setting dropped and retyped (a str as an int, a number as a str),
    and each ranged option of the chosen setting set below its range."""
    tuning = card["tuning"]
    for where, record in (("tuning", tuning), ("tuning.chosen", tuning["chosen"])):
        for key, value in record.items():
            path = f"{where}.{key}"
            wrong = 1 if isinstance(value, str) else "1"
            below = -1 if type(value) is int else -1.0
            changes = [
                ("dropped", None, f"{path} is missing" if path in REQUIRED else ""),
                ("retyped", wrong, f"{path}: expected "),
            ]
            if where == "tuning.chosen" and key in LEAST:
                changes.append(
                    ("below its range", below, f"{path}: {below} is out of range, must be {LEAST[key]}")
                )
            for change, edit, error in changes:
                damaged = json.loads(json.dumps(card))
                target = damaged["tuning"] if where == "tuning" else damaged["tuning"]["chosen"]
                target.pop(key) if edit is None else target.__setitem__(key, edit)
                yield path, change, error, damaged


def test_every_damaged_key_of_a_tuned_to_rerank_card_is_read_or_refused_in_one_line(
    tuned_to_rerank, tmp_path, capsys
):
    run = tmp_path / "de-en"
    shutil.copytree(tuned_to_rerank, run)
    shutil.copytree(tuned_to_rerank.parent / "en-de", tmp_path / "en-de")
    card = read_card(run)
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n", encoding="utf-8")
    cases = list(damaged_cards(card))
    assert len(cases) > 20 and {path for path, *_ in cases} >= REQUIRED
    for path, change, error, damaged in cases:
        (run / "card.json").write_text(json.dumps(damaged), encoding="utf-8")
        for command in (
            ["report", str(run), "--out", str(tmp_path / "report.md")],
            ["translate", "--run", str(run), "--input", str(tmp_path / "in.txt")],
        ):
            code = main(command)
            err = capsys.readouterr().err.strip().splitlines()
            what = (path, change, command[0], err[-1:])
            if path in UNEVALUATED and change == "dropped" and command[0] == "report":
                assert code == 2 and err[-1].startswith(f"mt: error: {run}: no 'test-beam5"), what
                assert f"run `mt evaluate --run {run} --split test` first" in err[-1], what
                continue
            assert code == (2 if error else 0), what
            if error:
                assert err[-1].startswith(f"mt: error: {run / 'card.json'}: damaged ({error}"), what


def test_a_run_tuned_to_rerank_exports_to_transformers_saying_what_it_leaves_out(tuned_to_rerank, tmp_path):
    pytest.importorskip("transformers")
    run = tmp_path / "de-en"
    shutil.copytree(tuned_to_rerank, run)  # its reverse run is not beside the copy: the export needs none
    assert main(["export", "--run", str(run), "--format", "hf"]) == 0
    chosen = read_card(run)["tuning"]["chosen"]
    generation = json.loads((run / "hf" / "generation_config.json").read_text())
    assert generation["num_beams"] == chosen["beam"]
    card = (run / "hf" / "README.md").read_text()
    assert "left out: the run's decode.rerank 'en-de'" in card and str(tmp_path) not in card  # no path


def test_a_linked_run_tuned_to_rerank_translates_from_another_folder(tuned_to_rerank, tmp_path, monkeypatch):
    (tmp_path / "links").mkdir()
    (tmp_path / "links/de-en").symlink_to(tuned_to_rerank)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n", encoding="utf-8")
    assert main(["translate", "--run", "links/de-en", "--input", "in.txt", "--output", "out.txt"]) == 0
    plain = Translator.from_run(tuned_to_rerank, device="cpu")
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == plain.translate(["Ein Hund rennt ."])[
        0
    ] + "\n"


@pytest.mark.parametrize(
    "given, said",
    [
        ({"mbr": "chrf"}, "mbr=chrf chooses the translation"),
        ({"beam": 1}, "beam=1 gives one candidate a line"),
        ({"sample": "topk:3"}, "sample=topk:3 gives one candidate a line"),
    ],
)
def test_a_given_chooser_wins_over_a_tuned_reranking_and_says_so(tuned_to_rerank, given, said, caplog):
    with caplog.at_level(logging.WARNING, logger="mt.translator"):
        translator = Translator.from_run(tuned_to_rerank, device="cpu", **given)
    assert (translator.decode.rerank, translator.reverse) == ("", [])
    run = translator.config.decode.rerank
    assert [r.getMessage() for r in caplog.records if r.name == "mt.translator"] == [
        f"{said}: translating without the run's rerank={run}"
    ]
    with pytest.raises(
        ConfigError, match="^mbr=chrf and rerank each choose the translation; give one of them$"
    ):
        Translator.from_run(tuned_to_rerank, device="cpu", mbr="chrf", rerank=run)


def test_the_command_line_gives_mbr_on_a_run_tuned_to_rerank(tuned_to_rerank, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n", encoding="utf-8")
    assert (
        main(
            ["translate", "--run", str(tuned_to_rerank), "--input", str(tmp_path / "in.txt"), "--mbr", "chrf"]
        )
        == 0
    )
    mbr = Translator.from_run(tuned_to_rerank, device="cpu", mbr="chrf", rerank="")
    assert capsys.readouterr().out == mbr.translate(["Ein Hund rennt ."])[0] + "\n"


def test_a_line_in_parts_is_reranked_part_by_part_and_weight_0_scores_as_the_beam(fluent, reverse):
    from mt.rescoring.rerank import line_parts

    long = " ".join(["Der Hund sieht die Katze ."] * 40)  # more pieces than data.max_len: in parts
    beam = Translator.from_run(fluent, device="cpu", beam=3)
    parts = line_parts(SearchRequest(beam.searcher, beam.tokenizer, [long], beam.max_len))[1]
    assert len(parts) > 1
    reranked = Translator.from_run(fluent, device="cpu", beam=3, rerank=str(reverse), rerank_weight=5.0)
    assert reranked.translate([long, ""]) == [" ".join(reranked.translate(parts)), ""]
    ((text, score),) = reranked.nbest([long], rerank_weight=0.0)[0]
    ((beam_text, beam_score),) = beam.nbest([long])[0]
    # the parts' choices are joined with a space, the search's parts piece to piece
    assert text.replace(" ", "") == beam_text.replace(" ", "") and score == pytest.approx(
        beam_score, abs=1e-4
    )


def test_a_request_may_clear_the_servers_reranking_or_choose_by_mbr_instead(tuned_to_rerank):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mt.serving.app import create_app, server_info
    from mt.serving.limits import ServeLimits
    from mt.serving.worker import Worker

    worker = Worker(Translator.from_run(tuned_to_rerank, device="cpu"), ServeLimits())
    worker.start()
    line, run = "Ein Hund rennt .", worker.translator.decode.rerank
    with TestClient(create_app(worker, server_info(worker.translator, worker.limits))) as client:

        def post(**options):
            return client.post("/translate", json={"lines": [line], **options})

        mbr = Translator.from_run(tuned_to_rerank, device="cpu", mbr="chrf", beam=5, rerank="")
        assert post(mbr="chrf", beam=5).json()["translations"][0]["translation"] == mbr.translate([line])[0]
        plain = Translator.from_run(tuned_to_rerank, device="cpu", rerank="")
        assert post(rerank="").json()["translations"][0]["translation"] == plain.translate([line])[0]
        assert post(rerank=run).status_code == 200
        refused = post(rerank="runs/other")
        assert refused.status_code == 422 and refused.json() == {
            "error": f"rerank: 'runs/other' is not the server's reranking ({run!r}); a request may clear it "
            f'("") or name the server\'s; rerank by another run with mt serve --rerank RUN',
            "option": "rerank",
        }
        both = post(mbr="chrf", rerank=run)
        assert both.json()["error"] == "mbr: chrf and rerank each choose the translation; give one of them"


def test_serve_refuses_a_run_whose_own_beam_is_over_max_beam_before_it_listens(
    tuned_to_rerank, capsys, monkeypatch
):
    pytest.importorskip("fastapi")

    def served(worker):
        raise AssertionError("served a run whose own beam is over the limit")

    monkeypatch.setattr("mt.serving.worker.Worker.run", served)
    beam = Translator.from_run(tuned_to_rerank, device="cpu").decode.beam
    assert main(["serve", "--run", str(tuned_to_rerank), "--port", "0", "--max-beam", str(beam - 1)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"mt: error: the run translates with beam {beam}, more than --max-beam {beam - 1}, so every request "
        f"that names no beam would be refused; give --max-beam {beam} or more, or --beam {beam - 1} to "
        "serve a smaller beam"
    )


def test_the_ctranslate2_engine_given_on_a_run_tuned_to_rerank_searches_alone(
    tuned_to_rerank, tmp_path, capsys
):
    pytest.importorskip("ctranslate2")
    run = tmp_path / "de-en"
    shutil.copytree(tuned_to_rerank, run)  # no reverse run beside it: the engine needs none
    assert main(["export", "--run", str(run)]) == 0
    (tmp_path / "in.txt").write_text("Ein Hund rennt .\n", encoding="utf-8")
    capsys.readouterr()
    assert (
        main(["translate", "--run", str(run), "--input", str(tmp_path / "in.txt"), "--engine", "ctranslate2"])
        == 0
    )
    out, err = capsys.readouterr()
    ct2 = Translator.from_run(run, device="cpu", engine="ctranslate2")
    assert (ct2.decode.rerank, ct2.reverse, out) == ("", [], ct2.translate(["Ein Hund rennt ."])[0] + "\n")
    assert "engine=ctranslate2 chooses among no candidates: translating without the run's rerank=" not in err
    assert "--engine ctranslate2 chooses among no candidates: translating without the run's --rerank " in err
