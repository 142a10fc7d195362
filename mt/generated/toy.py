"""A small, deterministic German-English-Chinese corpus generated from our own word lists and grammar.

It is learnable but not trivial: gender/case/number agreement of articles and adjectives, verb-second
word order with fronted adverbs, verb-final subordinate clauses, the perfect's verb bracket, negation
with English do-support, dative plurals, "im" contraction and English a/an. The Chinese side is
written without spaces, with measure words (一只狗, 这本书), the place phrase before the verb
(在桌子下面睡觉), 了 for the perfect and 不/没有 for negation. Used by `configs/toy.yaml`,
`configs/toy-zh.yaml` and the tests; test and val sentences never occur in train.
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

# Chinese, by the English word: nouns with their measure word; verbs by their English plural form;
# phrases around a noun phrase (在 ... 下面) or a clause (当 ... 的时候)
ZH_NOUNS = {
    "dog": ("狗", "只"), "man": ("男人", "个"), "bird": ("鸟", "只"), "teacher": ("老师", "位"),
    "cook": ("厨师", "位"), "ball": ("球", "个"), "table": ("桌子", "张"), "apple": ("苹果", "个"),
    "garden": ("花园", "个"), "chair": ("椅子", "把"), "tree": ("树", "棵"), "car": ("汽车", "辆"),
    "letter": ("信", "封"), "friend": ("朋友", "个"), "doctor": ("医生", "位"), "son": ("儿子", "个"),
    "cat": ("猫", "只"), "woman": ("女人", "个"), "flower": ("花", "朵"), "door": ("门", "扇"),
    "lamp": ("灯", "盏"), "bag": ("包", "个"), "street": ("街", "条"), "school": ("学校", "所"),
    "mouse": ("老鼠", "只"), "cow": ("牛", "头"), "sister": ("姐姐", "个"), "newspaper": ("报纸", "份"),
    "bridge": ("桥", "座"), "orange": ("橙子", "个"), "child": ("孩子", "个"), "girl": ("女孩", "个"),
    "horse": ("马", "匹"), "book": ("书", "本"), "house": ("房子", "座"), "boat": ("船", "条"),
    "window": ("窗户", "扇"), "picture": ("图画", "幅"), "song": ("歌", "首"), "pig": ("猪", "头"),
    "bicycle": ("自行车", "辆"), "egg": ("鸡蛋", "个"),
}  # fmt: skip
ZH_ADJECTIVES = {
    "big": "大", "small": "小", "old": "老", "young": "年轻", "red": "红", "blue": "蓝", "green": "绿",
    "black": "黑", "white": "白", "fast": "快", "slow": "慢", "tired": "累", "happy": "快乐", "new": "新",
    "hungry": "饿", "loud": "吵闹", "quiet": "安静", "beautiful": "美丽", "brown": "棕色", "yellow": "黄",
    "poor": "穷", "rich": "富有", "empty": "空", "cheap": "便宜",
}  # fmt: skip
ZH_VERBS = {
    "see": "看见", "love": "爱", "find": "找到", "buy": "买", "carry": "搬", "paint": "画",
    "hear": "听见", "visit": "拜访", "need": "需要", "wash": "洗", "catch": "抓住", "call": "叫",
    "draw": "描绘", "feed": "喂", "look for": "寻找", "sleep": "睡觉", "run": "跑", "play": "玩",
    "laugh": "笑", "wait": "等", "sing": "唱歌", "work": "工作", "dance": "跳舞", "come": "来",
}  # fmt: skip
ZH_PREPOSITIONS = {
    "with": ("和", "一起"), "next to": ("在", "旁边"), "under": ("在", "下面"), "behind": ("在", "后面"),
    "in": ("在", "里"), "on": ("在", "上"), "in front of": ("在", "前面"),
}  # fmt: skip
ZH_ADVERBS = {
    "today": "今天", "now": "现在", "sometimes": "有时候", "in the morning": "早上",
    "often": "经常", "always": "总是", "rarely": "很少",
}  # fmt: skip
ZH_CONJUNCTIONS = {"because": ("因为", ""), "while": ("当", "的时候"), "although": ("虽然", "")}

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


def _noun_phrase(rng: random.Random, case: str) -> tuple[list[str], list[str], list[str], bool]:
    """(German words, English words, Chinese words, plural?) for a random noun phrase in `case`."""
    gender, de_sg, de_pl, en_sg, en_pl = rng.choice(NOUNS)
    plural = rng.random() < 0.3
    definite = plural or rng.random() < 0.6
    g = "p" if plural else gender
    noun_de = de_pl if plural else de_sg
    if plural and case == "dat" and noun_de[-1] not in "ns":
        noun_de += "n"
    de = [DEF[case][g] if definite else INDEF[case][g]]
    en: list[str] = []
    noun_zh, measure = ZH_NOUNS[en_sg]
    zh = ["这些"] if plural else ["这" if definite else "一", measure]
    if rng.random() < 0.4:
        adj_de, adj_en = rng.choice(ADJECTIVES)
        de.append(adj_de + _adj_ending(definite, case, g))
        en.append(adj_en)
        zh += [ZH_ADJECTIVES[adj_en], "的"]
    de.append(noun_de)
    en.append(en_pl if plural else en_sg)
    article = "the" if definite else ("an" if en[0][0] in "aeiou" else "a")
    return de, [article] + en, zh + [noun_zh], plural


def _prep_phrase(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    prep_de, prep_en = rng.choice(PREPOSITIONS)
    np_de, np_en, np_zh, _ = _noun_phrase(rng, "dat")
    before, after = ZH_PREPOSITIONS[prep_en]
    zh = [before] + np_zh + [after]
    if prep_de == "in" and np_de[0] == "dem":
        return ["im"] + np_de[1:], [prep_en] + np_en, zh
    return [prep_de] + np_de, [prep_en] + np_en, zh


def _english_verb(verb: tuple, plural: bool, perfect: bool, negated: bool, adverb: str | None) -> list[str]:
    en_sg, en_pl, en_part = verb[4:]
    adv = [adverb] if adverb else []
    if perfect:
        return ["have" if plural else "has"] + adv + (["not"] if negated else []) + [en_part]
    if negated:
        return ["do" if plural else "does"] + adv + ["not", en_pl]
    return adv + [en_pl if plural else en_sg]


def _chinese_verb(verb: tuple, perfect: bool, negated: bool) -> list[str]:
    """不 or 没有 before the verb for negation, 了 after it for the perfect (没有 has none)."""
    zh = ZH_VERBS[verb[5]]
    if negated:
        return ["没有" if perfect else "不", zh]
    return [zh, "了"] if perfect else [zh]


def _clause(rng: random.Random, subordinate: bool) -> dict[str, list[str]]:
    """One clause's words in each language; German word order depends on `subordinate`."""
    subj_de, subj_en, subj_zh, plural = _noun_phrase(rng, "nom")
    transitive = rng.random() < 0.65
    verb = rng.choice(TRANSITIVE if transitive else INTRANSITIVE)
    perfect, negated = rng.random() < 0.3, rng.random() < 0.15
    obj_de, obj_en, obj_zh = _noun_phrase(rng, "acc")[:3] if transitive else ([], [], [])
    pp_de, pp_en, pp_zh = _prep_phrase(rng) if not negated and rng.random() < 0.35 else ([], [], [])
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
    adverbs_zh = [ZH_ADVERBS[adverb[1]] for adverb in (front, mid) if adverb]
    zh_verb = _chinese_verb(verb, perfect, negated)
    zh = adverbs_zh[:1] + subj_zh if front else subj_zh + adverbs_zh
    return {"de": de, "en": en, "zh": zh + pp_zh + zh_verb + obj_zh}


