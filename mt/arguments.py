"""The command line's grammar: every `mt` command, its flags and their help, and parsing with
argparse's errors on one line. mt.cli runs the command parsed; neither imports torch, so `mt --help`
and `mt --version` are quick."""

from __future__ import annotations

import argparse
import dataclasses
import difflib

from mt import __version__
from mt.decode_config import COMPUTE_TYPES, DecodeConfig
from mt.plumbing.schema import fields_of
from mt.serving.limits import ServeLimits

QUANTIZATIONS = ("none", *COMPUTE_TYPES[1:])  # what `mt export --quantization` stores


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 opens it to the network"
    )
    p.add_argument("--port", type=_at_least(0), default=8000, help="port to listen on")
    group = p.add_argument_group("limits (a request over one gets a 413 or 422 naming it; a full queue, 503)")
    for f in dataclasses.fields(ServeLimits):
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            type=_at_least(0, type(f.default)),
            default=f.default,
            metavar="N",
            help=f.metadata["help"],
        )


def _export_options(p: argparse.ArgumentParser) -> None:
    _run_options(p, decoding=(), device=False)  # CTranslate2 reads the weights from host memory
    p.add_argument("--quantization", default="none", choices=QUANTIZATIONS, help="the weights' stored type")
    p.add_argument(
        "--format",
        default="ct2",
        choices=("ct2", "hf"),
        help="ct2: CTranslate2's model directory; hf: Hugging Face Transformers' (safetensors, card)",
    )
    p.add_argument(
        "--out", help="model directory (default: RUN/ct2 or RUN/hf; --engine ctranslate2 reads RUN/ct2)"
    )
    p.add_argument(
        "--score",
        action="store_true",
        help="--format hf: match the length penalty on val with mt's beam and score the folder's own "
        "generate on test for its card (minutes on Multi30k; without it, seconds and no scores)",
    )


def _ensemble_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--ensemble",
        nargs="+",
        metavar="RUN",
        help=f"{what} with --run and these runs as one ensemble (mean log-probabilities; one tokenizer)",
    )


def _at_least(lo: float, kind: type = int):
    def parse(text: str):
        value = kind(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text} is less than {lo:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _run_options(
    p: argparse.ArgumentParser,
    decoding: tuple[str, ...] | None = None,
    skip=("n_best",),
    device=True,
    run=True,
) -> None:
    """--run (unless not `run`: the command names its run otherwise), --checkpoint, --device (unless
    not `device`) and the decoding flags (`decoding`: only those; () for none), shared by the commands
    that load a run."""
    if run:
        p.add_argument("--run", help="run directory (required)")
    p.add_argument(
        "--checkpoint",
        default="best",
        help="best (falls back to last.pt, with a warning, before the first validation), last, "
        "averaged (see `mt average`), or a path",
    )
    if device:
        p.add_argument(
            "--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: a GPU if one is visible"
        )
    if decoding != ():
        decoding_options(p, decoding, skip)


def decoding_options(p: argparse.ArgumentParser, only: tuple[str, ...] | None, skip: tuple[str, ...]) -> None:
    """A flag for each DecodeConfig field (--n-best for n_best), typed, bounded and explained by the
    field itself; its dest is the field's name, and its default None keeps the run's value."""
    group = p.add_argument_group("decoding (defaults: the run's decode config)")
    for name, (field, kind) in fields_of(DecodeConfig).items():
        if name in skip or (only is not None and name not in only):
            continue
        meta = field.metadata
        if "choices" in meta:
            typed = {"choices": meta["choices"]}
        elif kind is bool:
            typed = {"action": argparse.BooleanOptionalAction}
        elif meta.get("lo") is not None:  # an open bound (temperature > 0) is DecodeConfig's to check
            typed = {"type": _at_least(meta["lo"], kind)}
        else:
            typed = {"type": kind, "metavar": meta.get("metavar")}
        group.add_argument("--" + name.replace("_", "-"), help=meta["help"], **typed)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one --help away), exit code 2 as before."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)}; see {self.prog} --help\n")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False, []) or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


def _train_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML config, e.g. configs/toy.yaml")
    p.add_argument("--run-dir", help="output directory (default: runs/<config name>)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a config key"
    )
    p.add_argument(
        "--force-new",
        action="store_true",
        help="start over in a run directory that holds a checkpoint (its files move to replaced-*/)",
    )
    p.add_argument(
        "--init-from",
        metavar="RUN[@CHECKPOINT]",
        help="fine-tune: start from that run's weights (best, last, averaged or a file) and tokenizer, "
        "with a new optimizer and schedule (train.init_from)",
    )


def _translate_options(p: argparse.ArgumentParser) -> None:
    _run_options(p, skip=())
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument(
        "--prefix-file",
        help="one target prefix per input line (may be empty): each translation starts with it",
    )
    p.add_argument(
        "--alignments",
        metavar="FILE",
        help="also write each line's word alignment (Pharaoh i-j, from cross-attention) to FILE",
    )
    _ensemble_option(p, "decode")


