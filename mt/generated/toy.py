"""A small, deterministic German->English corpus generated from our own word lists and grammar.

It is learnable but not trivial: gender/case/number agreement of articles and adjectives, verb-second
word order with fronted adverbs, verb-final subordinate clauses, the perfect's verb bracket, negation
with English do-support, dative plurals, "im" contraction and English a/an. Used by `configs/toy.yaml`
and the tests; test and val sentences never occur in train.
"""

from __future__ import annotations

import random

# gender, German singular, German plural, English singular, English plural
NOUNS = [
    ("m", "Hund", "Hunde", "dog", "dogs"),
    ("m", "Mann", "Männer", "man", "men"),
    ("m", "Vogel", "Vögel", "bird", "birds"),
    ("m", "Lehrer", "Lehrer", "teacher", "teachers"),
    ("m", "Koch", "Köche", "cook", "cooks"),
    ("m", "Ball", "Bälle", "ball", "balls"),
    ("m", "Tisch", "Tische", "table", "tables"),
    ("m", "Apfel", "Äpfel", "apple", "apples"),
    ("m", "Garten", "Gärten", "garden", "gardens"),
    ("m", "Stuhl", "Stühle", "chair", "chairs"),
    ("m", "Baum", "Bäume", "tree", "trees"),
    ("m", "Wagen", "Wagen", "car", "cars"),
    ("m", "Brief", "Briefe", "letter", "letters"),
    ("m", "Freund", "Freunde", "friend", "friends"),
    ("m", "Arzt", "Ärzte", "doctor", "doctors"),
    ("m", "Sohn", "Söhne", "son", "sons"),
    ("f", "Katze", "Katzen", "cat", "cats"),
    ("f", "Frau", "Frauen", "woman", "women"),
    ("f", "Blume", "Blumen", "flower", "flowers"),
    ("f", "Tür", "Türen", "door", "doors"),
    ("f", "Lampe", "Lampen", "lamp", "lamps"),
    ("f", "Tasche", "Taschen", "bag", "bags"),
    ("f", "Straße", "Straßen", "street", "streets"),
    ("f", "Schule", "Schulen", "school", "schools"),
    ("f", "Maus", "Mäuse", "mouse", "mice"),
    ("f", "Kuh", "Kühe", "cow", "cows"),
    ("f", "Schwester", "Schwestern", "sister", "sisters"),
    ("f", "Zeitung", "Zeitungen", "newspaper", "newspapers"),
    ("f", "Brücke", "Brücken", "bridge", "bridges"),
    ("f", "Orange", "Orangen", "orange", "oranges"),
    ("n", "Kind", "Kinder", "child", "children"),
    ("n", "Mädchen", "Mädchen", "girl", "girls"),
    ("n", "Pferd", "Pferde", "horse", "horses"),
    ("n", "Buch", "Bücher", "book", "books"),
    ("n", "Haus", "Häuser", "house", "houses"),
    ("n", "Boot", "Boote", "boat", "boats"),
    ("n", "Fenster", "Fenster", "window", "windows"),
    ("n", "Bild", "Bilder", "picture", "pictures"),
    ("n", "Lied", "Lieder", "song", "songs"),
    ("n", "Schwein", "Schweine", "pig", "pigs"),
    ("n", "Fahrrad", "Fahrräder", "bicycle", "bicycles"),
    ("n", "Ei", "Eier", "egg", "eggs"),
]
ADJECTIVES = [
    ("groß", "big"),
    ("klein", "small"),
    ("alt", "old"),
    ("jung", "young"),
    ("rot", "red"),
    ("blau", "blue"),
    ("grün", "green"),
    ("schwarz", "black"),
    ("weiß", "white"),
    ("schnell", "fast"),
    ("langsam", "slow"),
    ("müde", "tired"),
    ("glücklich", "happy"),
    ("neu", "new"),
    ("hungrig", "hungry"),
    ("laut", "loud"),
    ("ruhig", "quiet"),
    ("schön", "beautiful"),
    ("braun", "brown"),
    ("gelb", "yellow"),
    ("arm", "poor"),
    ("reich", "rich"),
    ("leer", "empty"),
    ("billig", "cheap"),
]
# German 3sg, 3pl, participle, perfect auxiliary (haben|sein); English 3sg, plural, participle
TRANSITIVE = [
    ("sieht", "sehen", "gesehen", "h", "sees", "see", "seen"),
    ("liebt", "lieben", "geliebt", "h", "loves", "love", "loved"),
    ("findet", "finden", "gefunden", "h", "finds", "find", "found"),
    ("kauft", "kaufen", "gekauft", "h", "buys", "buy", "bought"),
    ("trägt", "tragen", "getragen", "h", "carries", "carry", "carried"),
    ("malt", "malen", "gemalt", "h", "paints", "paint", "painted"),
    ("hört", "hören", "gehört", "h", "hears", "hear", "heard"),
    ("besucht", "besuchen", "besucht", "h", "visits", "visit", "visited"),
    ("braucht", "brauchen", "gebraucht", "h", "needs", "need", "needed"),
    ("wäscht", "waschen", "gewaschen", "h", "washes", "wash", "washed"),
    ("fängt", "fangen", "gefangen", "h", "catches", "catch", "caught"),
    ("ruft", "rufen", "gerufen", "h", "calls", "call", "called"),
    ("zeichnet", "zeichnen", "gezeichnet", "h", "draws", "draw", "drawn"),
    ("füttert", "füttern", "gefüttert", "h", "feeds", "feed", "fed"),
    ("sucht", "suchen", "gesucht", "h", "looks for", "look for", "looked for"),
]
INTRANSITIVE = [
    ("schläft", "schlafen", "geschlafen", "h", "sleeps", "sleep", "slept"),
    ("läuft", "laufen", "gelaufen", "s", "runs", "run", "run"),
    ("spielt", "spielen", "gespielt", "h", "plays", "play", "played"),
    ("lacht", "lachen", "gelacht", "h", "laughs", "laugh", "laughed"),
    ("wartet", "warten", "gewartet", "h", "waits", "wait", "waited"),
    ("singt", "singen", "gesungen", "h", "sings", "sing", "sung"),
    ("arbeitet", "arbeiten", "gearbeitet", "h", "works", "work", "worked"),
    ("tanzt", "tanzen", "getanzt", "h", "dances", "dance", "danced"),
    ("kommt", "kommen", "gekommen", "s", "comes", "come", "come"),
]
PREPOSITIONS = [
    ("mit", "with"),
    ("neben", "next to"),
    ("unter", "under"),
    ("hinter", "behind"),
    ("in", "in"),
    ("auf", "on"),
    ("vor", "in front of"),
]
FRONT_ADVERBS = [
    ("heute", "today"),
    ("jetzt", "now"),
    ("manchmal", "sometimes"),
    ("morgens", "in the morning"),
]
MID_ADVERBS = [("oft", "often"), ("immer", "always"), ("selten", "rarely")]
CONJUNCTIONS = [("weil", "because"), ("während", "while"), ("obwohl", "although")]

