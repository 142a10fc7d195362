"""mt/hf.py: `mt export --format hf`. A toy run of each norm (pre: Pegasus, post: Marian) and output
layer (all, target), exported and reloaded from disk by Transformers alone: its tokenizer gives mt's
ids, its greedy `generate` gives `mt translate --beam 1`'s lines, its teacher-forced log-probabilities
`mt score`'s, and its beam at length penalty 0 (where mt's and Transformers' normalisations agree)
mt's beam. The length penalty matched with --score is checked on hand-written hypotheses and on a model
that ends them with eos (the toy runs here, 30 updates, end none). Refusals are one line."""

import dataclasses
import json
import os

import pytest
import sacrebleu
import torch
from conftest import ROOT, table

from mt.cli import main
from mt.config import BOS, EOS, PAD, config_to_dict, load_config, read_saved_config
from mt.data import load_split
from mt.decode import Hypothesis
from mt.decode_config import DecodeConfig
from mt.hf.card import generated
from mt.hf.export import MODEL_FIELDS, permuted, write_model
from mt.hf.generation import (
    HF_PENALTIES,
    caveats,
    decode_fields,
    generation_config,
    hyps_agree,
    matched_length_penalty,
)
from mt.model import sinusoidal_positions
from mt.plumbing.engine_fields import Approximated, Carried, Unsupported
from mt.training.train import train
from mt.training.tuning import Grid, tune
from mt.translate import SearchRequest, search_lines
from mt.translator import Translator

transformers = pytest.importorskip("transformers")
LINES = ["Der Hund sieht die Katze .", "Ein Mann läuft im Park .", "Zwei Frauen essen .", ""]


@pytest.fixture(
    scope="module",
    params=[("pre", "all"), ("pre", "target"), ("post", "all"), ("post", "target")],
    ids=["pre-all", "pre-target", "post-all", "post-target"],
)
def exported(request, tiny, tmp_path_factory):
    """(run, export folder) of a 150-update toy run of one norm and output layer."""
    norm, pieces = request.param
    run = tmp_path_factory.mktemp(f"hf-{norm}-{pieces}") / "run"
    overrides = tiny + [
        "train.max_steps=30",
        "train.lr=5e-3",
        f"model.norm={norm}",
        f"model.output_pieces={pieces}",
    ]
    train(load_config(ROOT / "configs/toy.yaml", overrides + ["model.layers=2"]), run)
    assert main(["export", "--run", str(run), "--format", "hf"]) == 0
    return run, run / "hf"


def reloaded(folder):
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def test_mts_sinusoid_permuted_is_transformers_halves():
    table = sinusoidal_positions(16, 8)
    assert torch.equal(table[:, permuted(8)][:, :4], table[:, 0::2])  # sines first
    assert torch.equal(table[:, permuted(8)][:, 4:], table[:, 1::2])  # then cosines


def test_greedy_scores_and_beam_through_transformers_equal_mts(exported):
    run, folder = exported
    model, tokenizer = reloaded(folder)
    mine = Translator.from_run(run, device="cpu")
    assert [tokenizer(line)["input_ids"] for line in LINES] == [
        ids + [3] for ids in mine.tokenizer.encode(LINES)
    ]
    decode = mine.config.decode

    def generated(line: str, **options) -> str:  # one line, at mt's own length limit a * S + b for it
        batch = tokenizer([line], return_tensors="pt")
        limit = int(decode.max_len_a * batch["input_ids"].size(1) + decode.max_len_b)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=limit, do_sample=False, **options)
        return tokenizer.decode(out[0], skip_special_tokens=True)

    assert [generated(line, num_beams=1) for line in LINES[:3]] == mine.translate(LINES[:3], beam=1)
    beam = [generated(line, num_beams=3, length_penalty=0.0, early_stopping=True) for line in LINES[:3]]
    assert beam == mine.translate(LINES[:3], beam=3, length_penalty=0.0)
    references = mine.translate(LINES[:3], beam=1)
    for line, reference, scored in zip(LINES, references, mine.score(LINES[:3], references)):
        target = mine.tokenizer.encode_target([reference])[0]
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor([mine.tokenizer.encode([line])[0] + [3]]),
                decoder_input_ids=torch.tensor([[2] + target]),
            ).logits[0]
        theirs = torch.log_softmax(logits.float(), -1)[range(len(target) + 1), target + [3]]
        assert theirs.tolist() == pytest.approx(scored.token_logprobs, abs=1e-4)


