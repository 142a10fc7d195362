"""mt/generated/toy.py: the generated toy corpus is the same on every call, its splits are disjoint, and
`data.corpus: toy` reads either direction of it."""

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
