"""How the Hugging Face export decodes: each DecodeConfig field carried into generation_config.json,
approximated there (with the caveat the model card writes), or left out and said (`decode_fields`, one
entry a field, mt.plumbing.engine_fields' kinds, as CTranslate2's table is); and the length penalty
chosen in Transformers' own formula (`matched_length_penalty`).

Transformers' beam ranks a finished hypothesis by log-probability / length ** penalty, mt's by
log-probability / ((5 + length) / 6) ** penalty (length: its pieces and eos, in both). Both keep the
first K hypotheses to finish among the K best of 2K candidates and stop a sentence there (Transformers'
early_stopping=True), so they rank the same hypotheses and only the formula differs: exported with
--score (it decodes val with mt's beam), the folder carries the penalty under which Transformers'
formula picks mt's 1-best among mt's own beam's K hypotheses on the most lines of val, and the card
says on how many it does; without, it carries mt's own penalty and the card says so.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from mt.config import BOS, EOS, PAD
from mt.decode_config import DecodeConfig
from mt.plumbing.engine_fields import Approximated, ByMt, Carried, Unsupported, carried, set_fields
from mt.plumbing.errors import ConfigError
from mt.plumbing.schema import fields_of
from mt.run.names import reverse_runs
from mt.translate import SearchRequest, search_lines

AT = "generate"  # the call that the table's entries carry arguments to: generation_config.json's
CHOOSES_AFTER = (
    "mt chooses among its own search's candidates after it (mt.rescoring.rerank); generate searches alone"
)
# the penalties tried in Transformers' formula, 0 to 3 by 0.05
HF_PENALTIES = tuple(round(0.05 * k, 2) for k in range(61))


def transformers_modules():
    """transformers, or a one-line ConfigError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError("--format hf needs Transformers: pip install -e '.[hf]'", "format") from None
    return transformers


# How Transformers' generate follows each DecodeConfig field but the length limit's (`decode_fields`)
GENERATE_FIELDS = {
    "beam": Carried("num_beams", lambda d: d.beam, AT),
    "n_best": Unsupported("generate gives one translation a line unless asked num_return_sequences"),
    "length_penalty": Approximated(
        "length_penalty",
        lambda d: d.length_penalty if d.beam > 1 else None,
        AT,
        "Transformers divides a beam's log-probability by length ** penalty where mt divides by "
        "((5 + length) / 6) ** penalty: the penalty carried is matched on val where the export was "
        "made with --score and could read val (below), else mt's own",
    ),
    "no_repeat_ngram": Approximated(
        "no_repeat_ngram_size",
        lambda d: d.no_repeat_ngram or None,
        AT,
        "Transformers bans a repeated n-gram after the softmax, mt before it: the same pieces are "
        "banned, but a beam's scores differ",
    ),
    "min_len": Approximated(
        "min_new_tokens",
        lambda d: d.min_len or None,
        AT,
        "Transformers bans eos before min_new_tokens after the softmax, mt before it: the same "
        "pieces are banned, but a beam's scores differ",
    ),
    "batch_tokens": ByMt("how mt batches lines: padding changes no translation"),
    "engine": ByMt("the export is Transformers' own model"),
    "compute_type": ByMt("CTranslate2's only; the export's weights are float32"),
    "sample": Unsupported(
        "Transformers draws from torch's one generator, so a line's draws would depend on its batch; "
        "generate(do_sample=True) samples, unseeded"
    ),
    "temperature": ByMt("changes nothing without sample"),
    "seed": ByMt("changes nothing without sample"),
    "mbr": Unsupported(CHOOSES_AFTER),
    "mbr_samples": ByMt("changes nothing without mbr"),
    "mbr_temperature": ByMt("changes nothing without mbr"),
    "rerank": Unsupported(CHOOSES_AFTER),
    "rerank_weight": ByMt("changes nothing without rerank"),
    "split_sentences": Unsupported("mt.sentences splits a line before the search; generate takes it whole"),
}


def decode_fields(max_positions: int) -> dict:
    """How Transformers' generate follows each DecodeConfig field, for a model of `max_positions`, in
    the config's order."""
    cap = Approximated(
        "max_new_tokens",
        lambda d: max_positions - 1,
        AT,
        "Transformers has no length limit that follows the source (mt's a * S + b): generate stops a "
        f"translation at {max_positions - 1} pieces, the model's positions",
    )
    table = {**GENERATE_FIELDS, "max_len_a": cap, "max_len_b": cap}
    return {name: table[name] for name in fields_of(DecodeConfig)}


def generation_config(decode: DecodeConfig, max_positions: int) -> dict:
    """generation_config.json: the special ids and what `decode_fields` carries of `decode`; a beam
    stops a sentence at its K finished hypotheses, as mt's does (early_stopping)."""
    found = {
        "decoder_start_token_id": BOS,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        **carried(decode, decode_fields(max_positions), AT),
    }
    return found | ({"early_stopping": True} if decode.beam > 1 else {})


def caveats(decode: DecodeConfig, max_positions: int) -> list[str]:
    """What the model card says of the export's decoding: each approximation in force, with its caveat,
    and each option of `decode` (the run's decoding) that is left out, with why."""
    table = decode_fields(max_positions)
    said = []
    for entry in table.values():
        if isinstance(entry, Approximated) and entry.value(decode) is not None and entry.caveat not in said:
            said.append(entry.caveat)
    for name, value, entry in set_fields(decode, table):
        if isinstance(entry, Unsupported):
            said.append(f"left out: the run's decode.{name} {shown(name, value)!r} ({entry.why})")
    return said


def shown(name: str, value):
    """A decoding option's value as the card writes it: reverse runs (rerank) by their folders' names,
    never a path of the machine the export was made on."""
    if name == "rerank":
        return ",".join(PurePath(run).name for run in reverse_runs(value))
    return value


def matched_length_penalty(request: SearchRequest, decode: DecodeConfig):
    """(penalty, lines): the penalty of Transformers' formula under which it ranks mt's 1-best first
    among mt's beam's decode.beam hypotheses of the request's lines (val) on the most lines, and on how
    many it does (ties: the penalty nearest mt's own)."""
    beams = search_lines(request, replace(decode, n_best=decode.beam))
    agree = {alpha: sum(hyps_agree(hyps, alpha) for hyps in beams) for alpha in HF_PENALTIES}
    most = max(agree.values())
    return min(
        (a for a in HF_PENALTIES if agree[a] == most), key=lambda a: abs(a - decode.length_penalty)
    ), most


def hyps_agree(hyps: list, alpha: float) -> bool:
    """Whether Transformers' formula at `alpha` ranks mt's first hypothesis (mt's 1-best) first."""
    scores = [h.logprob / (len(h.tokens) + h.ended) ** alpha for h in hyps]
    return scores.index(max(scores)) == 0