def test_min_len_through_transformers_min_new_tokens_is_mts_greedy(trained_model, tokenizer, toy, tmp_path):
    """decode.min_len carried as min_new_tokens: greedy through generate equals mt's greedy on lines a
    model that ends its hypotheses ends early (eos banned before the minimum in both; argmax does not
    see where), and each is that long."""
    lines = toy["test"][0][:20]
    decode = DecodeConfig(beam=1)

    def pieces(cfg: DecodeConfig) -> list[list[int]]:  # each line's pieces as mt's search wrote them
        return [h[0].tokens for h in search_lines(SearchRequest(trained_model, tokenizer, lines), cfg)]

    at_least = min(map(len, pieces(decode))) + 3
    longer = dataclasses.replace(decode, min_len=at_least)
    write_model(
        trained_model, tokenizer, generation_config(longer, trained_model.cfg.max_positions), tmp_path
    )
    model, theirs_tokenizer = reloaded(tmp_path)
    assert model.generation_config.min_new_tokens == at_least
    theirs = []
    for line in lines:  # at mt's own length limit a * S + b for it, as generate has none of its own
        batch = theirs_tokenizer([line], return_tensors="pt")
        limit = int(decode.max_len_a * batch["input_ids"].size(1) + decode.max_len_b)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=limit)
        theirs.append([t for t in out[0].tolist()[1:] if t not in (EOS, PAD)])
    ours = pieces(longer)
    assert theirs == ours
    assert min(map(len, ours)) >= at_least > min(map(len, pieces(decode)))


