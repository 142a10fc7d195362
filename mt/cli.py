"""`mt train | translate | evaluate | report | average | attention | serve`: the command line, the only
module that knows every other one. It imports torch only inside the commands, so `mt --help` and
`mt --version` are quick.

User-fixable problems (ConfigError, DataError) print one line and exit with code 2; `--debug` shows
the traceback instead. Every command that writes a file says where.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import os
import sys
from pathlib import Path

from mt import __version__
from mt.config import ConfigError, DataError, DecodeConfig, ServeLimits, load_config  # no torch: `mt --help` stays fast

log = logging.getLogger("mt")


def _rank() -> int:
    """This process's rank under torchrun (0 otherwise)."""
    return int(os.environ.get("RANK", 0))


def _setup_logging() -> None:
    """INFO to stderr; under torchrun only rank 0 logs INFO. (Training adds DIR/train.log itself, once
    the run directory may be written.)"""
    from mt.rundir import LOG_FORMAT

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LOG_FORMAT)
    if _rank() > 0:
        handler.setLevel(logging.WARNING)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


EXIT_ON_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}  # the shell's 128 + signal number


def cmd_train(args: argparse.Namespace) -> int:
    from mt.distributed import stop
    from mt.train import train

    cfg = load_config(args.config, args.set)
    run_dir = Path(args.run_dir or Path("runs") / cfg.name)
    _setup_logging()
    try:
        result = train(cfg, run_dir, force_new=args.force_new)
    finally:
        stop()  # the process group outlives everything train() made (DDP must go first)
    if result["interrupted"] and _rank() == 0:
        world = int(os.environ.get("WORLD_SIZE", 1))
        launcher = [f"torchrun --nproc_per_node {world} -m mt"] if world > 1 else ["mt"]
        again = " ".join([*launcher, "train", args.config, "--run-dir", str(run_dir),
                          *(f"--set {s}" for s in args.set)])
        print(f"mt: training stopped by {result['interrupted']} at step {result['step']}; resume with: {again}",
              file=sys.stderr)
    return EXIT_ON_SIGNAL.get(result["interrupted"], 0)


def _decoding(decode: DecodeConfig, args: argparse.Namespace) -> DecodeConfig:
    """The run's decode config with the decoding flags given on the command line; a conflict is named
    in the flags' terms."""
    flags = {"beam": args.beam, "n_best": getattr(args, "n_best", None), "length_penalty": args.length_penalty,
             "batch_tokens": args.batch_tokens}
    decode = dataclasses.replace(decode, **{k: v for k, v in flags.items() if v is not None})
    if decode.n_best > decode.beam:
        beam = f"--beam {decode.beam}" if args.beam is not None else f"the run's beam ({decode.beam})"
        raise ConfigError(f"--n-best {decode.n_best} is more than {beam}: beam search keeps only that many "
                          f"hypotheses; add --beam {decode.n_best} or more")
    return decode


def _flag_overrides(args: argparse.Namespace) -> list[str]:
    """The decoding flags given, as overrides of the run's decode config (argparse checked each)."""
    flags = {"beam": args.beam, "length_penalty": args.length_penalty, "batch_tokens": args.batch_tokens}
    return [f"decode.{k}={v}" for k, v in flags.items() if v is not None]


def _read_input(path: str | None) -> list[str]:
    """Input lines, split on newlines only; gzip data (a .gz file, or bytes that start as gzip does) is
    decompressed; invalid UTF-8 is replaced (U+FFFD) with a warning."""
    from mt.data import gunzip, split_lines

    name = path or "<stdin>"
    if path is None:
        raw = sys.stdin.buffer.read()
    else:
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{path}: input file not found") from None
        except OSError as e:
            raise ConfigError(f"{path}: cannot read input ({e.strerror or e})") from None
    if raw.startswith(b"\x1f\x8b") or (path or "").endswith(".gz"):  # 1f 8b never starts UTF-8 text
        raw = gunzip(raw, name)
    lines = split_lines(raw.decode("utf-8", errors="replace"))
    bad = [i + 1 for i, line in enumerate(lines) if "\ufffd" in line]
    if bad:
        where = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        log.warning("%s: invalid UTF-8 on line %s, replaced with U+FFFD", name, where)
    return lines


