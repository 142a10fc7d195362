"""The command line: each of `mt --help`'s commands run (their grammar is mt.arguments'). Every
command that uses a trained run opens it with the Python API (mt.translator's `Translator`). It
imports torch only inside the commands, so `mt --help` and `mt --version` are quick.

User-fixable problems (mt.plumbing.errors' UserError: config, data, run directory, server) print one
line and exit with code 2; `--debug` shows the traceback instead. Every command that writes a file says where.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

from mt.arguments import build_parser, one_line, parse
from mt.config import load_config
from mt.decode_config import DecodeConfig
from mt.plumbing.errors import ConfigError, DataError, RunDirError, UserError
from mt.plumbing.files import write_stdout, write_text
from mt.plumbing.spelling import COMMAND_LINE
from mt.run.names import chooser_text
from mt.serving.limits import ServeLimits

log = logging.getLogger("mt")


def _rank() -> int:
    """This process's rank under torchrun (0 otherwise)."""
    return int(os.environ.get("RANK", 0))


def _setup_logging() -> None:
    """INFO to stderr; under torchrun only rank 0 logs INFO. (Training adds DIR/train.log itself, once
    the run directory may be written.)"""
    from mt.run.folder import LOG_FORMAT

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LOG_FORMAT)
    if _rank() > 0:
        handler.setLevel(logging.WARNING)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


EXIT_ON_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}  # the shell's 128 + signal number


def cmd_train(args: argparse.Namespace) -> int:
    from mt.training.distributed import stop
    from mt.training.train import train

    overrides = [*args.set, *([f"train.init_from={args.init_from}"] if args.init_from else [])]
    cfg = load_config(args.config, overrides)
    run_dir = Path(args.run_dir or Path("runs") / cfg.name)
    _setup_logging()
    try:
        result = train(cfg, run_dir, force_new=args.force_new)
    except BaseException:
        stop()  # the process group outlives everything train() made (DDP must go first)
        raise
    stop(together=True)
    if result["tuning"]:  # train.tune, on rank 0
        _print_tuning(run_dir, result["tuning"])
    if result["interrupted"] and _rank() == 0:
        world = int(os.environ.get("WORLD_SIZE", 1))
        launcher = [f"torchrun --nproc_per_node {world} -m mt"] if world > 1 else ["mt"]
        again = " ".join(
            [*launcher, "train", args.config, "--run-dir", str(run_dir), *(f"--set {s}" for s in overrides)]
        )
        print(
            f"mt: training stopped by {result['interrupted']} at step {result['step']}; resume with: {again}",
            file=sys.stderr,
        )
    return EXIT_ON_SIGNAL.get(result["interrupted"], 0)


def _decoding_flags(args: argparse.Namespace) -> dict:
    """The DecodeConfig keys given as flags (a flag's dest is its key: --n-best is n_best)."""
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(DecodeConfig)}
    return {key: value for key, value in given.items() if value is not None}


def _open(args: argparse.Namespace, **more):
    """The run that --run and --checkpoint name, opened on --device with the decoding flags given (a
    conflict is named in the flags' terms): the one way a command opens a trained run."""
    from mt.translator import Translator

    options = {"device": getattr(args, "device", "auto"), **_decoding_flags(args), **more}
    return Translator.from_run(args.run, args.checkpoint, spelling=COMMAND_LINE, **options)


def input_lines(path: str | None) -> list[str]:
    """What a command reads as its input (the file `path`, or stdin for None) as lines, split on
    newlines only, not normalised; gzip data (a .gz file, or bytes that start as gzip does) is
    decompressed; invalid UTF-8 is replaced (U+FFFD) with a warning, where `read_lines` refuses it (a
    user's text to translate is taken as it comes, a corpus is not)."""
    from mt.data import gunzip, text_lines

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
    lines = text_lines(raw.decode("utf-8", errors="replace"))
    bad = [i + 1 for i, line in enumerate(lines) if "\ufffd" in line]
    if bad:
        where = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        log.warning("%s: invalid UTF-8 on line %s, replaced with U+FFFD", name, where)
    return lines


