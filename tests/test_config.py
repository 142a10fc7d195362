"""mt/config.py: YAML -> frozen dataclasses: unknown keys, types, choices and ranges refused naming the
key, overrides, base configs, and every shipped config valid; a bad config file is one line, exit 2."""

from pathlib import Path

import pytest
from conftest import run_main

from mt.config import (
    RunConfig,
    config_from_dict,
    config_to_dict,
    load_config,
    save_config,
)
from mt.plumbing.config_yaml import config_differences
from mt.plumbing.errors import ConfigError
from mt.run.parent import HOW_BPE_CHOSE, TRAINING_ONLY, mismatches
from mt.run.provenance import base_config

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# the recipes, and under experiments/ the configs that reproduce a document
CONFIGS = sorted([*CONFIG_DIR.glob("*.yaml"), *CONFIG_DIR.glob("experiments/*.yaml")])


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_shipped_configs_validate(path):
    cfg = load_config(path)
    assert cfg.name == path.stem
    assert cfg.base == "", f"{path}: a shipped config is self-contained, not chained onto a moving default"


def test_the_two_stage_recipe_is_the_pipeline_that_was_measured():
    """configs/multi30k-bit*.yaml are issue 67's bit lever (scripts/experiments/levers.py: the recipe
    with the target's output layer; both directions for 3,000 updates, then a child with a 200-update
    warmup to the parent's last inverse-sqrt lr, decaying linearly over 6,300), stage 2 a valid child
    of stage 1. Only what does not touch the weights differs: which models are kept, averaged, tuned."""
    recipe = load_config(CONFIG_DIR / "multi30k-best.yaml", ["model.output_pieces=target"])
    both, forward = (load_config(CONFIG_DIR / f"multi30k-{n}.yaml") for n in ("bit-both", "bit"))
    bookkeeping = ("name", "train.keep_last", "train.average_last", "train.tune")
    assert config_differences(config_to_dict(recipe), config_to_dict(both), bookkeeping) == {
        "data.both_directions": (False, True),
        "train.max_steps": (7900, 3000),
    }
    lr = round(5e-3 * (2000 / 3000) ** 0.5, 5)
    assert config_differences(config_to_dict(recipe), config_to_dict(forward), bookkeeping) == {
        "train.lr": (5e-3, lr),
        "train.warmup_steps": (2000, 200),
        "train.schedule": ("inverse_sqrt", "linear"),
        "train.max_steps": (7900, 6300),
        "train.init_from": ("", "runs/multi30k-bit-both"),  # where `make bit` trains stage 1
    }
    assert not mismatches(both, forward, "model", Path("stage 1"), ignore=TRAINING_ONLY)
    assert not mismatches(both, forward, "tokenizer", Path("stage 1"), ignore=HOW_BPE_CHOSE)


def test_yaml_round_trip(tmp_path):
    cfg = load_config(CONFIGS[0], ["train.lr=5e-4", "model.layers=4"])
    save_config(cfg, tmp_path / "saved.yaml")
    again = load_config(tmp_path / "saved.yaml")
    assert again == cfg
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_overrides_parse_types(tmp_path):
    cfg = load_config(
        write(tmp_path, "train:\n  lr: 5e-4\n"),
        ["train.max_steps=7", "model.norm=post", "model.tie_embeddings=false"],
    )
    assert cfg.train.lr == 5e-4 and cfg.train.max_steps == 7
    assert cfg.model.norm == "post" and cfg.model.tie_embeddings is False


def test_unknown_key_suggests_closest(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "train:\n  warmup_step: 10\n"))
    assert str(e.value).startswith(
        f"{tmp_path / 'c.yaml'}: unknown key 'train.warmup_step'; did you mean 'warmup_steps'?"
    )


def test_the_issues_spelling_of_tokenizer_from_points_to_from_run(tmp_path):
    with pytest.raises(ConfigError) as e:  # `from` is Python's keyword, so the key is from_run
        load_config(write(tmp_path, "tokenizer:\n  from: runs/base\n"))
    assert "unknown key 'tokenizer.from'; did you mean 'from_run'?" in str(e.value)


def test_unknown_section(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'modle'; did you mean 'model'\?"):
        load_config(write(tmp_path, "modle:\n  layers: 2\n"))


def test_wrong_type(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "model:\n  layers: three\n"))
    assert str(e.value) == f"{tmp_path / 'c.yaml'}: model.layers: expected int, got str 'three'"