DEF = {
    "nom": {"m": "der", "f": "die", "n": "das", "p": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "p": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "p": "den"},
}
INDEF = {
    "nom": {"m": "ein", "f": "eine", "n": "ein"},
    "acc": {"m": "einen", "f": "eine", "n": "ein"},
    "dat": {"m": "einem", "f": "einer", "n": "einem"},
}
MIXED_ENDING = {
    "nom": {"m": "er", "f": "e", "n": "es"},
    "acc": {"m": "en", "f": "e", "n": "es"},
    "dat": {"m": "en", "f": "en", "n": "en"},
}


def _adj_ending(definite: bool, case: str, gender: str) -> str:
    if not definite:
        return MIXED_ENDING[case][gender]
    weak_e = case == "nom" and gender != "p" or case == "acc" and gender in "fn"
    return "e" if weak_e else "en"


def _noun_phrase(rng: random.Random, case: str) -> tuple[list[str], list[str], bool]:
    """(German words, English words, plural?) for a random noun phrase in `case`."""
    gender, de_sg, de_pl, en_sg, en_pl = rng.choice(NOUNS)
    plural = rng.random() < 0.3
    definite = plural or rng.random() < 0.6
    g = "p" if plural else gender
    noun_de = de_pl if plural else de_sg
    if plural and case == "dat" and noun_de[-1] not in "ns":
        noun_de += "n"
    de = [DEF[case][g] if definite else INDEF[case][g]]
    en: list[str] = []
    if rng.random() < 0.4:
        adj_de, adj_en = rng.choice(ADJECTIVES)
        de.append(adj_de + _adj_ending(definite, case, g))
        en.append(adj_en)
    de.append(noun_de)
    en.append(en_pl if plural else en_sg)
    article = "the" if definite else ("an" if en[0][0] in "aeiou" else "a")
    return de, [article] + en, plural