def cmd_translate(args: argparse.Namespace) -> None:
    from mt.distributed import resolve_device
    from mt.rundir import load_run
    from mt.translate import translate_nbest

    _setup_logging()
    # an input file is read before the model loads (a wrong path fails fast); stdin after (a bad run
    # directory is reported before waiting on a terminal)
    lines = _read_input(args.input) if args.input else None
    cfg, tokenizer, model = load_run(args.run, args.checkpoint)
    decode, device = _decoding(cfg.decode, args), resolve_device(args.device)
    lines = lines if lines is not None else _read_input(None)
    found = translate_nbest(model.to(device), tokenizer, lines, decode, device, max_source_pieces=cfg.data.max_len)
    if decode.n_best == 1:
        out = [hyps[0][0] for hyps in found]
    else:  # Moses n-best format: input line index ||| translation ||| score
        out = [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(found) for text, score in hyps]
    text = "".join(line + "\n" for line in out)
    if args.output:
        from mt.files import write_text
        write_text(args.output, text)
        print(f"wrote {args.output} ({len(lines)} lines)", file=sys.stderr)
    else:
        sys.stdout.write(text)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from mt.evaluate import evaluate_run

    _setup_logging()
    if (args.src is None) != (args.ref is None):
        raise ConfigError("--src and --ref go together: a source file and its reference translation")
    files = (args.src, args.ref) if args.src else None
    result = evaluate_run(args.run, args.split, args.device, _flag_overrides(args), args.checkpoint, files)
    print(f"{result['split']}: BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  ({result['sentences']} "
          f"sentences, beam {result['beam']}, length penalty {result['length_penalty']}, {result['checkpoint']})")
    print(f"  {result['bleu_signature']}")
    print(f"  {result['chrf_signature']}")
    print(f"  lower-cased BLEU {result['bleu_lc']:.2f}: {result['bleu_lc_signature']}")
    print(f"wrote {', '.join(result['written'])}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> None:
    from mt.report import write_report

    _setup_logging()
    out, plots = write_report(args.runs, args.out, args.setting)
    png = out.with_name(out.stem + "-curves.png")
    also = "; plots skipped: matplotlib is not installed" if plots.startswith("Plots skipped") else f" and {png}"
    print(f"wrote {out}{also}")


def cmd_average(args: argparse.Namespace) -> None:
    from mt.checkpoint import write_average

    _setup_logging()
    if not Path(args.run).is_dir():
        raise ConfigError(f"{args.run}: run directory not found")
    print(f"wrote {write_average(Path(args.run), args.last)}")


def cmd_attention(args: argparse.Namespace) -> None:
    from mt.distributed import resolve_device
    from mt.evaluate import attention_for
    from mt.report import plot_attention
    from mt.rundir import load_run

    _setup_logging()
    cfg, tokenizer, model = load_run(args.run, args.checkpoint)
    device = resolve_device(args.device)
    found = attention_for(model.to(device), tokenizer, args.sentence, cfg.decode, device)
    out = Path(args.out or Path(args.run) / "attention.png")
    try:
        plot_attention(found.source, found.predicted, found.cross, out, per_head=args.per_head)
    except ImportError:
        raise ConfigError("mt attention needs matplotlib: pip install -e '.[plot]'") from None
    print(found.translation)
    print(f"wrote {out}", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> None:
    from mt.distributed import resolve_device
    try:
        from mt.serve import serve
    except ImportError as e:
        raise ConfigError(f"mt serve needs FastAPI and uvicorn ({e.name} is missing): pip install -e '.[serve]'") from None

    _setup_logging()
    limits = ServeLimits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeLimits)})
    serve(Path(args.run), args.checkpoint, args.host, args.port, resolve_device(args.device), limits,
          _flag_overrides(args))


LIMIT_HELP = {"max_request_bytes": "request body size", "max_lines": "lines per request",
              "max_line_chars": "characters per line", "max_beam": "largest beam a request may ask for",
              "max_queue": "requests waiting for the decoding thread",
              "max_batch_lines": "lines the decoding thread merges into one call",
              "max_wait_ms": "how long it waits for another request once the queue is empty (10x at most in all)"}


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 opens it to the network")
    p.add_argument("--port", type=_at_least(0), default=8000, help="port to listen on")
    group = p.add_argument_group("limits (a request over one gets a 413 or 422 naming it; a full queue, 503)")
    for f in dataclasses.fields(ServeLimits):
        group.add_argument("--" + f.name.replace("_", "-"), type=_at_least(0, type(f.default)), default=f.default,
                           metavar="N", help=LIMIT_HELP[f.name])


