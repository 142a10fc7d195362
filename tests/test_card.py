"""mt/run/card.py: the run card's fields and their types, and a damaged card named and kept, never
overwritten."""

import json

import pytest
from conftest import file_hashes, run_main


@pytest.mark.slow
def test_card_fields_are_present_and_typed(two_runs):
    card = json.loads((two_runs[0] / "card.json").read_text())
    assert card["config"]["name"] == "toy" and len(card["config"]["hash"]) == 12
    assert card["config"]["base"] == "defaults"
    assert card["config"]["differences"]["model.d_model"] == [256, 32]
    assert isinstance(card["parameters"], int) and card["parameters"] > 0
    assert len(card["code"]["git_commit"]) in (40, len("unknown")) and card["precision"] == "fp32"
    assert card["hardware"]["device"] == "cpu" and card["hardware"]["threads"] == 1
    t = card["training"]
    assert (t["steps"], t["epochs"], t["stopped"]) == (30, 1, "reached train.max_steps=30")
    assert all(isinstance(t[k], float) for k in ("wall_s", "train_s", "tokens_per_s", "best_val_bleu"))
    assert t["best_step"] in (10, 20, 30)
    test = card["results"]["test"]
    assert set(test) >= {
        "bleu",
        "chrf",
        "bleu_signature",
        "chrf_signature",
        "length_ratio",
        "refs_sha256",
        "sentences",
        "beam",
        "hyp_file",
        "ref_file",
    }
    assert test["sentences"] == 40 and test["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert isinstance(test["length_ratio"], float) and test["length_ratio"] > 0


def test_a_damaged_card_is_named_and_kept(capsys, run, tmp_path):
    (run / "card.json").write_text('{"config": {"name": "x"}, "results": [1, 2]}')
    before = file_hashes(run)
    for args in (["evaluate", "--run", str(run)], ["report", str(run), "--out", str(tmp_path / "r.md")]):
        code, err = run_main(capsys, *args)
        assert code == 2 and err == (
            f"mt: error: {run}/card.json: damaged (config.hash is missing); restore it, "
            f"or delete it and run `mt evaluate --run {run}` to write a new one\n"
        )
    assert file_hashes(run) == before


def test_a_card_field_of_another_type_is_named(capsys, run, tmp_path):
    card = json.loads((run / "card.json").read_text())
    card["results"]["test"]["bleu"] = "high"
    (run / "card.json").write_text(json.dumps(card))
    code, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.md"))
    assert code == 2 and err == (
        f"mt: error: {run}/card.json: damaged (results.test.bleu: expected float, got str 'high'); "
        f"restore it, or delete it and run `mt evaluate --run {run}` to write a new one\n"
    )


@pytest.mark.parametrize("damage", ["renamed", "dropped", "null"])
def test_a_card_result_without_its_length_penalty_is_named(capsys, run, tmp_path, damage):
    """Issue 24: the report type-checked beam and length_penalty but did not require them, then read
    them (KeyError: 'length_penalty'); a damaged key of a result is now refused, naming it."""
    card = json.loads((run / "card.json").read_text())
    result = card["results"]["test"]
    value = result.pop("length_penalty")
    if damage == "renamed":
        result["length_penaltz"] = value  # what a flipped bit makes of it
    elif damage == "null":
        result["length_penalty"] = None
    (run / "card.json").write_text(json.dumps(card, indent=2))
    before = file_hashes(run)
    code, err = run_main(capsys, "report", str(run), "--out", str(tmp_path / "r.md"))
    what = ": expected float, got null" if damage == "null" else " is missing"
    assert code == 2 and err == (
        f"mt: error: {run}/card.json: damaged (results.test.length_penalty{what}); "
        f"restore it, or delete it and run `mt evaluate --run {run}` to write a new one\n"
    )
    assert file_hashes(run) == before
    assert not (tmp_path / "r.md").exists()
