"""The Hugging Face export's model card (README.md) and the scores it states: each figure is one the
exported folder reproduces. Scores only where asked (`mt export --format hf --score`: minutes on
Multi30k, where the export alone takes seconds): the folder's own, measured as the export is written,
the folder reloaded by Transformers alone, `generate` with its generation_config.json over the run's
test split, sacreBLEU beside the signatures (`generated_scores`); without --score the card states no
figure of generate's and says how to get them. It says what decoding the folder carries, where that
differs from mt's search and what of the run's decoding it leaves out (mt.hf.generation), and holds the
run's config (mt_config.yaml), from which `mt train` trains the model again. It names no path of the
machine it was made on.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mt.config import RunConfig, config_to_dict
from mt.hf.generation import transformers_modules
from mt.plumbing.files import write_text
from mt.plumbing.metrics import HEADLINE, corpus_scores
from mt.run.card import read_card

BATCH = 32  # sentences a generate call, sorted by length (padding changes no translation)
MULTI30K_TERMS = (
    "Multi30k (Elliott et al. 2016) is for non-commercial research and educational use (the images fall "
    "under Flickr's terms); a model trained on it carries those terms."
)


def generated(folder: Path, lines: list[str]) -> list[str]:
    """The translation of each line by the folder's model and tokenizer, reloaded by Transformers
    alone, with its generation_config.json: a line is cut at the tokenizer's model_max_length."""
    t = transformers_modules()
    model = t.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = t.AutoTokenizer.from_pretrained(folder)
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    found = [""] * len(lines)
    for start in range(0, len(order), BATCH):
        group = order[start : start + BATCH]
        batch = tokenizer([lines[i] for i in group], return_tensors="pt", padding=True, truncation=True)
        with torch.no_grad():
            out = model.generate(**batch)
        for i, text in zip(group, tokenizer.batch_decode(out, skip_special_tokens=True)):
            found[i] = text
    return found


def generated_scores(folder: Path, split: str, src: list[str], ref: list[str], tokenize: str) -> dict:
    """The folder's `generate` scored on `split` (sacreBLEU, the run's BLEU tokenizer)."""
    scores = corpus_scores(generated(folder, src), ref, tokenize=tokenize, metrics=HEADLINE)
    return {"split": split, **scores}


def model_card(run: Path, config: dict, card: dict, exported: dict) -> str:
    """README.md of the export. `exported`: the decoding it carries (generation), what the card says of
    it (caveats), how its length penalty was matched (matched: penalty, lines, of) where it was, whether
    it was scored (scored: --score), its scores (scores: `generated_scores`, or None where it was not
    scored or the test split could not be read) and an example source line."""
    data, generation = config["data"], exported["generation"]
    name = card.get("config", {}).get("name", run.name)
    lines = [
        f"# {name}: {data['src_lang']}→{data['tgt_lang']}, trained with mt",
        "",
        f"A {card.get('parameters', 0) / 1e6:.2f}M-parameter Transformer trained by mt (run `{run.name}`), "
        "exported with `mt export --format hf`; Transformers opens it without mt.",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        'model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained("."), AutoTokenizer.from_pretrained(".")',
        f'batch = tokenizer([{exported["example"]!r}], return_tensors="pt", padding=True, truncation=True)',
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```",
        "",
        *scores_section(exported.get("scores"), generation, exported.get("scored", True)),
        "",
        "## Decoding",
        "",
        "generation_config.json carries "
        + ", ".join(f"{k} {v}" for k, v in generation.items() if not k.endswith("token_id"))
        + ". Where `generate` differs from `mt translate` on the same run:",
        "",
        *[f"- {caveat}" for caveat in exported["caveats"]],
        *matched_line(exported.get("matched")),
        "- an empty line: mt translates it as an empty line; generate writes a sentence for it",
        f"- a line of more than {data['max_len']} pieces: mt translates it in parts; generate takes it whole "
        f"up to {generation['max_new_tokens']} pieces, the model's positions, where the tokenizer cuts it "
        "(truncation=True above: without it, a longer line fails)",
        "",
        *training_lines(card, data),
    ]
    return "\n".join(lines) + "\n"


def scores_section(scores: dict | None, generation: dict, scored: bool) -> list[str]:
    """The card's Scores section: the folder's own generate, or why there is none."""
    if not scored:
        return [
            "## Scores",
            "",
            "None: exported without `--score`. `mt export --format hf --score` measures this folder's "
            "`generate` on the run's test split (and matches its length penalty on val) as it exports.",
        ]
    if scores is None:
        return ["## Scores", "", "None: the run's test split could not be read when the folder was exported."]
    labels = " | ".join(m.label for m in HEADLINE)
    values = " | ".join(f"{scores[m.key]:.2f}" for m in HEADLINE)
    return [
        f"## Scores: this folder's `generate` on {scores['split']} (sacreBLEU)",
        "",
        f"| sentences | num_beams | {labels} | BLEU signature |",
        "|---:|---:|" + "---:|" * len(HEADLINE) + "---|",
        f"| {scores['sentences']} | {generation['num_beams']} | {values} | `{scores['bleu_signature']}` |",
        "",
        f"Measured as exported: this folder reloaded by Transformers, the snippet above over the "
        f"{scores['split']} split's sources in batches of {BATCH}.",
    ]


def matched_line(matched: dict | None) -> list[str]:
    """How the length penalty was chosen, where it was (mt.hf.generation.matched_length_penalty)."""
    if not matched:
        return []
    return [
        f"- length_penalty {matched['penalty']:g} ranks mt's own beam's hypotheses as mt's length penalty "
        f"{matched['mt']:g} does on {matched['lines']} of {matched['of']} val lines"
    ]


def training_lines(card: dict, data: dict) -> list[str]:
    """The card's Training and Data sections: what the run did, from its card.json, and the data's terms."""
    training, hardware = card.get("training") or {}, card.get("hardware") or {}
    compute = training.get("multiply_adds")
    if data["corpus"] == "multi30k":
        terms = MULTI30K_TERMS
    elif data["corpus"] == "files":
        terms = f"Trained on the files of a folder `{Path(data['dir']).name}` (data.dir); their terms apply."
    else:
        terms = f"Trained on a corpus mt generates (data.corpus {data['corpus']}): no one's text."
    return [
        "## Training",
        "",
        f"- {training.get('steps')} updates (stopped: {training.get('stopped')}), "
        f"{training.get('tokens_per_s')} tokens/s on {hardware.get('gpu') or hardware.get('cpu')}"
        + (f"; {compute:.3g} multiply-adds" if compute else ""),
        f"- mt_config.yaml here is the run's config: `mt train mt_config.yaml` trains it again (mt at "
        f"`{(card.get('code') or {}).get('git_commit')}`)",
        "",
        "## Data and its terms",
        "",
        terms,
    ]


def write_card(part: Path, run: Path, config: RunConfig, exported: dict) -> None:
    """The folder's README.md: the model card of `run` as exported (`exported`: mt_export.json's record)."""
    write_text(part / "README.md", model_card(run, config_to_dict(config), read_card(run), exported))