def _at_least(lo: float, kind: type = int):
    def parse(text: str):
        value = kind(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text} is less than {lo:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _run_options(p: argparse.ArgumentParser, decoding: bool = True, n_best: bool = False) -> None:
    """--run, --checkpoint, --device and the decoding flags, shared by the commands that load a run."""
    p.add_argument("--run", help="run directory (required)")
    p.add_argument("--checkpoint", default="best",
                   help="best (falls back to last.pt, with a warning, before the first validation), last, "
                        "averaged (see `mt average`), or a path")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: a GPU if one is visible")
    if not decoding:
        return
    group = p.add_argument_group("decoding (defaults: the run's decode config)")
    group.add_argument("--beam", type=_at_least(1), help="beam size; 1 = greedy")
    if n_best:
        group.add_argument("--n-best", type=_at_least(1), help="hypotheses per line, Moses format (<= beam)")
    group.add_argument("--length-penalty", type=_at_least(0.0, float), help="GNMT alpha; 0 = raw log-probability")
    group.add_argument("--batch-tokens", type=_at_least(16), help="source tokens per decoding batch")


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mt", description="Train and run Transformer translation models.")
    parser.add_argument("--version", action="version", version=f"mt {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    sub = parser.add_subparsers(dest="command", required=True)
    command = lambda name, text: sub.add_parser(name, help=text, description=text,  # noqa: E731
                                                formatter_class=_Help)
    p = command("train", "train a model from a YAML config (re-running it resumes)")
    p.add_argument("config", help="YAML config, e.g. configs/toy.yaml")
    p.add_argument("--run-dir", help="output directory (default: runs/<config name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a config key")
    p.add_argument("--force-new", action="store_true",
                   help="start over in a run directory that holds a checkpoint (its files move to replaced-*/)")
    p.set_defaults(func=cmd_train)
    p = command("translate", "translate lines, one output line per input line")
    _run_options(p, n_best=True)
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_translate)
    p = command("evaluate", "translate a split (or --src/--ref files) and score it with sacreBLEU")
    _run_options(p)
    p.add_argument("--split", default="test", choices=["test", "val"], help="the run's corpus split")
    p.add_argument("--src", help="score this source file instead of a split (with --ref)")
    p.add_argument("--ref", help="the reference translations of --src, line by line")
    p.set_defaults(func=cmd_evaluate)
    p = command("report", "compare runs: a Markdown table, significance tests, learning curves")
    p.add_argument("runs", nargs="+", help="run directories; the first is the baseline")
    p.add_argument("--out", default="runs/report.md", help="Markdown file; the plot goes beside it")
    p.add_argument("--setting", default="test", help="which evaluation to compare: test, val, test-beam5, ...")
    p.set_defaults(func=cmd_report)
    p = command("average", "average the last N kept checkpoints of a run (train.keep_last) into averaged.pt")
    p.add_argument("--run", help="run directory (required)")
    p.add_argument("--last", type=_at_least(1), default=5, help="how many of the newest ckpt-*.pt to average")
    p.set_defaults(func=cmd_average)
    p = command("serve", "serve a run over HTTP: a JSON API with dynamic batching, and an attention explorer at /")
    _run_options(p)
    _serve_options(p)
    p.set_defaults(func=cmd_serve)
    p = command("attention", "plot cross-attention of the greedy translation of one sentence")
    p.add_argument("sentence")
    _run_options(p, decoding=False)
    p.add_argument("--out", help="PNG file (default: RUN/attention.png)")
    p.add_argument("--per-head", action="store_true", help="one panel per head instead of the mean over heads")
    p.set_defaults(func=cmd_attention)
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


def _exit_code(e: Exception) -> int | None:
    """2 for input the user can fix, 1 for training that cannot go on, None for a bug."""
    if isinstance(e, (ConfigError, DataError)):
        return 2
    from mt.distributed import RankFailure  # imports torch: only on this path
    from mt.train import TrainingError
    return 1 if isinstance(e, (TrainingError, RankFailure)) else None


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:  # a second Ctrl-C while training, or one in any other command
        if args.debug:
            raise
        print("mt: interrupted; files are written whole or not at all, so every checkpoint is intact",
              file=sys.stderr)
        return EXIT_ON_SIGNAL["SIGINT"]
    except Exception as e:
        code = _exit_code(e)
        if code is None or args.debug:
            raise
        where = f"[rank {_rank()}] " if "WORLD_SIZE" in os.environ else ""
        print(f"mt: error: {where}{one_line(str(e))}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