def _score_options(p: argparse.ArgumentParser) -> None:
    _run_options(p, decoding=("length_penalty", "batch_tokens"))  # the score column's alpha
    p.add_argument("--src", required=True, help="source lines")
    p.add_argument("--ref", required=True, help="their translations, line by line")
    p.add_argument(
        "--output", help="output file (default: stdout): sum, GNMT score, then each piece's; tab-separated"
    )


def _distill_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--teacher", dest="run", required=True, metavar="RUN", help="the teacher's run directory")
    _run_options(p, skip=("n_best", "sample", "temperature", "seed", "split_sentences"), run=False)
    _ensemble_option(p, "translate")
    p.add_argument("--out", help="where the distilled corpus folder goes (default: data/distilled)")
    p.add_argument(
        "--with-references",
        action="store_true",
        help="the original training pairs too, after the teacher's (each source twice): the student "
        "learns from both",
    )


def _tune_options(p: argparse.ArgumentParser) -> None:
    _run_options(p, decoding=())
    grid = "mt.training.tuning.Grid's"  # the one table of what is tried; imported by the command alone
    p.add_argument("--beams", type=_at_least(1), nargs="+", help=f"beam sizes tried (default: {grid})")
    p.add_argument(
        "--length-penalties",
        type=_at_least(0.0, float),
        nargs="+",
        help=f"GNMT alphas tried with each beam above 1 (default: {grid})",
    )
    p.add_argument(
        "--mbr",
        action="store_true",
        help="also try MBR (chrF, BLEU) over the largest beam's hypotheses, alone and with samples",
    )
    p.add_argument(
        "--rerank",
        default="",
        metavar="RUN[,RUN]",
        help="also try reranking the largest beam's hypotheses, and twice that beam's, by this reverse run "
        "(tgt->src) at several weights",
    )


REPORT_SETTING_HELP = (
    "which evaluation of every run to compare: test, val, test-beam5, test-tuned, ... (default: each run's "
    "own decoding on test, as `mt evaluate` scored it: its beam and length penalty as `mt tune` chose them, "
    "where it did)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mt", description="Train and run Transformer translation models.")
    parser.add_argument("--version", action="version", version=f"mt {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=_Help)

    _train_options(command("train", "train a model from a YAML config (re-running it resumes)"))
    _translate_options(command("translate", "translate lines, one output line per input line"))
    p = command("evaluate", "translate a split (or --src/--ref files) and score it with sacreBLEU")
    _run_options(p)
    p.add_argument("--split", default="test", choices=["test", "val"], help="the run's corpus split")
    p.add_argument("--src", help="score this source file instead of a split (with --ref)")
    p.add_argument("--ref", help="the reference translations of --src, line by line")
    _ensemble_option(p, "evaluate (keyed -ensN)")
    _score_options(command("score", "the log-probability a run gives each translation, line by line"))
    p = command("report", "compare runs: a Markdown table, significance tests, learning curves")
    p.add_argument("runs", nargs="+", help="run directories; the first is the baseline")
    p.add_argument("--out", default="runs/report.md", help="Markdown file; the plot goes beside it")
    p.add_argument("--setting", default="", help=REPORT_SETTING_HELP)
    p = command("average", "average the last N kept checkpoints of a run (train.keep_last) into averaged.pt")
    p.add_argument("--run", help="run directory (required)")
    p.add_argument("--last", type=_at_least(1), default=5, help="how many of the newest ckpt-*.pt to average")
    _export_options(
        command(
            "export", "write a checkpoint as a CTranslate2 (--engine ctranslate2) or Transformers directory"
        )
    )
    p = command(
        "serve", "serve a run over HTTP: a JSON API with dynamic batching, and an attention explorer at /"
    )
    _run_options(p)
    _serve_options(p)
    _ensemble_option(p, "serve")
    _distill_options(
        command("distill", "translate a teacher run's training sources once: a corpus for a student")
    )
    _tune_options(command("tune", "choose a run's beam and length penalty on val; its translations use them"))
    p = command("attention", "plot cross-attention of the greedy translation of one sentence")
    p.add_argument("sentence")
    _run_options(p, decoding=())
    p.add_argument("--out", help="PNG file (default: RUN/attention.png)")
    p.add_argument(
        "--per-head", action="store_true", help="one panel per head instead of the mean over heads"
    )
    parser.commands = sub.choices  # name -> its parser, for `parse`
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Arguments, with an unknown option named first (and the closest real one), before anything missing."""
    args, unknown = parser.parse_known_args(argv)
    command = parser.commands[args.command]
    if unknown:
        options = [o for action in command._actions for o in action.option_strings]
        close = difflib.get_close_matches(unknown[0].split("=")[0], options, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if getattr(args, "run", "") is None:
        command.error("the following arguments are required: --run")
    return args


def one_line(message: str) -> str:
    """An error message as one printable line, whatever a damaged file put into it."""
    flat = " ".join(message.split())
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in flat)
