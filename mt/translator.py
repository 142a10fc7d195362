"""The Python API: a trained run opened once, to translate, score and align with, `Translator`. Every
command that translates, scores, evaluates or serves with a trained run opens it here; `mt tune`, `mt
average` and scripts/run_compute.py read a run's files below it (mt.run.folder, mt.run.checkpoint).

    from mt import Translator

    translator = Translator.from_run("runs/multi30k", beam=5)
    translator.translate(["Ein Hund rennt im Schnee.", ""])  # ["A dog runs in the snow.", ""]

Opening a run reads its config, tokenizer and checkpoint (each checked: damage is a one-line error),
adds the runs of an ensemble, and chooses the engine that searches: the torch model on `device`, or
the run's CTranslate2 export (mt.ct2), checked to hold the same weights. Decoding options are
DecodeConfig's fields, as keywords: those given to `from_run` change the run's decode config for every
call, and a call may change any of them again but the engine and its compute type.

Arguments: every method takes its lines as a list of str (any iterable of str) and gives a list, one
item per line ([] for []); a str is refused with a TypeError rather than read as its characters, and
an item that is not a str is a TypeError naming its index (`as_lines`). An unknown or ill-typed
keyword is a ConfigError (a ValueError) from `decoding`, naming the keyword and the closest valid one.

Threads: one Translator may be shared by threads. Its calls run one at a time (`lock`), because a
model's buffers and a CTranslate2 translator's thread pool serve one search at a time; `mt serve`'s
decoding thread is its one caller there.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mt.attention import AttentionMap, attention_maps, line_alignments
from mt.config import RunConfig, config_to_dict
from mt.ct2.engine import Ct2Model, engine_for
from mt.ct2.export import export_model
from mt.decode import Ensemble
from mt.decode_config import DecodeConfig, decoding
from mt.hf.export import export_run
from mt.inputs import as_lines, described, device_of, one_per_line
from mt.model import Seq2Seq
from mt.output_pieces import written_pieces
from mt.plumbing.errors import ConfigError, RunDirError
from mt.plumbing.files import file_sha256
from mt.plumbing.spelling import KEYWORD, Spelling
from mt.rescoring.rerank import Reverse, chosen_search
from mt.rescoring.score import Scored, score_lines
from mt.run.folder import checkpoint_path, load_run, open_reverse
from mt.sentences import join_lines, join_texts, sentences_of, splitter
from mt.tokenizer import Tokenizer
from mt.translate import SearchRequest, translate_lines, translate_nbest

log = logging.getLogger(__name__)

# the searcher is built for the engine and compute type, decode.rerank's runs opened (a call may drop them)
FIXED_AT_OPEN = ("engine", "compute_type", "rerank")


@dataclass(eq=False, repr=False)  # a record of what was opened; compared and shown as an object
class Translator:
    """A run opened for translation (see the module's docstring); `from_run` opens one.

    run, checkpoint   the run directory and the checkpoint file loaded
    config            the run's config, as trained (with `overrides`)
    decode            the decoding options in force: the run's decode config and from_run's options
    tokenizer, model  the run's tokenizer (target-side text cut into the pieces every model writes)
                      and torch model (scoring, attention and alignments use it)
    searcher          what translation searches with: `model`, an Ensemble with it, or a Ct2Model
    reverse           decode.rerank's runs, opened (mt.rescoring.rerank), which score candidates the other way
    """

    run: Path
    checkpoint: Path
    config: RunConfig
    decode: DecodeConfig
    tokenizer: Tokenizer
    model: Seq2Seq
    searcher: Seq2Seq | Ensemble | Ct2Model
    device: torch.device
    ensemble: list[str]
    reverse: Reverse = field(default_factory=list)
    spelling: Spelling = KEYWORD
    # held by every call; a caller may hold it across several
    lock: threading.RLock = field(default_factory=threading.RLock)

    @classmethod
    def from_run(
        cls,
        run: str | Path,
        checkpoint: str | Path = "best",
        engine: str | None = None,
        device: str | torch.device = "auto",
        ensemble: list[str | Path] | tuple[str | Path, ...] = (),
        *,
        overrides: list[str] | tuple[str, ...] = (),
        whole_files: bool = True,
        spelling: Spelling = KEYWORD,
        **options: Any,
    ) -> Translator:
        """Open `run` at `checkpoint` (best, last, averaged or a file: `mt.run.folder.checkpoint_path`).

        engine: torch or ctranslate2 (the run's `mt export`); None: the run's decode.engine (torch
        unless its config says otherwise). device: auto, cpu or cuda. ensemble: other runs whose same
        checkpoint decodes with this one (one tokenizer; torch). overrides: `key.path=value` changes
        of the run's config (data.dir=...). whole_files: CTranslate2's threads for translating files
        (False: for a server's one batch at a time). spelling: how errors name an option (the CLI
        passes its flags'). options: DecodeConfig fields (None: the run's).
        """
        run = Path(run)  # a str or Path; anything else is Path's TypeError
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint: expected str or Path, got {described(checkpoint)}")
        ensemble = as_lines("ensemble", ensemble, (str, os.PathLike))
        overrides = as_lines("overrides", overrides)
        if engine == "torch" and options.get("compute_type") is None:  # a run's int8 is CTranslate2's
            options["compute_type"] = "default"
        path = checkpoint_path(run, checkpoint)  # once: "best" may warn that it falls back to last.pt
        config, tokenizer, model = load_run(run, str(path), overrides)
        decode = decoding(config.decode, {"engine": engine, **options}, spelling)
        say_left_out(config.decode, decode, options, spelling)
        device = device_of(device)
        model = model.to(device)
        name = spelling.name("ensemble")
        if ensemble and decode.engine != "torch":
            raise ConfigError(
                f"{name} decodes with the torch engine: {spelling.fix('engine', 'torch')}", "engine"
            )
        searcher = ensemble_of(run, ensemble, checkpoint, tokenizer, model, name)
        models = searcher.models if isinstance(searcher, Ensemble) else [model]
        tokenizer = tokenizer.writing(written_pieces(models))  # prefixes: pieces every model writes
        searcher = engine_for(run, decode, tokenizer, searcher, device, whole_files)
        reverse = open_reverse(decode.rerank, config, device) if decode.rerank else []
        return cls(run, path, config, decode, tokenizer, model, searcher, device, ensemble, reverse, spelling)

    def options(self, **options: Any) -> DecodeConfig:
        """The decoding options in force with `options` changed (None: keep), checked."""
        for key in FIXED_AT_OPEN:
            value = options.get(key)
            if value not in (None, getattr(self.decode, key)) and (key, value) != ("rerank", ""):
                raise ConfigError(
                    f"{self.spelling.given(key, value)}: the engine is chosen when the run is opened; "
                    f"open it again and {self.spelling.fix(key, value)}",
                    key,
                )
        return decoding(self.decode, options, self.spelling)

    def translate(self, lines: list[str], prefixes: list[str] | None = None, **options: Any) -> list[str]:
        """The 1-best translation of each line, one string per line in input order ("" for ""): lines
        are sorted by length into token-budget batches, a line longer than the model takes is
        translated in parts. `prefixes`: one per line ("" for none), which its translation starts with.
        split_sentences: each sentence of a line translated on its own (a prefix starts the first's),
        the translations joined with a space."""
        decode = self.options(**options)
        lines, prefixes = self._lines_and_prefixes(lines, prefixes)
        with self.lock:
            return self._by_sentence(False, lines, prefixes, decode)

    def nbest(
        self, lines: list[str], prefixes: list[str] | None = None, **options: Any
    ) -> list[list[tuple[str, float]]]:
        """Up to n_best (translation, score) pairs per line, best first (sampling: n_best draws, in the
        order drawn); `translate`'s batching and prefixes. split_sentences (n_best 1): the joined
        translation, scored with the sum of its sentences' scores."""
        decode = self.options(**options)
        lines, prefixes = self._lines_and_prefixes(lines, prefixes)
        with self.lock:
            return self._by_sentence(True, lines, prefixes, decode)

    def _lines_and_prefixes(self, lines: Any, prefixes: Any) -> tuple[list[str], list[str] | None]:
        """translate's and nbest's arguments checked (`as_lines`), one prefix per line ("" for none):
        the tokenizer cuts each into pieces that every model writes (`Tokenizer.writing`)."""
        lines = as_lines("lines", lines)
        prefixes = None if prefixes is None else as_lines("prefixes", prefixes)
        one_per_line("prefixes", prefixes, lines, ' ("" for none)')
        return lines, prefixes

    def _by_sentence(self, nbest: bool, lines: list[str], prefixes: list[str] | None, decode: DecodeConfig):
        """Each line's translation (`nbest`: its n-best) searched over the lines, or with
        decode.split_sentences over their sentences, joined; with decode.mbr or decode.rerank a line's
        translation is chosen among its candidates (mt.rescoring.rerank)."""
        search, join = (translate_nbest, join_best) if nbest else (translate_lines, join_texts)
        if decode.mbr or decode.rerank:
            search = chosen_search(nbest, self.reverse, self.config.bleu_tokenize)
        if not decode.split_sentences:
            return search(SearchRequest(self.searcher, self.tokenizer, lines, self.max_len, prefixes), decode)
        split = splitter(self.spelling.name("split_sentences"))
        sentences, counts = sentences_of(lines, self.config.data.src_lang, split)
        if prefixes is not None:  # a line's prefix starts its first sentence's translation
            prefixes = [p for prefix, n in zip(prefixes, counts) for p in [prefix] + [""] * (n - 1)]
        found = search(
            SearchRequest(self.searcher, self.tokenizer, sentences, self.max_len, prefixes), decode
        )
        return join_lines(found, counts, join)

    def alignable(self, **options: Any) -> None:
        """Refuses, before any translating, word alignments of lines split into sentences."""
        if self.options(**options).split_sentences:
            split = self.spelling.name("split_sentences")
            raise ConfigError(
                f"alignments: {split} joins the translations of a line's sentences, which are aligned "
                f"one by one; ask for alignments without {split}",
                "split_sentences",
            )

    def score(self, sources: list[str], references: list[str], **options: Any) -> list[Scored]:
        """What `mt score` prints: each reference's teacher-forced log-probability given its source, per
        piece and eos, their sum, and the GNMT score (length_penalty) that n-best lists rank by."""
        decode = self.options(**options)
        sources, references = as_lines("sources", sources), as_lines("references", references)
        one_per_line("references", references, sources)
        with self.lock:
            return score_lines(self.model, self.tokenizer, sources, references, decode, self.device)

    def align(self, lines: list[str], translations: list[str], **options: Any) -> list[str]:
        """Each line's word alignment to its translation (any engine's), Pharaoh `i-j` pairs read from
        the torch model's last cross-attention (not with split_sentences: `alignable`)."""
        self.alignable(**options)
        lines, translations = as_lines("lines", lines), as_lines("translations", translations)
        one_per_line("translations", translations, lines)
        with self.lock:
            return line_alignments(self.model, self.tokenizer, lines, translations)

    def attention(self, lines: list[str], **options: Any) -> list[AttentionMap]:
        """Translate the lines as one batch with the torch model and return each one's attention, of
        every kind and layer, padding included (`mt attention`, the page's /attention)."""
        decode = self.options(**options)
        lines = as_lines("lines", lines)
        if not lines:  # attention_maps takes a batch of at least one line
            return []
        with self.lock:
            return attention_maps(self.model, self.tokenizer, lines, decode, self.device)

    def export(
        self,
        quantization: str = "none",
        out: str | Path | None = None,
        format: str = "ct2",
        score: bool = False,
    ) -> Path:
        """`mt export`: the checkpoint as a CTranslate2 model directory (default RUN/ct2, which engine
        ctranslate2 reads), with a note of the checkpoint's file, its sha256 and the run's config; or
        with format "hf" a Transformers model directory (default RUN/hf, mt.hf.export), at full precision,
        its card scored by its own generate (and its length penalty matched on val) where `score`."""
        if format == "hf":
            if quantization not in ("none", "float32"):
                raise ConfigError(
                    "--quantization: Transformers' export is float32; leave it out", "quantization"
                )
            with self.lock:
                return export_run(
                    self.run, self.config, self.tokenizer, self.model, Path(out or self.run / "hf"), score
                )
        if score:
            raise ConfigError("--score: only --format hf scores its export; leave it out", "score")
        folder = Path(out) if out else self.run / "ct2"
        note = {
            "checkpoint": self.checkpoint.name,
            "checkpoint_sha256": file_sha256(self.checkpoint),
            "config": config_to_dict(self.config),
        }
        with self.lock:
            export_model(self.model, self.tokenizer, folder, quantization, note)
        return folder

    @property
    def max_len(self) -> int:
        """Source pieces a line may have before it is translated in parts: the run's data.max_len."""
        return self.config.data.max_len


def say_left_out(run: DecodeConfig, decode: DecodeConfig, options: dict, spelling: Spelling) -> None:
    """Log the MBR or reranking of the run's decoding (`mt tune`'s choice) that the options given leave
    out by implication (mt.decode_config.implied): the other chooser, another engine, or one candidate
    a line (beam 1, a sample)."""
    for key in ("mbr", "rerank"):
        if getattr(run, key) and not getattr(decode, key) and options.get(key) is None:
            other = "rerank" if key == "mbr" else "mbr"
            if options.get(other):
                why = f"{spelling.given(other, getattr(decode, other))} chooses the translation"
            elif decode.engine != "torch":
                why = f"{spelling.given('engine', decode.engine)} chooses among no candidates"
            else:
                how = spelling.given("sample", decode.sample) if decode.sample else spelling.given("beam", 1)
                why = f"{how} gives one candidate a line"
            log.warning(f"{why}: translating without the run's {spelling.given(key, getattr(run, key))}")


def join_best(found: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """A line's sentences' 1-best (translation, score) pairs as the line's: texts joined, scores summed."""
    return [(join_texts([hyps[0][0] for hyps in found]), sum(hyps[0][1] for hyps in found))]


def ensemble_of(
    run: Path,
    others: list[str],
    checkpoint: str,
    tokenizer: Tokenizer,
    model: Seq2Seq,
    name: str = "ensemble",
) -> Seq2Seq | Ensemble:
    """`model` (run's), or with `others` it and the same checkpoint of each of those runs decoding as
    one Ensemble (the torch engine: from_run refuses another). The runs must share one tokenizer (one
    spm.model: tokenizer.from_run), else a one-line refusal naming the option `name`."""
    if not others:
        return model
    models = [model]
    for other in others:
        _, theirs, other_model = load_run(other, checkpoint)
        if theirs.sha256 != tokenizer.sha256:
            raise RunDirError(
                f"{name} {other}: its spm.model is not {run}'s; the runs of an ensemble share one "
                f"tokenizer (train them with tokenizer.from_run: {run})"
            )
        models.append(other_model)
    return Ensemble(models)