def cmd_translate(args: argparse.Namespace) -> None:
    _setup_logging()
    # an input file is read before the model loads (a wrong path fails fast); stdin after (a bad run
    # directory is reported before waiting on a terminal)
    lines = input_lines(args.input) if args.input else None
    translator = _open(args, ensemble=args.ensemble or [])
    lines = lines if lines is not None else input_lines(None)
    prefixes = input_lines(args.prefix_file) if args.prefix_file else None
    if prefixes is not None and len(prefixes) != len(lines):
        raise DataError(
            f"{args.prefix_file} has {len(prefixes)} lines but the input has {len(lines)}; "
            f"give one prefix per input line (an empty line for none)"
        )
    if args.alignments:
        translator.alignable()  # refused before any translating
    found = translator.nbest(lines, prefixes)
    if translator.decode.n_best == 1:
        out = [hyps[0][0] for hyps in found]
    else:  # Moses n-best format: input line index ||| translation ||| score
        out = [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(found) for text, score in hyps]
    text = "".join(line + "\n" for line in out)
    if args.alignments:  # the torch model's attention (an ensemble's first), whatever the engine
        aligned = translator.align(lines, [hyps[0][0] for hyps in found])
        write_text(args.alignments, "".join(line + "\n" for line in aligned))
        print(f"wrote {args.alignments} ({len(aligned)} lines)", file=sys.stderr)
    if args.output:
        write_text(args.output, text)
        print(f"wrote {args.output} ({len(lines)} lines)", file=sys.stderr)
    else:
        write_stdout(text)


def cmd_score(args: argparse.Namespace) -> None:
    """Each pair's log-probability: sum, GNMT score (eos counted, as n-best lists), then one per piece
    and eos; tab-separated, one line per input pair."""
    from mt.data import read_parallel

    _setup_logging()
    src, ref = read_parallel(Path(args.src), Path(args.ref))
    scored = _open(args, engine="torch").score(src, ref)
    text = "".join(
        f"{s.logprob:.4f}\t{s.score:.4f}\t{' '.join(f'{lp:.4f}' for lp in s.token_logprobs)}\n"
        for s in scored
    )
    if args.output:
        write_text(args.output, text)
        print(f"wrote {args.output} ({len(scored)} lines)", file=sys.stderr)
    else:
        write_stdout(text)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from mt.evaluate import evaluate_run
    from mt.plumbing.metrics import HEADLINE, METRICS

    _setup_logging()
    if (args.src is None) != (args.ref is None):
        raise ConfigError("--src and --ref go together: a source file and its reference translation")
    files = (args.src, args.ref) if args.src else None
    result = evaluate_run(_open(args, ensemble=args.ensemble or []), args.split, files)
    scores = "  ".join(f"{m.label} {result[m.key]:.2f}" for m in HEADLINE)
    print(
        f"{result['split']}: {scores}  ({result['sentences']} sentences, beam {result['beam']}, length "
        f"penalty {result['length_penalty']}, {result['checkpoint']})"
    )
    for m in METRICS:  # the headline scores are on the first line
        score = "" if m.headline else f"{m.label} {result[m.key]:.2f} ({m.note}): "
        print(f"  {score}{result[f'{m.key}_signature']}")
    print(f"wrote {', '.join(result['written'])}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> None:
    from mt.report.markdown import write_report

    _setup_logging()
    out, plots = write_report(args.runs, args.out, args.setting)
    png = out.with_name(out.stem + "-curves.png")
    also = (
        "; plots skipped: matplotlib is not installed" if plots.startswith("Plots skipped") else f" and {png}"
    )
    print(f"wrote {out}{also}")


def cmd_average(args: argparse.Namespace) -> None:
    from mt.run.checkpoint import write_average

    _setup_logging()
    if not Path(args.run).is_dir():
        raise RunDirError(f"{args.run}: run directory not found")
    print(f"wrote {write_average(Path(args.run), args.last)}")


def cmd_export(args: argparse.Namespace) -> None:
    _setup_logging()
    # CTranslate2 takes the weights from host memory; neither export carries reranking, so its runs stay shut
    translator = _open(args, engine="torch", device="cpu", rerank="")
    print(f"wrote {translator.export(args.quantization, args.out, args.format, score=args.score)}")


def cmd_attention(args: argparse.Namespace) -> None:
    from mt.attention import plot_attention

    _setup_logging()
    found = _open(args, engine="torch").attention([args.sentence], beam=1, n_best=1)[0]
    out = Path(args.out or Path(args.run) / "attention.png")
    try:
        plot_attention(found.source, found.predicted, found.cross, out, per_head=args.per_head)
    except ImportError:
        raise ConfigError("mt attention needs matplotlib: pip install -e '.[plot]'") from None
    print(found.translation)
    print(f"wrote {out}", file=sys.stderr)


def cmd_serve(args: argparse.Namespace) -> None:
    try:
        from mt.serving.app import check_port, serve
    except ImportError as e:
        raise ConfigError(
            f"mt serve needs FastAPI and uvicorn ({e.name} is missing): pip install -e '.[serve]'"
        ) from None

    _setup_logging()
    limits = ServeLimits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeLimits)})
    check_port(args.host, args.port)  # before the model loads
    translator = _open(args, ensemble=args.ensemble or [], whole_files=False)
    serve(translator, args.host, args.port, limits)


