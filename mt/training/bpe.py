"""Learning the joint BPE model (mt.tokenizer's `Tokenizer`) with sentencepiece, from source and
target training lines together (mt.training.corpus samples them)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable, Iterator

import sentencepiece as spm

from mt.config import BOS, EOS, PAD, UNK
from mt.plumbing.errors import ConfigError
from mt.tokenizer import Tokenizer

# sentencepiece's training threads are written into spm.model (its trainer_spec), though not into its
# pieces (the same on Multi30k at 1, 2 and 4 threads): one fixed number, whatever the machine's cores,
# keeps the same corpus's spm.model the same bytes and sha256 everywhere (tokenizer.from_run,
# train.init_from and checkpoints compare it)
SPM_THREADS = 2


def train_tokenizer(
    texts: Iterable[str] | Path,
    vocab_size: int,
    character_coverage: float = 1.0,
    normalization: str = "nmt_nfkc",
) -> Tokenizer:
    """Train a BPE model on `texts` (source and target lines together): lines in memory, or a file of
    one sentence a line that sentencepiece reads itself (all of it: sample before, see `corpus`).
    `normalization`: sentencepiece's rule, nmt_nfkc or identity (mt.plumbing.script.tokenizer_settings)."""
    # a file is streamed to sentencepiece rather than named: the model would record its (temporary)
    # path, and two trainings on the same lines would differ in their bytes and sha256
    lines = _file_lines(texts) if isinstance(texts, Path) else iter(texts)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines,
            input_sentence_size=0 if isinstance(texts, Path) else 2_000_000,
            model_writer=proto,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            normalization_rule_name=normalization,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            shuffle_input_sentence=True,
            num_threads=SPM_THREADS,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise ConfigError(_vocab_size_problem(str(e), vocab_size), "tokenizer.vocab_size") from None
    return Tokenizer(proto.getvalue())


def _vocab_size_problem(error: str, vocab_size: int) -> str:
    """sentencepiece's refusal of a vocabulary size, in the config's terms."""
    needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", error)
    if needed:  # a rich character set: every kept character needs a piece of its own
        return (
            f"tokenizer.vocab_size: {vocab_size} is too small: this corpus's characters and the special "
            f"pieces need at least {needed.group(1)}; set it higher, or lower tokenizer.character_coverage"
        )
    limit = re.search(r"<= (\d+)", error)
    hint = f"; set it to at most {limit.group(1)}" if limit else ""
    return f"tokenizer.vocab_size: {vocab_size} is too large for this corpus{hint}"


def _file_lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n")