def _sentence(words: list[str]) -> str:
    text = " ".join(words).replace(" ,", ",")
    return text[0].upper() + text[1:] + "."


def generate_sentences(rng: random.Random) -> dict[str, str]:
    """One sentence in German, English and Chinese (de, en, zh), translations of each other."""
    words = _clause(rng, subordinate=False)
    if rng.random() < 0.3:
        conj_de, conj_en = rng.choice(CONJUNCTIONS)
        sub = _clause(rng, subordinate=True)
        before, after = ZH_CONJUNCTIONS[conj_en]
        words["de"] += [",", conj_de] + sub["de"]
        words["en"] += [",", conj_en] + sub["en"]
        words["zh"] += ["，", before] + sub["zh"] + ([after] if after else [])
    return {"de": _sentence(words["de"]), "en": _sentence(words["en"]), "zh": "".join(words["zh"]) + "。"}


SPLIT_SIZES = {"train": 8000, "val": 400, "test": 500}


def toy_corpus(
    seed: int = 1234, languages: tuple[str, ...] = ("de", "en")
) -> dict[str, tuple[list[str], ...]]:
    """{split: (lines of each of `languages`)}, German and English by default; same seed, same corpus.
    No German line repeats, so no line of val or test is a line of train in any language."""
    rng = random.Random(seed)
    seen: set[str] = set()
    corpus = {}
    for split, size in SPLIT_SIZES.items():
        lines: tuple[list[str], ...] = tuple([] for _ in languages)
        while len(lines[0]) < size:
            sentences = generate_sentences(rng)
            if sentences["de"] not in seen:
                seen.add(sentences["de"])
                for side, lang in zip(lines, languages):
                    side.append(sentences[lang])
        corpus[split] = lines
    return corpus
