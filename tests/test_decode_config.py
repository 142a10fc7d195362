"""mt/run/names.py: an evaluation's name says every decoding option that can change what it scores,
so two evaluations that may differ never share an eval file or a card entry."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mt import decode_config
from mt.decode_config import DecodeConfig, decoding
from mt.plumbing.errors import ConfigError
from mt.plumbing.spelling import COMMAND_LINE, KEYWORD, REQUEST
from mt.run import names
from mt.run.names import UNNAMED, evaluation_name


def test_the_names_evaluations_have_had_stay():
    assert evaluation_name("test", DecodeConfig()) == "test"
    assert evaluation_name("test", DecodeConfig(beam=5)) == "test-beam5"
    assert evaluation_name("test", DecodeConfig(beam=5, length_penalty=0.6)) == "test-beam5-lp0.6"
    ct2 = DecodeConfig(beam=5, length_penalty=0.6, engine="ctranslate2", compute_type="int8")
    assert evaluation_name("test", ct2, "last") == "test-beam5-lp0.6-ct2-int8-last"
    assert evaluation_name("test", DecodeConfig(engine="ctranslate2")) == "test-ct2"
    assert evaluation_name("test", DecodeConfig(beam=5), ensemble=2) == "test-beam5-ens2"
    assert evaluation_name("test", DecodeConfig(sample="topk:20"), ensemble=2) == "test-ens2-topk20-seed0"
    sampled = DecodeConfig(sample="topk:20", temperature=0.7, seed=3)
    assert evaluation_name("test", sampled) == "test-topk20-t0.7-seed3"
    assert evaluation_name("test", DecodeConfig(sample="topp:0.9")) == "test-topp0.9-seed0"
    assert evaluation_name("news.de", DecodeConfig(n_best=1), "averaged") == "news.de-averaged"


def test_options_the_old_names_left_out_now_name_the_evaluation():
    assert evaluation_name("test", DecodeConfig(max_len_a=2.0)) == "test-len2x+10"
    assert evaluation_name("test", DecodeConfig(beam=5, max_len_b=5)) == "test-beam5-len1.5x+5"
    assert evaluation_name("test", DecodeConfig(batch_tokens=2000)) == "test-bt2000"


def test_options_that_change_nothing_leave_the_name_alone():
    assert evaluation_name("test", DecodeConfig(length_penalty=0.6)) == "test"  # greedy ranks nothing
    assert evaluation_name("test", DecodeConfig(temperature=0.5, seed=4)) == "test"  # nothing is drawn
    assert evaluation_name("test", DecodeConfig(beam=5, n_best=3)) == "test-beam5"  # the same 1-best


def test_an_option_no_part_spells_is_named_by_field_and_value(monkeypatch):
    """A new DecodeConfig field that nobody taught the names still names the evaluation."""
    parts = [part for part in names.SEARCH_PARTS if part[0] != ("max_len_a", "max_len_b")]
    monkeypatch.setattr(names, "SEARCH_PARTS", parts)
    assert evaluation_name("test", DecodeConfig(beam=2, max_len_a=2.0)) == "test-beam2-max_len_a=2.0"


def another(config: DecodeConfig, name: str):
    """A valid value of option `name` other than config's."""
    field, value = decode_config.fields_of(DecodeConfig)[name][0], getattr(config, name)
    if "choices" in field.metadata:
        return next(c for c in field.metadata["choices"] if c != value)
    if name == "sample":
        return "topk:3" if value != "topk:3" else "topk:4"
    if name == "rerank":
        return value + ",runs/de-en" if value else "runs/de-en"
    if isinstance(value, bool):
        return not value
    return value + (1 if isinstance(value, int) else 0.5)


# where an option changes the output: a length penalty ranks a beam's hypotheses, a temperature and a
# seed change what sampling draws, a compute type is CTranslate2's
WHERE_IT_MATTERS = {
    "length_penalty": DecodeConfig(beam=5),
    "temperature": DecodeConfig(sample="topk:5"),
    "seed": DecodeConfig(sample="topk:5"),
    "compute_type": DecodeConfig(engine="ctranslate2"),
    "mbr": DecodeConfig(beam=5),
    "mbr_samples": DecodeConfig(beam=5, mbr="chrf"),
    "mbr_temperature": DecodeConfig(beam=5, mbr="chrf", mbr_samples=4),
    "rerank": DecodeConfig(beam=5),
    "rerank_weight": DecodeConfig(beam=5, rerank="runs/en-de"),
}


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(DecodeConfig) if f.name not in UNNAMED])
def test_changing_any_option_that_can_change_the_output_changes_the_name(name):
    base = WHERE_IT_MATTERS.get(name, DecodeConfig())
    changed = decoding(base, {name: another(base, name)})  # a valid config
    assert evaluation_name("test", changed) != evaluation_name("test", base)


def can_differ(a: DecodeConfig, b: DecodeConfig) -> bool:
    """Whether a and b may translate a test set differently: an option that differs and matters."""
    ignored = set(UNNAMED)
    ignored |= {"length_penalty"} if a.beam == b.beam == 1 else set()
    ignored |= {"temperature"} if a.sample == b.sample == "" else set()
    ignored |= {"seed"} if a.sample == b.sample == "" and a.mbr_samples == b.mbr_samples == 0 else set()
    ignored |= {"mbr_samples", "mbr_temperature"} if a.mbr == b.mbr == "" else set()
    ignored |= {"mbr_temperature"} if a.mbr_samples == b.mbr_samples == 0 else set()
    ignored |= {"rerank_weight"} if a.rerank == b.rerank == "" else set()
    return any(
        getattr(a, f.name) != getattr(b, f.name) for f in dataclasses.fields(a) if f.name not in ignored
    )


