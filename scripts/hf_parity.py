"""A run's `mt export --format hf` against mt itself on a test set: greedy lines equal (Transformers'
generate cut at mt's own a * S + b limit), every differing line's near tie (the top two
log-probabilities' gap where the two first part), the beam at the run's tuned setting (mt's beam and
length penalty; generate with the export's generation_config.json, whose penalty is matched in
Transformers' formula) with its lines equal and BLEU, and sentences/s of Transformers' greedy and beam
beside mt's torch and CTranslate2 engines, measured in one process. The test set is the run's split
(read as mt reads it), or --src/--ref files (plain or .gz, read as mt reads them). A run tuned to MBR
or reranking is compared on the beam search beneath it: the export carries that alone.

    python scripts/hf_parity.py --run runs/multi30k [--split test | --src F --ref F]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from mt.data import load_split, read_parallel
from mt.translator import Translator


def hf_translate(model, tokenizer, lines: list[str], a: float, b: int, batch: int, **options) -> list[str]:
    """Transformers' generate over `lines` in batches of similar length; each output cut at its own
    line's limit a * S + b (S with eos), as mt cuts it."""
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    found: list[str] = [""] * len(lines)
    for start in range(0, len(order), batch):
        group = order[start : start + batch]
        enc = tokenizer([lines[i] for i in group], return_tensors="pt", padding=True).to(model.device)
        limits = [int(a * int(m.sum()) + b) for m in enc["attention_mask"]]
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max(limits), do_sample=False, **options)
        for i, row, limit in zip(group, out, limits):
            found[i] = tokenizer.decode(row[1 : limit + 1], skip_special_tokens=True)
    return found


def near_tie(t: Translator, line: str, mine: str, theirs: str) -> float:
    """The gap between the top two log-probabilities of mt's model where the two outputs first part."""
    a, b = t.tokenizer.encode_target([mine])[0], t.tokenizer.encode_target([theirs])[0]
    k = next(i for i in range(min(len(a), len(b)) + 1) if i == min(len(a), len(b)) or a[i] != b[i])
    src = torch.tensor([t.tokenizer.encode([line])[0] + [3]])
    with torch.no_grad():
        logits = t.model(src, src != 0, torch.tensor([[2] + a[:k]]), torch.ones(1, k + 1, dtype=torch.bool))
    top = torch.log_softmax(t.model.to_pieces(logits[0, -1].float()), -1).topk(2).values
    return float(top[0] - top[1])


def timed(fn) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("--split", default="test", help="the run's split, where --src and --ref are not given")
    p.add_argument("--src")
    p.add_argument("--ref")
    p.add_argument("--batch", type=int, default=32, help="Transformers' sentences a generate call")
    p.add_argument("--out", help="write the figures as JSON here")
    p.add_argument(
        "--device", default="cpu", help="where mt and Transformers translate (the export is made on the CPU)"
    )
    args = p.parse_args()
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    t = Translator.from_run(
        args.run, device="cpu", rerank="", mbr="", mbr_samples=0
    )  # what the export carries
    if args.src:
        lines, refs = read_parallel(Path(args.src), Path(args.ref))
    else:
        lines, refs = load_split(t.config.data, args.split)
    folder = Path(tempfile.mkdtemp()) / "hf"
    _, export_s = timed(lambda: t.export(out=folder, format="hf", score=True))  # the penalty matched
    size = sum(f.stat().st_size for f in folder.iterdir())
    model, tokenizer = (
        AutoModelForSeq2SeqLM.from_pretrained(folder).eval().to(args.device),
        AutoTokenizer.from_pretrained(folder),
    )
    generation = json.loads((folder / "generation_config.json").read_text())
    d = t.config.decode
    on_device = (
        t
        if args.device == "cpu"
        else Translator.from_run(args.run, device=args.device, rerank="", mbr="", mbr_samples=0)
    )
    mine, mine_greedy_s = timed(lambda: on_device.translate(lines, beam=1))
    theirs, hf_greedy_s = timed(
        lambda: hf_translate(model, tokenizer, lines, d.max_len_a, d.max_len_b, args.batch, num_beams=1)
    )
    differing = [i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y]
    gaps = [near_tie(t, lines[i], mine[i], theirs[i]) for i in differing]
    beam, lp, hf_lp = d.beam, d.length_penalty, generation.get("length_penalty", 1.0)
    mine_beam, mine_beam_s = timed(lambda: on_device.translate(lines, beam=beam, length_penalty=lp))
    hf_beam, hf_beam_s = timed(
        lambda: hf_translate(
            model,
            tokenizer,
            lines,
            d.max_len_a,
            d.max_len_b,
            args.batch,
            num_beams=beam,
            length_penalty=hf_lp,
        )
    )
    ct2 = {}
    try:
        if not (Path(args.run) / "ct2").exists():
            t.export()  # RUN/ct2, which the ctranslate2 engine reads
        c = Translator.from_run(args.run, device="cpu", engine="ctranslate2")
        ct2["greedy_s"] = timed(lambda: c.translate(lines, beam=1))[1]
        ct2["beam_s"] = timed(lambda: c.translate(lines, beam=beam, length_penalty=lp))[1]
    except Exception as e:  # noqa: BLE001  CTranslate2 is a side figure: say why it is missing
        ct2["error"] = str(e).splitlines()[0]
    n = len(lines)
    figures = {
        "lines": n,
        "greedy_equal": n - len(differing),
        "differing": [{"line": i + 1, "gap": gaps[k]} for k, i in enumerate(differing)],
        "bleu_greedy": {
            "mt": sacrebleu.corpus_bleu(mine, [refs]).score,
            "hf": sacrebleu.corpus_bleu(theirs, [refs]).score,
        },
        "beam": beam,
        "length_penalty": {"mt": lp, "hf": hf_lp},
        "bleu_beam": {
            "mt": sacrebleu.corpus_bleu(mine_beam, [refs]).score,
            "hf": sacrebleu.corpus_bleu(hf_beam, [refs]).score,
        },
        "beam_lines_equal": sum(x == y for x, y in zip(mine_beam, hf_beam)),
        "export_s": export_s,
        "export_bytes": size,
        "sentences_per_s": {
            "mt greedy": n / mine_greedy_s,
            "hf greedy": n / hf_greedy_s,
            "mt beam": n / mine_beam_s,
            "hf beam": n / hf_beam_s,
            **{f"ct2 {k[:-2]}": n / v for k, v in ct2.items() if k.endswith("_s")},
        },
        "ct2": ct2.get("error", "ok"),
        "threads": torch.get_num_threads(),
        "device": args.device,
    }
    text = json.dumps(figures, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