def test_bool_is_not_int(tmp_path):
    with pytest.raises(ConfigError, match="model.layers: expected int, got bool True"):
        load_config(write(tmp_path, "model:\n  layers: true\n"))


def test_bad_choice_lists_valid_ones(tmp_path):
    with pytest.raises(
        ConfigError, match="train.precision: 'fp8' is not one of fp32, tf32, bf16, fp16, auto"
    ):
        load_config(write(tmp_path, "train:\n  precision: fp8\n"))


def test_out_of_range(tmp_path):
    with pytest.raises(ConfigError, match="model.dropout: -0.1 is out of range, must be >= 0.0"):
        load_config(write(tmp_path, "model:\n  dropout: -0.1\n"))
    with pytest.raises(ConfigError, match="train.warmup_steps: 0 is out of range, must be >= 1"):
        load_config(write(tmp_path, "train:\n  warmup_steps: 0\n"))


def test_a_dropout_start_needs_dropout_to_start(tmp_path):
    with pytest.raises(ConfigError, match=r"train.dropout_start: 1.0 is out of range, must be <= 0.99"):
        load_config(write(tmp_path, "train:\n  dropout_start: 1.0\n"))
    with pytest.raises(
        ConfigError,
        match=r"train.dropout_start: 0.5 starts no dropout \(model.dropout, attention_dropout and "
        r"activation_dropout are 0\); set one of them, or leave it 0",
    ):
        load_config(write(tmp_path, "model:\n  dropout: 0.0\ntrain:\n  dropout_start: 0.5\n"))
    assert load_config(write(tmp_path, "train:\n  dropout_start: 0.5\n")).train.dropout_start == 0.5


def test_cross_field_check(tmp_path):
    with pytest.raises(ConfigError, match=r"model.d_model \(100\) must be divisible by model.n_heads \(3\)"):
        load_config(write(tmp_path, "model:\n  d_model: 100\n  n_heads: 3\n"))