# The values each option takes in the property tests, one entry a field of DecodeConfig (checked below):
# a new option is drawn here too, or the test of this table fails
DRAWN = {
    "beam": [1, 2, 5],
    "n_best": [1, 2],
    "length_penalty": [0.0, 0.6, 1.0],
    "max_len_a": [1.5, 2.0],
    "max_len_b": [5, 10],
    "no_repeat_ngram": [0, 3],
    "min_len": [0, 4],
    "batch_tokens": [6000, 2000],
    "engine": ["torch", "ctranslate2"],
    "compute_type": ["default", "int8"],
    "sample": ["", "topk:20", "topp:0.9"],
    "temperature": [1.0, 0.7],
    "seed": [0, 3],
    "mbr": ["", "chrf", "bleu"],
    "mbr_samples": [0, 4],
    "mbr_temperature": [1.0, 0.5],
    "rerank": ["", "runs/en-de", "runs/en-de,runs/en-de-2"],
    "rerank_weight": [1.0, 0.5],
    "split_sentences": [False, True],
}
configs = st.builds(DecodeConfig, **{name: st.sampled_from(values) for name, values in DRAWN.items()})


def test_the_property_tests_draw_every_decoding_option():
    assert list(DRAWN) == [f.name for f in dataclasses.fields(DecodeConfig)]


def valid(config: DecodeConfig) -> bool:
    try:
        decoding(config, {})
    except ConfigError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(configs.filter(valid), configs.filter(valid))
def test_two_evaluations_that_may_differ_never_share_a_name(a, b):
    if can_differ(a, b):
        assert evaluation_name("test", a) != evaluation_name("test", b)


def test_one_spelling_a_command_a_request_and_a_keyword():
    """The same bad option, worded in each user's terms."""
    lines = []
    for spelling in (COMMAND_LINE, REQUEST, KEYWORD):
        with pytest.raises(ConfigError) as e:
            decoding(DecodeConfig(), {"beam": 2, "n_best": 3}, spelling)
        lines.append(str(e.value))
    assert lines == [
        "--n-best 3 is more than --beam 2: beam search keeps only that many hypotheses; add --beam 3 or more",
        "n_best: 3 is more than beam 2: beam search keeps only that many hypotheses; send beam 3 or more",
        "n_best=3 is more than beam=2: beam search keeps only that many hypotheses; pass beam=3 or more",
    ]


TUNED_TO_RERANK = DecodeConfig(beam=10, length_penalty=1.5, rerank="runs/en-de", rerank_weight=2.0)
TUNED_TO_MBR = DecodeConfig(beam=5, mbr="chrf", mbr_samples=16)


@pytest.mark.parametrize(
    "run, given, chosen",
    [
        (TUNED_TO_RERANK, {"mbr": "chrf"}, {"mbr": "chrf", "rerank": "", "beam": 10}),
        (TUNED_TO_RERANK, {"mbr": "bleu", "mbr_samples": 4}, {"mbr": "bleu", "mbr_samples": 4, "rerank": ""}),
        (TUNED_TO_RERANK, {"engine": "ctranslate2"}, {"engine": "ctranslate2", "rerank": "", "beam": 10}),
        (TUNED_TO_RERANK, {"sample": "topk:5"}, {"sample": "topk:5", "rerank": "", "beam": 1}),
        (TUNED_TO_RERANK, {"beam": 3}, {"beam": 3, "rerank": "runs/en-de", "rerank_weight": 2.0}),
        (TUNED_TO_RERANK, {"rerank": ""}, {"rerank": "", "beam": 10}),
        (TUNED_TO_MBR, {"rerank": "runs/en-de"}, {"rerank": "runs/en-de", "mbr": "", "mbr_samples": 0}),
        (TUNED_TO_MBR, {"engine": "ctranslate2"}, {"engine": "ctranslate2", "mbr": "", "mbr_samples": 0}),
        (TUNED_TO_MBR, {"mbr_samples": 8}, {"mbr": "chrf", "mbr_samples": 8}),
    ],
)
def test_a_given_chooser_engine_sample_or_beam_wins_over_the_runs_tuned_chooser(run, given, chosen):
    decode = decoding(run, given, COMMAND_LINE)
    assert {key: getattr(decode, key) for key in chosen} == chosen


@pytest.mark.parametrize(
    "given, error",
    [
        (
            {"mbr": "chrf", "rerank": "runs/en-de"},
            "--mbr chrf and --rerank each choose the translation; give one of them",
        ),
        (
            {"engine": "ctranslate2", "rerank": "runs/en-de"},
            "--rerank runs/en-de chooses among mt's own search's candidates: add --engine torch",
        ),
        (
            {"sample": "topk:5", "mbr": "chrf"},
            "--mbr chrf chooses among the beam's hypotheses, --sample draws one translation; leave --sample "
            "out (MBR draws its own: --mbr-samples)",
        ),
    ],
)
def test_a_chooser_given_beside_what_clashes_with_it_is_still_refused(given, error):
    with pytest.raises(ConfigError) as e:
        decoding(TUNED_TO_RERANK, given, COMMAND_LINE)
    assert str(e.value) == error