def _exit_code(e: Exception) -> int | None:
    """2 for input the user can fix, 1 for training that cannot go on, None for a bug."""
    if isinstance(e, UserError):
        return 2
    from mt.training.distributed import RankFailure  # imports torch: only on this path
    from mt.training.train import TrainingError

    return 1 if isinstance(e, (TrainingError, RankFailure)) else None


def cmd_distill(args: argparse.Namespace) -> None:
    from mt.distill import distill
    from mt.run.parent import read_teacher

    _setup_logging()
    teacher = _open(args, ensemble=args.ensemble or [])
    folder = distill(teacher, Path(args.out) if args.out else None, args.with_references)
    record = read_teacher(folder)
    print(
        f"{folder}: {record['lines']} training pairs, translated in {record['translate_s']:.0f} s; "
        f"train a student on it with --set data.corpus=files --set data.dir={folder}",
        file=sys.stderr,
    )
    print(folder)  # on stdout alone: --set data.dir=$(mt distill ...)


def cmd_tune(args: argparse.Namespace) -> None:
    from mt.training.tuning import Grid, tune

    _setup_logging()
    given = {"beams": args.beams, "length_penalties": args.length_penalties}
    grid = Grid(**{k: tuple(v) for k, v in given.items() if v}, mbr=args.mbr, rerank=args.rerank)
    tuning = tune(args.run, args.checkpoint, args.device, grid)
    _print_tuning(args.run, tuning)


def _print_tuning(run: str | Path, tuning: dict) -> None:
    from mt.plumbing.metrics import PRIMARY
    from mt.run.folder import runs_from

    c = tuning["chosen"]
    if c.get("rerank"):  # stored from the run's folder: named here from the working one
        c = {**c, "rerank": runs_from(c["rerank"], Path(run))}
    print(
        f"{run}: beam {c['beam']}, length penalty {c['length_penalty']:g}{chooser_text(c, run)} "
        f"(val {PRIMARY.label} {c[PRIMARY.key]:.2f}, length ratio {c['length_ratio']:.3f}; best of "
        f"{len(tuning['tried'])} tried); the run now translates with them unless told otherwise",
        file=sys.stderr,
    )


COMMANDS = {
    "train": cmd_train,
    "translate": cmd_translate,
    "evaluate": cmd_evaluate,
    "score": cmd_score,
    "report": cmd_report,
    "average": cmd_average,
    "export": cmd_export,
    "serve": cmd_serve,
    "attention": cmd_attention,
    "distill": cmd_distill,
    "tune": cmd_tune,
}


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    try:
        return COMMANDS[args.command](args) or 0
    except KeyboardInterrupt:  # a second Ctrl-C while training, or one in any other command
        if args.debug:
            raise
        print(
            "mt: interrupted; files are written whole or not at all, so every checkpoint is intact",
            file=sys.stderr,
        )
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