def _prep_phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    prep_de, prep_en = rng.choice(PREPOSITIONS)
    np_de, np_en, _ = _noun_phrase(rng, "dat")
    if prep_de == "in" and np_de[0] == "dem":
        return ["im"] + np_de[1:], [prep_en] + np_en
    return [prep_de] + np_de, [prep_en] + np_en


def _english_verb(verb: tuple, plural: bool, perfect: bool, negated: bool, adverb: str | None) -> list[str]:
    en_sg, en_pl, en_part = verb[4:]
    adv = [adverb] if adverb else []
    if perfect:
        return ["have" if plural else "has"] + adv + (["not"] if negated else []) + [en_part]
    if negated:
        return ["do" if plural else "does"] + adv + ["not", en_pl]
    return adv + [en_pl if plural else en_sg]


def _clause(rng: random.Random, subordinate: bool) -> tuple[list[str], list[str]]:
    """One clause as (German words, English words); German word order depends on `subordinate`."""
    subj_de, subj_en, plural = _noun_phrase(rng, "nom")
    transitive = rng.random() < 0.65
    verb = rng.choice(TRANSITIVE if transitive else INTRANSITIVE)
    perfect, negated = rng.random() < 0.3, rng.random() < 0.15
    obj_de, obj_en = _noun_phrase(rng, "acc")[:2] if transitive else ([], [])
    pp_de, pp_en = _prep_phrase(rng) if not negated and rng.random() < 0.35 else ([], [])
    front = rng.choice(FRONT_ADVERBS) if not subordinate and rng.random() < 0.2 else None
    mid = rng.choice(MID_ADVERBS) if front is None and rng.random() < 0.15 else None
    if perfect:
        aux = {"h": ("hat", "haben"), "s": ("ist", "sind")}[verb[3]][plural]
        finite, nonfinite = aux, [verb[2]]
    else:
        finite, nonfinite = verb[1] if plural else verb[0], []
    middle = ([mid[0]] if mid else []) + obj_de + pp_de + (["nicht"] if negated else [])
    if subordinate:
        de = subj_de + middle + nonfinite + [finite]
    elif front:
        de = [front[0], finite] + subj_de + middle + nonfinite
    else:
        de = subj_de + [finite] + middle + nonfinite
    en_verb = _english_verb(verb, plural, perfect, negated, mid[1] if mid else None)
    en = ([front[1]] if front else []) + subj_en + en_verb + obj_en + pp_en
    return de, en


def _sentence(words: list[str]) -> str:
    text = " ".join(words).replace(" ,", ",")
    return text[0].upper() + text[1:] + "."


def generate_pair(rng: random.Random) -> tuple[str, str]:
    de, en = _clause(rng, subordinate=False)
    if rng.random() < 0.3:
        conj_de, conj_en = rng.choice(CONJUNCTIONS)
        sub_de, sub_en = _clause(rng, subordinate=True)
        de, en = de + [",", conj_de] + sub_de, en + [",", conj_en] + sub_en
    return _sentence(de), _sentence(en)


SPLIT_SIZES = {"train": 8000, "val": 400, "test": 500}


def toy_corpus(seed: int = 1234) -> dict[str, tuple[list[str], list[str]]]:
    """{split: (German lines, English lines)}; same seed, same corpus. No German line repeats."""
    rng = random.Random(seed)
    seen: set[str] = set()
    corpus = {}
    for split, size in SPLIT_SIZES.items():
        src, tgt = [], []
        while len(src) < size:
            de, en = generate_pair(rng)
            if de not in seen:
                seen.add(de)
                src.append(de)
                tgt.append(en)
        corpus[split] = (src, tgt)
    return corpus
