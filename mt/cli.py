"""`mt train | translate | evaluate | report | attention`: the command line, the only module that knows every other one.

User-fixable problems (ConfigError, DataError) print one line and exit with code 2; `--debug` shows
the traceback instead.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from mt.config import ConfigError, load_config
from mt.data import DataError

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


def _decode_overrides(args: argparse.Namespace) -> list[str]:
    """Decoding flags given on the command line, as config overrides of the run's decode section."""
    flags = {"beam": args.beam, "n_best": args.n_best, "length_penalty": args.length_penalty,
             "batch_tokens": args.batch_tokens}
    return [f"decode.{key}={value}" for key, value in flags.items() if value is not None]


def _read_input(path: str | None) -> list[str]:
    """Input lines, split on newlines only; invalid UTF-8 is replaced (U+FFFD) with a warning."""
    from mt.data import split_lines

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
    cfg, tokenizer, model = load_run(args.run, overrides=_decode_overrides(args))
    device = resolve_device(args.device)
    lines = lines if lines is not None else _read_input(None)
    found = translate_nbest(model.to(device), tokenizer, lines, cfg.decode, device,
                            max_source_pieces=cfg.data.max_len)
    if cfg.decode.n_best == 1:
        out = [hyps[0][0] for hyps in found]
    else:  # Moses n-best format: input line index ||| translation ||| score
        out = [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(found) for text, score in hyps]
    text = "".join(line + "\n" for line in out)
    if args.output:
        from mt.files import write_text
        write_text(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from mt.evaluate import evaluate_run

    _setup_logging()
    result = evaluate_run(args.run, args.split, args.device, _decode_overrides(args))
    print(f"{args.split}: BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  ({result['sentences']} sentences, "
          f"beam {result['beam']}, length penalty {result['length_penalty']})")
    print(f"  {result['bleu_signature']}")
    print(f"  {result['chrf_signature']}")


def cmd_report(args: argparse.Namespace) -> None:
    from mt.report import write_report

    _setup_logging()
    out, plots = write_report(args.runs, args.out, args.setting)
    skipped = "; plots skipped: matplotlib is not installed" if plots.startswith("Plots skipped") else ""
    print(f"wrote {out}{skipped}")


def cmd_attention(args: argparse.Namespace) -> None:
    from mt.distributed import resolve_device
    from mt.evaluate import attention_for
    from mt.report import plot_attention
    from mt.rundir import load_run

    _setup_logging()
    cfg, tokenizer, model = load_run(args.run)
    device = resolve_device(args.device)
    found = attention_for(model.to(device), tokenizer, args.sentence, cfg.decode, device)
    try:
        plot_attention(found.source, found.target, found.layers, Path(args.out), per_head=args.per_head)
    except ImportError:
        raise ConfigError("mt attention needs matplotlib: pip install -e '.[plot]'") from None
    print(found.translation)
    print(f"wrote {args.out}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mt", description="Train and run Transformer translation models.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("config")
    p.add_argument("--run-dir", help="output directory (default runs/<config name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a config key")
    p.add_argument("--force-new", action="store_true",
                   help="start over in a run directory that holds a checkpoint (its files move to replaced-*/)")
    p.set_defaults(func=cmd_train)

    decoding = argparse.ArgumentParser(add_help=False)
    group = decoding.add_argument_group("decoding (defaults: the run's decode config)")
    group.add_argument("--beam", type=int, help="beam size; 1 = greedy")
    group.add_argument("--n-best", type=int, help="hypotheses per line (translate; <= beam)")
    group.add_argument("--length-penalty", type=float, help="GNMT alpha; 0 = raw log-probability")
    group.add_argument("--batch-tokens", type=int, help="source tokens per decoding batch")

    p = sub.add_parser("translate", parents=[decoding], help="translate lines (stdin -> stdout by default)")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--input", help="input file (default stdin)")
    p.add_argument("--output", help="output file (default stdout)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", parents=[decoding], help="translate a split and score it with sacreBLEU")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--split", default="test", choices=["test", "val"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("report", help="compare runs: a Markdown table, significance tests, learning curves")
    p.add_argument("runs", nargs="+", help="run directories; the first is the baseline")
    p.add_argument("--out", default="report.md", help="Markdown file; the plot goes beside it")
    p.add_argument("--setting", default="test",
                   help="which evaluation to compare: test, val, test-beam5, ... (default test)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("attention", help="plot cross-attention of the greedy translation of one sentence")
    p.add_argument("sentence")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--out", default="attention.png", help="PNG file")
    p.add_argument("--per-head", action="store_true", help="one panel per head instead of the mean over heads")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=cmd_attention)
    return parser


def main(argv: list[str] | None = None) -> int:
    from mt.distributed import RankFailure
    from mt.train import TrainingError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:  # a second Ctrl-C while training, or one in any other command
        if args.debug:
            raise
        print("mt: interrupted; files are written whole or not at all, so every checkpoint is intact",
              file=sys.stderr)
        return EXIT_ON_SIGNAL["SIGINT"]
    except (ConfigError, DataError, TrainingError, RankFailure) as e:
        if args.debug:
            raise
        where = f"[rank {_rank()}] " if "WORLD_SIZE" in os.environ else ""
        print(f"mt: error: {where}{e}", file=sys.stderr)
        return 2 if isinstance(e, (ConfigError, DataError)) else 1


if __name__ == "__main__":
    sys.exit(main())
