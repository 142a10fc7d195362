"""One joint sentencepiece BPE model for both languages, with fixed special ids.

Ids are the same for source and target: pad 0, unk 1, bos 2, eos 3. The model is trained once on
source + target training text (mt.training.bpe) and saved in the run directory (`spm.model`); later
starts reuse it.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import random
from pathlib import Path
from typing import Iterable

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from mt.config import BOS, EOS, PAD, UNK
from mt.plumbing.errors import RunDirError
from mt.plumbing.files import write_bytes
from mt.plumbing.script import starts_word


class Tokenizer:
    """Text <-> piece ids with one shared vocabulary."""

    def __init__(self, model_proto: bytes, source: str = "the tokenizer model"):
        """`source` names the bytes' origin (a file) in the error for bytes that are not a model of mt's."""
        self.proto = model_proto
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
            # every piece read once: a damaged one (invalid UTF-8) fails here, not in the middle of a
            # translation
            self._word_starts = {
                i for i in range(self.sp.get_piece_size()) if starts_word(self.sp.id_to_piece(i))
            }
            self._merge_scores = {  # the pieces a BPE merge may make, with their priority
                self.sp.id_to_piece(i): self.sp.get_score(i)
                for i in range(self.sp.get_piece_size())
                if not (self.sp.is_control(i) or self.sp.is_unknown(i) or self.sp.is_byte(i))
            }
        except (
            RuntimeError,
            UnicodeDecodeError,
        ) as e:  # sentencepiece's "Internal: ... ParseFromArray" and the like
            reason = (str(e).splitlines() or ["?"])[0]
            raise RunDirError(
                f"{source}: damaged or not a sentencepiece model ({reason}); restore it from the run "
                f"it belongs to"
            ) from None
        if (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (PAD, UNK, BOS, EOS):
            raise RunDirError(
                f"{source}: a sentencepiece model without mt's special ids (pad 0, unk 1, bos 2, "
                f"eos 3); use the spm.model that mt trained for this run"
            )
        self._target = self.sp  # what encode_target cuts with (`writing`)

    @property
    def sha256(self) -> str:
        """Of the model's bytes: checkpoints record it, so a replaced or damaged spm.model is caught."""
        return hashlib.sha256(self.proto).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Lines -> piece ids, without bos/eos (the batch adds them)."""
        return self.sp.encode(lines)

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target-side lines (references to score or validate on, prefixes to continue) -> piece ids
        the model writes (`writing`): as `encode` where every piece of a line is one of them, else
        the pieces it lacks cut back into the smaller pieces they were merged from."""
        return self._target.encode(lines)

    def writing(self, pieces: Iterable[int] | None) -> Tokenizer:
        """This tokenizer, with `encode_target` cutting text into `pieces` only (None: every piece):
        the pieces a model's output layer writes (model.output_pieces: target). sentencepiece's BPE
        merges as before and splits a merged piece outside `pieces` back into the two it was made
        of (its restricted vocabulary, as JoeyNMT and Marian use for a target vocabulary), so
        "Bananas" is '▁B an anas' where '▁Ban' is German's alone. A character no target holds has no
        smaller pieces: it is `<unk>`. The training targets, where `pieces` come from, are cut as
        `encode` cuts them."""
        written = copy.copy(self)
        written._target = (
            self.sp if pieces is None else spm.SentencePieceProcessor(model_proto=only(self.proto, pieces))
        )
        return written

    def encode_sampled(self, lines: list[str], dropout: float, seed: int) -> list[list[int]]:
        """BPE-dropout (training only): as `encode`, but each merge is skipped with probability
        `dropout`, drawn from `seed` by Python's own generator, so a seed gives the same pieces in
        every process. sentencepiece's sampling cannot: 0.2.3 draws from absl's generator, salted
        afresh in each process, so a view re-sampled for a resumed run would differ."""
        rng = random.Random(seed)
        return [self._sample_ids(line, dropout, rng) for line in lines]

    def _sample_ids(self, line: str, dropout: float, rng: random.Random) -> list[int]:
        """sentencepiece's BPE loop (bpe_model.cc), one line: from single characters, merge the best
        (highest score, then leftmost) adjacent pair that is a piece; a skipped pair stays apart until
        a neighbour changes. Equals `encode` at dropout 0 (tests/test_tokenizer.py)."""
        symbols = list(self.sp.normalize(line))  # '' once merged into its left neighbour
        after = [*range(1, len(symbols)), -1]
        before = list(range(-1, len(symbols) - 1))
        agenda: list[tuple[float, int, int, int]] = []  # (-score, left, right, merged length)

        def consider(left: int, right: int) -> None:
            if (
                left >= 0
                and right >= 0
                and (score := self._merge_scores.get(symbols[left] + symbols[right])) is not None
            ):
                heapq.heappush(agenda, (-score, left, right, len(symbols[left]) + len(symbols[right])))

        for i in range(len(symbols) - 1):
            consider(i, i + 1)
        while agenda:
            _, left, right, length = heapq.heappop(agenda)
            if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != length:
                continue  # stale: one side has merged since
            if rng.random() < dropout:
                continue
            symbols[left], symbols[right] = symbols[left] + symbols[right], ""
            after[left] = after[right]
            if after[right] >= 0:
                before[after[right]] = left
            consider(before[left], left)
            consider(left, after[left])
        ids = [self.sp.piece_to_id(piece) for piece in symbols if piece]
        return [i for n, i in enumerate(ids) if not (i == UNK and n and ids[n - 1] == UNK)]  # a run: one unk

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.decode(ids) if ids else []  # sentencepiece gives "" for no lines

    def starts_word(self, piece_id: int) -> bool:
        """True for pieces that begin a word: sentencepiece's U+2581 prefix, or a first character of a
        script without spaces (mt.plumbing.script), where a piece is a word of its own."""
        return piece_id in self._word_starts

    def pieces(self, line: str) -> list[str]:
        return self.sp.encode(line, out_type=str)

    def save(self, path: str | Path) -> None:
        write_bytes(path, self.proto)


def only(proto: bytes, pieces: Iterable[int]) -> bytes:
    """A sentencepiece model (`proto`) whose ordinary pieces outside `pieces` are marked unused, which
    its encoder then never gives (the Python binding of sentencepiece 0.2 lacks SetVocabulary, which
    does the same to a loaded model)."""
    model = sentencepiece_model_pb2.ModelProto.FromString(proto)
    keep, normal = set(pieces), sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    for i, piece in enumerate(model.pieces):
        if piece.type == normal and i not in keep:
            piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.UNUSED
    return model.SerializeToString()


def load_tokenizer(path: str | Path) -> Tokenizer:
    path = Path(path)
    try:
        return Tokenizer(path.read_bytes(), str(path))
    except OSError as e:
        raise RunDirError(
            f"{path}: cannot read ({e.strerror or e}); check the path and its permissions"
        ) from None
