"""A CTranslate2 export loaded for search (`Ct2Model`), as `translate.search_lines` uses a Seq2Seq.

Scores: CTranslate2 ranks finished hypotheses by logprob / length^alpha. `Ct2Model` asks it for the
raw log-probability (RAW_SCORES below) of all `beam` finished hypotheses and ranks them by mt's
logprob / ((5 + length) / 6)^alpha, eos counted, so 1-best and n-best lists are mt's rankings. Both
searches take eos only from the K best of 2K candidates and stop a sentence at K finished, so they
agree hypothesis for hypothesis; they can still differ by float rounding (int8 most) and where a
batch's length limit (CTranslate2 takes one per batch) is longer than a line's own (cut and rescored).
Greedy search asked for text only (`text_only`: translate_lines, so evaluate, tune and validation)
asks CTranslate2 for no scores: its hypotheses' score and logprob are NaN.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from mt.config import EOS
from mt.ct2.export import MODEL_FIELDS, ctranslate2, read_note, unmapped, vocabulary, weights_sha256
from mt.decode import Ensemble, Hypothesis
from mt.decode_config import DecodeConfig
from mt.model import Seq2Seq
from mt.plumbing.engine_fields import ByMt, Carried, Unsupported, carried
from mt.plumbing.errors import RunDirError
from mt.tokenizer import Tokenizer

# CTranslate2's length penalty when mt ranks: any nonzero one makes its beam stop a sentence once `beam`
# hypotheses are finished, as mt's does (at 0 it goes on until the top beam ends too), and
# length ** 1e-30 == 1.0 in float, so the scores it returns stay raw log-probabilities
RAW_SCORES = 1e-30


# How CTranslate2 follows each decoding option (export.MODEL_FIELDS says how the table reads): the engine
# loads and searches with the arguments its Carried entries make, and refuses the rest when set
DECODE_FIELDS = {
    "beam": Carried("beam_size", lambda cfg: cfg.beam),
    "n_best": ByMt("every finished hypothesis asked for (num_hypotheses = beam), ranked by mt (_ranked)"),
    "length_penalty": ByMt("mt's GNMT ranking of raw log-probabilities (RAW_SCORES)"),
    "max_len_a": ByMt("max_decoding_length, each line's own limit cut by mt (_cut)"),
    "max_len_b": ByMt("max_decoding_length, each line's own limit cut by mt (_cut)"),
    "no_repeat_ngram": Carried("no_repeat_ngram_size", lambda cfg: cfg.no_repeat_ngram),
    "min_len": Carried("min_decoding_length", lambda cfg: cfg.min_len),
    "batch_tokens": ByMt("mt's batches (translate.search_lines)"),
    "engine": ByMt("this engine"),
    "compute_type": Carried("compute_type", lambda cfg: cfg.compute_type, "load"),
    "sample": Unsupported("one random stream a process: a line's draws would depend on its batch"),
    "temperature": ByMt("changes nothing without sample"),
    "seed": ByMt("changes nothing without sample"),
    "mbr": Unsupported("it chooses among mt's own search's candidates (mt.rescoring.rerank)"),
    "mbr_samples": ByMt("changes nothing without mbr"),
    "mbr_temperature": ByMt("changes nothing without mbr"),
    "rerank": Unsupported("it chooses among mt's own search's candidates (mt.rescoring.rerank)"),
    "rerank_weight": ByMt("changes nothing without rerank"),
    "split_sentences": ByMt("mt.sentences, before and after the search"),
}


class Ct2Model:
    """A CTranslate2 export loaded for search. `translate.search_lines` uses it as it uses a Seq2Seq:
    `cfg` is the exported model's ModelConfig, `search` answers as `decode.search` does, and `eval`
    and `train` keep the torch model's calls working."""

    training = False
    scores = True  # greedy search asks for scores: False in a `text_only` copy

    def __init__(
        self,
        folder: Path,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device,
        threads: tuple[int, int] = (1, 0),
    ):
        """`threads`: (translators, threads each); 0 threads = CTranslate2's default. Several
        one-thread translators decode the batches of a file side by side (`search_groups`)."""
        ct2, note = ctranslate2(), read_note(folder)
        unmapped(model.cfg, MODEL_FIELDS, "model")
        unmapped(decode, DECODE_FIELDS, "decode")
        if note["weights_sha256"] != weights_sha256(model):
            raise RunDirError(
                f"{folder}: exported from other weights than the checkpoint asked for; export it again "
                f"with `mt export --run {folder.parent} --checkpoint ...`"
            )
        try:
            self.translator = ct2.Translator(
                str(folder),
                torch.device(device).type,
                inter_threads=threads[0],
                intra_threads=threads[1],
                **carried(decode, DECODE_FIELDS, "load"),
            )
        except (RuntimeError, ValueError) as e:  # a damaged model.bin, or a type this device lacks
            reason = (str(e).splitlines() or [""])[0][:120]
            raise RunDirError(f"{folder}: CTranslate2 cannot load it ({reason})") from None
        self.cfg, self.folder, self.threads = model.cfg, folder, threads
        self.pieces = vocabulary(tokenizer)
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}

    def eval(self) -> Ct2Model:
        return self

    def train(self, mode: bool = True) -> Ct2Model:
        return self

    def text_only(self) -> Ct2Model:
        """This model, for callers that read only the text: its greedy search asks CTranslate2 for no
        scores (the argmax without a softmax), so its hypotheses' score and logprob are NaN."""
        text = copy.copy(self)  # the same loaded translator
        text.scores = False
        return text

    def search_groups(
        self, batches: list[tuple[list[list[int]], list[list[int]]]], cfg: DecodeConfig
    ) -> list[list[list[Hypothesis]]]:
        """`search` of each batch of (sources, forced prefixes), all submitted at once: translators
        decode them side by side. A beam always asks for scores (mt ranks its hypotheses); greedy
        unless this is a `text_only` model."""
        unmapped(cfg, DECODE_FIELDS, "decode")
        scored = self.scores or cfg.beam > 1
        pending = [self._submit(parts, prefixes, cfg, scored) for parts, prefixes in batches]
        return [self._collect(*submitted, cfg) for submitted in pending]

    def search(
        self, parts: list[list[int]], cfg: DecodeConfig, prefixes: list[list[int]] | None = None
    ) -> list[list[Hypothesis]]:
        """cfg.n_best hypotheses for each source (piece ids without eos), ranked by mt's GNMT score,
        each starting with its forced prefix where one is given (CTranslate2's target_prefix).
        CTranslate2 takes one length limit per batch: an output longer than its own a * S + b limit
        is cut there, as mt's search stops it, and its cut pieces are scored again."""
        return self.search_groups([(parts, prefixes or [[] for _ in parts])], cfg)[0]

    def _submit(
        self, parts: list[list[int]], prefixes: list[list[int]], cfg: DecodeConfig, scored: bool
    ) -> tuple:
        cap = self.cfg.max_positions - 1
        limits = [  # mt's: a * S + b, or room for the prefix and b more (decode.prefix_limits)
            min(max(int(cfg.max_len_a * (len(ids) + 1) + cfg.max_len_b), len(p) + cfg.max_len_b), cap)
            for ids, p in zip(parts, prefixes)
        ]
        sources = [[self.pieces[i] for i in ids] for ids in parts]
        forced = [[self.pieces[i] for i in p] or None for p in prefixes] if any(prefixes) else None
        pending = self.translator.translate_batch(
            sources,
            forced,
            asynchronous=True,
            num_hypotheses=cfg.beam,  # every finished hypothesis, to rank by mt's penalty
            length_penalty=RAW_SCORES,
            return_scores=scored,
            return_end_token=True,
            max_input_length=0,
            max_decoding_length=max(limits),
            **carried(cfg, DECODE_FIELDS, "search"),
        )
        return sources, forced, limits, pending, scored

    def _collect(
        self,
        sources: list,
        forced: list | None,
        limits: list[int],
        pending: list,
        scored: bool,
        cfg: DecodeConfig,
    ) -> list[list[Hypothesis]]:
        results = [p.result() for p in pending]
        found = [
            [
                self._cut(tokens, logprob, limit)
                for tokens, logprob in zip(
                    r.hypotheses, r.scores if scored else [math.nan] * len(r.hypotheses)
                )
            ]
            for r, limit in zip(results, limits)
        ]
        if not scored:  # text only: nothing to rescore
            return [self._ranked([(ids, ended, math.nan) for ids, ended, _ in hyps], cfg) for hyps in found]
        led = [i for i, prefix in enumerate(forced or []) if prefix]
        if led:  # CTranslate2 scores what follows a forced prefix: add the prefix's own log-probability
            for i, r in zip(
                led, self.translator.score_batch([sources[i] for i in led], [forced[i] for i in led])
            ):
                lead = sum(r.log_probs[:-1])
                found[i] = [(ids, ended, None if lp is None else lp + lead) for ids, ended, lp in found[i]]
        cut = [(i, j) for i, hyps in enumerate(found) for j, (_, _, lp) in enumerate(hyps) if lp is None]
        if cut:  # the cut pieces' log-probability: scored without the eos that score_batch adds
            targets = [[self.pieces[t] for t in found[i][j][0]] for i, j in cut]
            for (i, j), r in zip(cut, self.translator.score_batch([sources[i] for i, _ in cut], targets)):
                found[i][j] = (found[i][j][0], False, sum(r.log_probs[:-1]))
        return [self._ranked(hyps, cfg) for hyps in found]

    def _cut(self, tokens: list[str], logprob: float, limit: int) -> tuple[list[int], bool, float | None]:
        """(ids without eos, whether eos ended them, their log-probability; None: cut, to score again)."""
        ids = [self.ids[piece] for piece in tokens]
        if len(ids) <= limit:
            ended = bool(ids) and ids[-1] == EOS
            return (ids[:-1] if ended else ids), ended, logprob
        return ids[:limit], False, None

    def _ranked(self, found: list[tuple[list[int], bool, float]], cfg: DecodeConfig) -> list[Hypothesis]:
        hyps = []
        for ids, ended, logprob in found:  # greedy's score is its log-probability, beam's GNMT's, as mt's
            penalty = ((5 + len(ids) + ended) / 6) ** cfg.length_penalty if cfg.beam > 1 else 1.0
            hyps.append(Hypothesis(ids, logprob / penalty, logprob, ended))
        return sorted(hyps, key=lambda h: -h.score)[: cfg.n_best]


def engine_for(
    run: Path,
    decode: DecodeConfig,
    tokenizer: Tokenizer,
    model: Seq2Seq | Ensemble,
    device: torch.device,
    whole_files: bool = True,
) -> Seq2Seq | Ensemble | Ct2Model:
    """What translation searches with: the torch `model` on `device`, or for decode.engine ctranslate2
    the run's CTranslate2 export (RUN/ct2, `mt export`), checked to hold the same weights. Threads:
    beam search over `whole_files` runs one one-thread translator per thread, decoding batches side
    by side; greedy search and serve's one batch at a time, one translator with all the threads (on
    2 cores: beam 5 7% faster, greedy 8% slower the first way; scripts/bench_decode.py --ct2-threads)."""
    if decode.engine == "torch":
        return model.to(device)
    n = torch.get_num_threads()
    threads = (n, 1) if whole_files and decode.beam > 1 else (1, n)
    return Ct2Model(run / "ct2", model, tokenizer, decode, device, threads)