def test_the_export_holds_weights_config_generation_tokenizer_and_card(exported):
    run, folder = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "vocab.json", "README.md"} <= names
    umask = os.umask(0)
    os.umask(umask)
    assert (folder / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # not safetensors' 0600
    card = json.loads((run / "card.json").read_text())
    assert json.loads((folder / "generation_config.json").read_text())["num_beams"] == card.get(
        "tuning", {}
    ).get("chosen", {}).get("beam", 1)
    assert "## Scores" in (folder / "README.md").read_text() and not (folder.parent / "hf.part").exists()
    decided = json.loads((folder / "mt_export.json").read_text())
    assert (decided["scored"], decided["matched"], decided["scores"]) == (False, None, None)
    card = (folder / "README.md").read_text()
    assert "None: exported without `--score`. `mt export --format hf --score` measures" in card
    assert str(run.parent) not in card and str(folder) not in card  # no path of the machine it was made on


def test_refusals_are_one_line(exported, capsys, tmp_path):
    run, folder = exported
    assert main(["export", "--run", str(run), "--format", "hf"]) == 2
    assert (
        capsys.readouterr().err == f"mt: error: {folder}: already exists; remove it or give another --out\n"
    )
    assert (
        main(
            [
                "export",
                "--run",
                str(run),
                "--format",
                "hf",
                "--quantization",
                "int8",
                "--out",
                str(tmp_path / "q"),
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith("mt: error: --quantization: Transformers' export is float32")
    )


def test_every_model_field_is_in_the_table():
    from dataclasses import fields

    from mt.config import ModelConfig

    assert {f.name for f in fields(ModelConfig)} == set(MODEL_FIELDS)


def test_an_option_transformers_cannot_hold_is_refused(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    train(
        load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=2", "model.tie_embeddings=false"]),
        run,
    )
    assert main(["export", "--run", str(run), "--format", "hf"]) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(
            "mt: error: model.tie_embeddings: False cannot be exported with --format hf (Pegasus and Marian"
        )
    )
    assert not (run / "hf").exists()


def test_every_decode_field_is_in_the_export_table():
    from dataclasses import fields

    assert {f.name for f in fields(DecodeConfig)} == set(decode_fields(64))


def test_generation_config_leaves_out_each_argument_the_run_gives_no_value():
    """Greedy has no length penalty and no_repeat_ngram 0 bans nothing: their entries value them None,
    so generation_config.json holds neither (Transformers would read a null as set)."""
    assert generation_config(DecodeConfig(beam=1, no_repeat_ngram=0), 64) == {
        "decoder_start_token_id": BOS,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "num_beams": 1,
        "max_new_tokens": 63,
    }


def other_value(value):
    """A value of `value`'s type that is not it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 2
    return "chrf" if value == "" else value + "x"


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(DecodeConfig)])
def test_each_decode_option_is_carried_approximated_or_said_left_out(name):
    base = DecodeConfig(beam=4)
    decode = dataclasses.replace(base, **{name: other_value(getattr(base, name))})
    entry = decode_fields(64)[name]
    generation, said = generation_config(decode, 64), caveats(decode, 64)
    if isinstance(entry, Carried):  # and Approximated, with its caveat said
        assert generation[entry.argument] == entry.value(decode)
        assert not isinstance(entry, Approximated) or entry.caveat in said
    elif isinstance(entry, Unsupported):
        assert f"left out: the run's decode.{name} {getattr(decode, name)!r} ({entry.why})" in said
    else:  # ByMt: nothing of the export changes
        assert (generation, said) == (generation_config(base, 64), caveats(base, 64))


@pytest.fixture(scope="module")
def tuned_export(tiny, tmp_path_factory):
    """(run, export folder) of a toy run tuned to beam 3, length penalty 1.5 before its export."""
    run = tmp_path_factory.mktemp("hf-tuned") / "run"
    train(load_config(ROOT / "configs/toy.yaml", tiny + ["train.max_steps=30", "train.lr=5e-3"]), run)
    tune(run, device="cpu", grid=Grid((3,), (1.5,)))
    assert main(["export", "--run", str(run), "--format", "hf", "--quantization", "float32", "--score"]) == 0
    return run, run / "hf"


def test_the_export_carries_the_tuned_beam_and_the_penalty_that_ranks_as_mts(tuned_export):
    run, folder = tuned_export
    generation = json.loads((folder / "generation_config.json").read_text())
    decided = json.loads((folder / "mt_export.json").read_text())
    matched = decided["matched"]
    assert (generation["num_beams"], generation["early_stopping"]) == (3, True)
    assert generation["length_penalty"] == matched["penalty"] and matched["mt"] == 1.5
    mine = Translator.from_run(run, device="cpu")
    src = load_split(mine.config.data, "val")[0]
    beams = search_lines(SearchRequest(mine.model, mine.tokenizer, src, max_len=64), mine.options(n_best=3))
    agree = {a: sum(hyps_agree(hyps, a) for hyps in beams) for a in HF_PENALTIES}
    assert (matched["lines"], matched["of"]) == (agree[matched["penalty"]], len(src))
    assert matched["lines"] == max(agree.values())
    card = (folder / "README.md").read_text()
    assert f"length_penalty {matched['penalty']:g} ranks mt's own beam's hypotheses" in card


def test_the_cards_scores_are_the_folders_own_generate(tuned_export):
    run, folder = tuned_export
    cfg = load_config(folder / "mt_config.yaml")
    assert config_to_dict(cfg) == config_to_dict(read_saved_config(run / "config.yaml"))
    src, ref = load_split(cfg.data, "test")
    model, tokenizer = reloaded(folder)
    hyps = []
    for start in range(0, len(src), 8):  # batches of other sizes than the export's: padding changes nothing
        batch = tokenizer(src[start : start + 8], return_tensors="pt", padding=True, truncation=True)
        with torch.no_grad():
            hyps += tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)
    card = (folder / "README.md").read_text()
    row = table(card)[0]
    assert {key: row[key] for key in ("sentences", "num_beams", "BLEU", "chrF")} == {
        "sentences": str(len(src)),
        "num_beams": "3",
        "BLEU": f"{sacrebleu.corpus_bleu(hyps, [ref]).score:.2f}",
        "chrF": f"{sacrebleu.corpus_chrf(hyps, [ref]).score:.2f}",
    }
    bleu = sacrebleu.BLEU()
    bleu.corpus_score(hyps, [ref])
    assert f"`{bleu.get_signature()}`" in card


def test_an_export_whose_corpus_is_elsewhere_is_written_and_says_it_holds_no_scores(exported, tmp_path):
    run, _ = exported
    moved = Translator.from_run(run, device="cpu", overrides=[f"data.dir={tmp_path / 'gone'}"])
    folder = moved.export(out=tmp_path / "hf", format="hf", score=True)
    card = (folder / "README.md").read_text()
    assert "None: the run's test split could not be read when the folder was exported." in card
    assert json.loads((folder / "mt_export.json").read_text())["scores"] is None
    assert reloaded(folder)[0].generation_config.num_beams == 1


def ends(tokens: int, logprob: float, ended: bool = True) -> Hypothesis:
    return Hypothesis(list(range(4, 4 + tokens)), logprob, logprob, ended)


# Two lines' beams, mt's 1-best first. Transformers' formula (a length counts eos) ranks it first on the
# first where 1 / 2 ** a <= 2.4 / 4 ** a (a <= log2 2.4 = 1.26), on the second where 2 / 4 ** a <= 0.9 /
# 2 ** a (a >= log2 2.22 = 1.15): on both at 1.2 and 1.25 only. Without eos: at 0.75 only.
SCRIPTED = ([ends(1, -1.0), ends(3, -2.4)], [ends(3, -2.0), ends(1, -0.9)])


def scripted_search(monkeypatch) -> list:
    """mt's beam replaced by SCRIPTED's beams, line by line in turn; returns the decodings it was asked."""
    asked = []

    def search(request, decode):
        asked.append(decode)
        return [SCRIPTED[i % 2] for i in range(len(request.lines))]

    monkeypatch.setattr("mt.hf.generation.search_lines", search)
    return asked


def test_transformers_formula_counts_eos_in_a_finished_hypothesis_only():
    assert hyps_agree(SCRIPTED[0], 1.0)  # -1 / 2 beats -2.4 / 4; without eos -2.4 / 3 would beat -1 / 1
    assert hyps_agree([ends(1, -1.0), ends(3, -1.8, ended=False)], 1.0)  # -0.5 beats cut -1.8 / 3
    assert not hyps_agree([ends(1, -1.0), ends(3, -1.8)], 1.0)  # -0.45 beats -0.5


@pytest.mark.parametrize("mt_penalty, matched", [(1.5, 1.25), (0.0, 1.2), (1.2, 1.2)])
def test_the_matched_penalty_is_the_most_agreeing_one_nearest_mts(monkeypatch, mt_penalty, matched):
    asked = scripted_search(monkeypatch)
    decode = DecodeConfig(beam=2, length_penalty=mt_penalty)
    assert matched_length_penalty(SearchRequest(None, None, ["a", "b"] * 3, 64), decode) == (matched, 6)
    assert [d.n_best for d in asked] == [2]  # mt's whole beam, its 1-best first


def test_matching_on_a_model_that_ends_hypotheses(trained_model, tokenizer, toy):
    src, decode = toy["val"][0][:40], DecodeConfig(beam=3, length_penalty=1.5)
    beams = search_lines(
        SearchRequest(trained_model, tokenizer, src), dataclasses.replace(decode, n_best=3), use_cache=64
    )
    assert all(h.ended for hyps in beams for h in hyps)
    assert len({len(h.tokens) for hyps in beams for h in hyps}) > 5

    def agree(alpha: float) -> int:  # Transformers' formula, written out: length = pieces + eos
        return sum(
            max(range(3), key=lambda k: hyps[k].logprob / (len(hyps[k].tokens) + 1) ** alpha) == 0
            for hyps in beams
        )

    counts = {a: agree(a) for a in HF_PENALTIES}
    assert len(set(counts.values())) > 1  # the penalties are told apart here
    most = max(counts.values())
    nearest = min((a for a in HF_PENALTIES if counts[a] == most), key=lambda a: abs(a - 1.5))
    assert matched_length_penalty(SearchRequest(trained_model, tokenizer, src, 64), decode) == (nearest, most)


def test_the_matched_penalty_is_the_one_the_folder_carries(tuned_export, monkeypatch, tmp_path):
    run, _ = tuned_export
    scripted_search(monkeypatch)
    monkeypatch.setattr("mt.hf.card.generated", lambda folder, lines: [""] * len(lines))  # scored elsewhere
    assert (
        main(["export", "--run", str(run), "--format", "hf", "--score", "--out", str(tmp_path / "hf")]) == 0
    )
    decided = json.loads((tmp_path / "hf" / "mt_export.json").read_text())
    assert decided["matched"] == {"penalty": 1.25, "mt": 1.5, "lines": 40, "of": 40}
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert generation["length_penalty"] == 1.25
    assert reloaded(tmp_path / "hf")[0].generation_config.length_penalty == 1.25


def test_a_greedy_run_carries_no_length_penalty_and_matches_none(exported, monkeypatch, tmp_path):
    run, _ = exported
    scripted_search(monkeypatch)
    monkeypatch.setattr("mt.hf.card.generated", lambda folder, lines: [""] * len(lines))
    assert "length_penalty" not in generation_config(DecodeConfig(beam=1, length_penalty=1.5), 64)
    assert (
        main(["export", "--run", str(run), "--format", "hf", "--score", "--out", str(tmp_path / "hf")]) == 0
    )
    decided = json.loads((tmp_path / "hf" / "mt_export.json").read_text())
    assert (decided["scored"], decided["matched"]) == (True, None)
    assert decided["generation"]["num_beams"] == 1 and "length_penalty" not in decided["generation"]


def test_an_existing_folder_is_refused_before_anything_is_decoded(tuned_export, monkeypatch, capsys):
    run, folder = tuned_export

    def decoded(*args, **kwargs):
        raise AssertionError("decoded before the folder was checked")

    monkeypatch.setattr("mt.hf.generation.search_lines", decoded)
    monkeypatch.setattr("mt.hf.card.generated", decoded)
    assert main(["export", "--run", str(run), "--format", "hf", "--score"]) == 2
    assert (
        capsys.readouterr().err == f"mt: error: {folder}: already exists; remove it or give another --out\n"
    )


def test_a_line_past_the_models_positions_is_cut_by_the_tokenizer(exported, monkeypatch):
    run, folder = exported
    long = " ".join(["Der Hund sieht die Katze ."] * 120)  # more pieces than the model's positions
    model, tokenizer = reloaded(folder)
    cut = tokenizer(long, truncation=True)["input_ids"]
    assert len(tokenizer(long)["input_ids"]) > len(cut) == model.config.max_position_embeddings - 1
    assert len(generated(folder, [long])) == 1  # the card's scores: cut, not an IndexError
    snippet = (folder / "README.md").read_text().split("```python\n")[1].split("```")[0]
    example = json.loads((folder / "mt_export.json").read_text())["example"]
    monkeypatch.chdir(folder)
    exec(snippet.replace(repr(example), repr(long)), {})  # the card's own code on that line