def test_not_a_mapping_and_not_yaml(tmp_path):
    with pytest.raises(ConfigError, match="expected a YAML mapping of sections, got list"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(
        ConfigError, match=r"c.yaml: line 2 is not valid YAML \(mapping values are not allowed here\)"
    ):
        load_config(write(tmp_path, "train:\n  lr: 1: 2\n"))


def test_bad_override_syntax(tmp_path):
    with pytest.raises(ConfigError, match="expected key.path=value"):
        load_config(write(tmp_path, ""), ["train.lr"])


def test_defaults_are_valid():
    assert isinstance(config_from_dict({}), RunConfig)


def test_base_config_chain(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nmodel:\n  layers: 4\n  d_ff: 512\ntrain:\n  lr: 0.002\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text("base: ../a.yaml\nmodel:\n  d_ff: 256\n")
    (tmp_path / "c.yaml").write_text("base: sub/b.yaml\ntrain:\n  label_smoothing: 0.0\n")
    cfg = load_config(tmp_path / "c.yaml", ["train.lr=0.003"])
    assert cfg.name == "c" and cfg.base == str(tmp_path / "sub" / "b.yaml")
    assert (cfg.model.layers, cfg.model.d_ff, cfg.train.lr, cfg.train.label_smoothing) == (4, 256, 0.003, 0.0)
    assert base_config(cfg) == load_config(tmp_path / "sub" / "b.yaml")
    assert base_config(load_config(tmp_path / "a.yaml")) == RunConfig()


def test_base_loop_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "a.yaml")
    assert str(e.value) == f"{tmp_path / 'a.yaml'}: base: configs extend each other in a loop"


def test_config_differences():
    a = {"train": {"lr": 1.0, "seed": 1}, "decode": {"beam": 1}, "name": "a"}
    b = {"train": {"lr": 2.0, "seed": 1}, "decode": {"beam": 5}, "name": "b"}
    assert config_differences(a, b) == {"train.lr": (1.0, 2.0), "decode.beam": (1, 5), "name": ("a", "b")}
    assert config_differences(a, b, ignore=("decode", "name")) == {"train.lr": (1.0, 2.0)}


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_cuda_only_precisions_are_refused_on_cpu(tmp_path, precision):
    with pytest.raises(
        ConfigError, match=f"train.precision: {precision} needs a CUDA device; use bf16 or fp32 on CPU"
    ):
        load_config(write(tmp_path, f"train:\n  precision: {precision}\n  device: cpu\n"))


def test_one_path_from_user_options_to_a_checked_decode_config():
    """CLI flags, request options and a config file meet DecodeConfig in `decoding`: values are checked
    as config values, n_best <= beam, and every error is in the user's own spelling, naming the key."""
    from mt.decode_config import DecodeConfig, decoding
    from mt.plumbing.spelling import COMMAND_LINE, REQUEST

    run = DecodeConfig(beam=4, length_penalty=0.6)
    assert decoding(run, {"beam": None, "n_best": 2, "batch_tokens": 999}, COMMAND_LINE) == DecodeConfig(
        beam=4, n_best=2, length_penalty=0.6, batch_tokens=999
    )
    cases = [
        ({"n_best": 5}, COMMAND_LINE, "--n-best 5 is more than the run's beam (4)", "n_best"),
        ({"beam": 2, "n_best": 3}, REQUEST, "n_best: 3 is more than beam 2", "n_best"),
        (
            {"length_penalty": -1},
            COMMAND_LINE,
            "--length-penalty: -1.0 is out of range, must be >= 0.0",
            None,
        ),
        ({"beam": "x"}, REQUEST, "beam: expected int, got str 'x'", None),
    ]
    for options, spelling, start, key in cases:
        with pytest.raises(ConfigError) as e:
            decoding(run, options, spelling)
        assert str(e.value).startswith(start) and e.value.key == (key or next(iter(options)))
    with pytest.raises(ConfigError) as e:
        config_from_dict({"decode": {"beam": 2, "n_best": 3}})
    assert str(e.value) == (
        "decode.n_best: 3 is more than decode.beam 2: beam search keeps only that many hypotheses; "
        "set decode.beam 3 or more"
    )


@pytest.mark.parametrize(
    "text,message",
    [
        ("model: [1, 2\n", "{p}: line 2 is not valid YAML (expected ',' or ']', but got '<stream end>')"),
        ("- model\n- train\n", "{p}: expected a YAML mapping of sections, got list"),
        ("model:\n  layers: three\n", "{p}: model.layers: expected int, got str 'three'"),
        ("model: 3\n", "{p}: model: expected a mapping, got int"),
        ("model:\n  d_model: 30\n", "{p}: model.d_model (30) must be divisible by model.n_heads (4)"),
        ("model:\n  dropout: -0.1\n", "{p}: model.dropout: -0.1 is out of range, must be >= 0.0"),
        ("train:\n  warmup_steps: 0\n", "{p}: train.warmup_steps: 0 is out of range, must be >= 1"),
        ("train:\n  lr: 0\n", "{p}: train.lr: 0.0 is out of range, must be > 0.0"),
        (
            "trian:\n  lr: 1\n",
            "{p}: unknown key 'trian'; did you mean 'train'? valid keys: name, base, data, tokenizer, "
            "model, train, decode, eval",
        ),
        (
            "data:\n  tgt_lang: zh\n",
            "{p}: data.tgt_lang: 'zh' is not one of de, en (the multi30k languages)",
        ),
        (
            "eval:\n  bleu_tokenize: 13A\n",
            "{p}: eval.bleu_tokenize: '13A' is not one of auto, 13a, zh, ja-mecab, ko-mecab, intl, char, "
            "none",
        ),
        (
            "data:\n  corpus: files\n",
            "{p}: data.dir: data.corpus 'files' needs data.dir, a folder holding "
            "{{train,val,test}}.{{src_lang,tgt_lang}}",
        ),
    ],
)
def test_bad_config(capsys, tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code, err = run_main(capsys, "train", str(path), "--run-dir", str(tmp_path / "run"))
    assert code == 2
    assert err == "mt: error: " + message.format(p=path) + "\n"
    assert not (tmp_path / "run").exists()


def test_unreadable_config(capsys, tmp_path):
    (tmp_path / "c.yaml").write_bytes(b"name: \xff\n")
    code, err = run_main(capsys, "train", str(tmp_path / "c.yaml"))
    assert code == 2
    assert err.startswith(f"mt: error: {tmp_path / 'c.yaml'}: cannot read config (") and err.count("\n") == 1
