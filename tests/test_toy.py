"""mt/generated/toy.py: the generated toy corpus is the same on every call, its splits are disjoint, and
`data.corpus: toy` reads either direction of it."""

import hashlib
import json

from mt.config import DataConfig
from mt.data import load_split
from mt.generated.toy import SPLIT_SIZES, toy_corpus


def test_toy_corpus_is_deterministic_and_disjoint():
    a, b = toy_corpus(), toy_corpus()
    assert a == b
    for split, size in SPLIT_SIZES.items():
        assert len(a[split][0]) == len(a[split][1]) == size
    train = set(a["train"][0])
    assert not train & set(a["test"][0]) and not train & set(a["val"][0])
    assert toy_corpus(seed=2)["train"][0][:5] != a["train"][0][:5]


def test_toy_split_by_language():
    de, en = load_split(DataConfig(corpus="toy"), "test")
    en2, de2 = load_split(DataConfig(corpus="toy", src_lang="en", tgt_lang="de"), "test")
    assert (de, en) == (de2, en2)


def test_the_chinese_side_translates_the_same_sentences_without_spaces():
    three = toy_corpus(languages=("de", "en", "zh"))
    two = {split: sides[:2] for split, sides in three.items()}
    assert two == toy_corpus() and hashlib.sha256(json.dumps(two).encode()).hexdigest() == (
        "abb097391e087a0a0ad99d096437f3b6befd562ffd5c870d4a9ee4dd8d94eeaf"  # de, en before zh was added
    )
    de, en, zh = three["train"]
    assert zh[0] == "今天这些棕色的桥在这头空的猪上叫了这些儿子。"
    assert en[0] == "Today the brown bridges have called the sons on the empty pig."
    assert not any(" " in line for line in zh) and all(line.endswith("。") for line in zh)
    train = set(zh)
    assert not train & set(three["test"][2]) and not train & set(three["val"][2])
    zh2, en2 = load_split(DataConfig(corpus="toy", src_lang="zh", tgt_lang="en"), "test")
    assert (en2, zh2) == three["test"][1:]
