"""The docs' claims stay true by test: README.md and docs/**/*.md are read as text and checked against
the code they describe. Every `mt COMMAND --flag` in a code block or code span is a flag of that
command (mt.arguments' own parser, no subprocess); every `scripts/X.py --flag` is a flag X.py defines;
every `section.key` names a config field (mt.config's RunConfig sections, DecodeConfig); every relative
link reaches a file, and its #anchor a heading there. The guide's lists that must cover every field
(its Config section, the server's request fields, the keys a resume may change, the extras) are
checked against the code that defines them. No training, no torch model: a few seconds."""

import ast
import dataclasses
import re
from pathlib import Path
from typing import get_type_hints

import pytest

from mt.arguments import build_parser
from mt.config import RunConfig
from mt.decode_config import DecodeConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# the pages people write; the others (docs/*/report*.md, ...) are what a tool wrote at a past commit,
# records of what ran then, whose command lines and keys are not rewritten when the code moves on
WRITTEN = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs").glob("*/README.md")),
]
GUIDE = ROOT / "docs" / "guide.md"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")  # an inline code span, at most two lines
SECTIONS = {name: kind for name, kind in get_type_hints(RunConfig).items() if dataclasses.is_dataclass(kind)}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_lines(text: str) -> list[str]:
    """The shell lines of the fenced code blocks (continuations joined, comments cut) and the inline
    code spans outside them, each as one line."""
    lines = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            lines.append(re.split(r"(?:^|\s)#\s", line, maxsplit=1)[0])
    prose = FENCE.sub("", text)
    lines += [span.replace("\n", " ") for span in SPAN.findall(prose)]
    return lines


# mt NAME, .venv/bin/mt NAME, python -m mt NAME; not Python's `from mt import` nor a flag's value
MT = r"(?<!from )(?<!--models )(?:\S*/)?mt\s+(?!import\b)([a-z][\w|]*)"
SCRIPT = r"(scripts/[\w/-]+\.py)"  # python scripts/X.py, scripts/X.py, scripts/experiments/X.py
# a script that calls scripts/measure.py's decoding_flags takes DecodeConfig's flags, as `mt translate`
# does (loosely: those it skips are not told apart)
DECODING_FLAGS = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(DecodeConfig)}


def commands(line: str, head: str) -> list[tuple[str, list[str]]]:
    """(name, its --flags) of each command that `head` matches (its group: the name) in a shell line;
    a line is cut at ; && || and at $( ) and a pipe outside [...], so that a nested or piped command
    keeps its own flags."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(line):
        c = line[i]
        depth += (c == "[") - (c == "]")
        cut = 2 if line.startswith(("$(", "&&", "||"), i) else int(c in ";)`" or (c == "|" and depth <= 0))
        if cut:
            parts.append(line[start:i])
            start = i + cut
            i += cut - 1
        i += 1
    parts.append(line[start:])
    found = []
    for part in parts:
        for m in re.finditer(rf"(?:^|[\s(]){head}(.*)", part):
            found.append((m.group(1), re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m.group(2))))
    return found


def doc_commands(head: str) -> list[tuple[str, str, list[str]]]:
    """(doc file, command name, flags) for every command `head` matches in the docs' code."""
    return [
        (rel(doc), name, flags)
        for doc in WRITTEN
        for line in code_lines(doc.read_text())
        for name, flags in commands(line, head)
    ]


def test_every_flag_in_a_documented_mt_command_exists():
    """(a) `mt NAME --flag`: NAME is a command and --flag one of its options (README and docs/)."""
    parser = build_parser()
    options = {
        name: {o for action in p._actions for o in action.option_strings}
        for name, p in parser.commands.items()
    }
    wrong, checked = [], 0
    for doc, names, flags in doc_commands(MT):
        for name in names.split("|"):
            if name not in options:
                wrong.append(f"{doc}: mt {name}: no such command")
                continue
            checked += 1
            wrong += [f"{doc}: mt {name} {flag}: no such flag" for flag in flags if flag not in options[name]]
    assert checked > 50, f"only {checked} mt commands found in the docs: the parser of code is broken"
    assert not wrong, "\n".join(wrong)


def test_every_documented_make_target_and_variable_exists_and_readme_names_every_target():
    """(a) `make TARGET [VAR=...]`: TARGET is one of the Makefile's targets and VAR one it reads; and
    README's command blocks name every target a user runs (issue 80: `make bit` was missing)."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split())
    variables = set(re.findall(r"^([A-Z_]+) \??[:?]?=", makefile, re.M))
    wrong, checked = [], 0
    for doc in WRITTEN:
        for line in code_lines(doc.read_text()):
            for m in re.finditer(r"(?:^|[\s(])make ([a-z][\w|-]*)((?: \[?[A-Z_]+=\S*)*)", line):
                for name in m.group(1).split("|"):
                    checked += 1
                    wrong += [] if name in targets else [f"{rel(doc)}: make {name}: no such target"]
                for var in re.findall(r"([A-Z_]+)=", m.group(2)):
                    wrong += [] if var in variables else [f"{rel(doc)}: make {name} {var}=: not read"]
    assert checked > 10 and not wrong, "\n".join(wrong)
    blocks = " ".join(FENCE.findall((ROOT / "README.md").read_text()))  # its command blocks, not prose
    named = {
        name
        for group in re.findall(r"make ([a-z][\w-]*(?: \| [a-z][\w-]*)*)", blocks)
        for name in group.split(" | ")
    }
    assert targets - {"install", "clean"} <= named, sorted(targets - {"install", "clean"} - named)


def argument_flags(source: str) -> set[str]:
    """The --flags a script's parser defines: the string arguments of its `add_argument` calls."""
    return {
        arg.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
        for arg in node.args
        if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")
    }


def test_every_flag_in_a_documented_script_command_exists():
    """(a) `scripts/X.py --flag`: X.py exists and its parser defines --flag (an `add_argument` call)."""
    wrong, checked = [], 0
    for doc, script, flags in doc_commands(SCRIPT):
        path = ROOT / script
        if not path.is_file():
            wrong.append(f"{doc}: {script}: no such script")
            continue
        checked += 1
        source = path.read_text()
        defined = argument_flags(source) | (DECODING_FLAGS if "decoding_flags(" in source else set())
        wrong += [f"{doc}: {script} {f}: no such flag" for f in flags if f not in defined]
    assert checked > 10, f"only {checked} script commands found in the docs"
    assert not wrong, "\n".join(wrong)


# section.key in code; not a file name (train.log, model.py), a path (mt/model.py) nor a call (train.train)
KEY = re.compile(rf"(?<![\w/.-])({'|'.join(SECTIONS)})((?:\.[a-z_][a-z0-9_]*)+)(?![\w(])")
FILE_SUFFIXES = set("py yaml yml pt json jsonl md txt log png de en gz lock tsv".split())


def config_key_exists(section: str, keys: list[str]) -> bool:
    node = SECTIONS[section]
    for key in keys:
        fields = get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        if key not in fields:
            return False
        node = fields[key]
    return True


def test_every_documented_config_key_exists():
    """(b) Every `section.key` (data, tokenizer, model, train, decode; nested: data.clean.apply) in the
    docs' code is a field of RunConfig's section (DecodeConfig for decode)."""
    wrong, checked = [], 0
    for doc in WRITTEN:
        for line in code_lines(doc.read_text()):
            for section, path in KEY.findall(line):
                keys = path.split(".")[1:]
                if keys[-1] in FILE_SUFFIXES:
                    continue
                checked += 1
                if not config_key_exists(section, keys):
                    wrong.append(f"{rel(doc)}: {section}{path}: no such config key")
    assert checked > 100, f"only {checked} config keys found in the docs"
    assert not wrong, "\n".join(sorted(set(wrong)))


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated heading's second is slug-1, and so on."""
    names, count = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", doc.read_text()), re.M):
        base = slug(heading)
        names.add(f"{base}-{count[base]}" if base in count else base)
        count[base] = count.get(base, 0) + 1
    return names


def test_every_relative_link_reaches_its_file_and_anchor():
    """(c) [text](target) outside code: the file (or folder) exists; #anchor is a heading of it."""
    wrong, checked = [], 0
    for doc in DOCS:
        prose = FENCE.sub("", doc.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", SPAN.sub("", prose)):
            if re.match(r"[a-z]+:", target):
                continue
            checked += 1
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                wrong.append(f"{rel(doc)}: ({target}): {file} does not exist")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                wrong.append(f"{rel(doc)}: ({target}): no heading #{anchor} in {rel(path)}")
    assert checked > 40, f"only {checked} links found in the docs"
    assert not wrong, "\n".join(wrong)


def guide_section(title: str) -> str:
    text = GUIDE.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/guide.md has no section '## {title}'"
    return match.group(1)


def spans(text: str) -> set[str]:
    """The words of the text's code spans."""
    return {word for span in SPAN.findall(text) for word in re.findall(r"[a-z_][a-z0-9_]*", span)}


def test_the_guides_config_section_names_every_field():
    """The guide's Config section names every field of every section (and of data.clean), so that a
    new field is documented where users look for it (a list of fields is checked, not trusted)."""
    named = spans(guide_section("Config"))
    sections = [*SECTIONS.items(), ("data.clean", get_type_hints(SECTIONS["data"])["clean"])]
    missing = [f"{s}.{f.name}" for s, cls in sections for f in dataclasses.fields(cls) if f.name not in named]
    assert not missing, f"docs/guide.md's Config section does not name: {', '.join(missing)}"


def test_the_guides_request_fields_are_the_servers():
    """The guide's `POST /translate` fields, and those docs/serve's refusal lists, are exactly the
    request model's (mt.serving.app)."""
    pytest.importorskip("fastapi")
    from mt.serving.requests import TranslateRequest

    bullet = re.search(r"^- `POST /translate` `\{(.*?)\}`", guide_section("Serving: `mt serve`"), re.S | re.M)
    assert bullet, "docs/guide.md's serving section has no `POST /translate` `{...}` bullet"
    assert re.findall(r'"(\w+)"', bullet.group(1)) == list(TranslateRequest.model_fields)
    refusal = re.search(
        r'unknown option; the options are ([\w, ]+)"', (ROOT / "docs/serve/README.md").read_text()
    )
    assert refusal, "docs/serve/README.md no longer shows the unknown-option refusal with every option"
    assert refusal.group(1).split(", ") == list(TranslateRequest.model_fields)


def test_the_guides_resumable_keys_are_the_checkpoints():
    """The keys the guide says a resume may change are mt.run.checkpoint's RESUMABLE_KEYS."""
    from mt.run.checkpoint import RESUMABLE_KEYS

    text = guide_section("Stopping and resuming")
    listed = re.search(r"\(`train\.([a-z_\s]+)`, `decode\.\*`((?:, `[a-z_]+\.[a-z_]+`)*)", text)
    assert listed, "docs/guide.md's resume section has no (`train.KEY KEY ...`, `decode.*`, ...) list"
    keys = {f"train.{key}" for key in listed.group(1).split()} | {"decode"}
    keys |= set(re.findall(r"`([a-z_]+\.[a-z_]+)`", listed.group(2)))
    assert keys == set(RESUMABLE_KEYS) - {"name", "base"}


def test_the_guide_and_the_makefile_install_every_extra():
    """The extras that `make` installs, and the guide says it installs, are pyproject.toml's."""
    table = re.search(
        r"^\[project\.optional-dependencies\]\n(.*?)^\[", (ROOT / "pyproject.toml").read_text(), re.S | re.M
    )
    extras = re.findall(r"^(\w+) = \[", table.group(1), re.M)  # no tomllib: Python 3.10 is supported
    assert len(extras) > 3, "pyproject.toml's optional dependencies were not found"
    installed = re.search(r"pip install --quiet -e '\.\[([\w,]+)\]'", (ROOT / "Makefile").read_text())
    assert installed and set(installed.group(1).split(",")) == set(extras)
    said = re.search(
        r"installs `torch==[\d.]+` and this package \(with its (.*?) extras\b", GUIDE.read_text(), re.S
    )
    assert said, "docs/guide.md no longer says which extras `make` installs"
    assert set(re.findall(r"`(\w+)`", said.group(1))) == set(extras)


def test_the_guides_contents_list_its_sections_in_order():
    """The guide's numbered Contents are its `## ` sections, in the order they come, each linked."""
    text = GUIDE.read_text()
    listed = re.findall(r"^\d+\. \[(.+)\]\(#([\w-]+)\)$", guide_section("Contents"), re.M)
    headings = [h for h in re.findall(r"^## (.+)$", FENCE.sub("", text), re.M) if h != "Contents"]
    assert [title for title, _ in listed] == headings
    assert [anchor for _, anchor in listed] == [slug(h) for h in headings]


def test_the_apis_lists_of_decoding_options_are_decode_configs_fields():
    """docs/api.md lists every decoding option twice: in from_run's `**decoding` row and in the table of
    keywords with mt's defaults. Both name exactly DecodeConfig's fields, in its order, the table each
    with its default."""
    text = (ROOT / "docs" / "api.md").read_text()
    fields = [f.name for f in dataclasses.fields(DecodeConfig)]
    row = next(line for line in text.splitlines() if line.startswith("| `**decoding` |"))
    named = re.search(r"\((`\w+`(?:, `\w+`)*)\)", row).group(1)
    assert re.findall(r"`(\w+)`", named) == [f for f in fields if f != "engine"]  # from_run's own argument
    table = text.split("| keyword | mt's default | what |", 1)[1].split("\n\n", 1)[0]
    listed = {}
    for line in table.strip().splitlines()[1:]:
        names, defaults = (cell.strip() for cell in line.split("|")[1:3])
        for name, default in zip(re.findall(r"`(\w+)`", names), defaults.split(", ")):
            listed[name] = default.strip('`"')
    defaults = {f.name: str(f.default) for f in dataclasses.fields(DecodeConfig)}
    assert list(listed) == fields and listed == defaults


def test_scripts_readme_has_a_row_for_every_script():
    """scripts/README.md asks for a row per script (or a line saying a file is not one): a new script
    that forgets its row fails here, not in a reader's search."""
    text = (ROOT / "scripts/README.md").read_text()
    rows = set(re.findall(r"^\| `([\w/.]+)` \|", text, flags=re.M))
    helpers = set(re.findall(r"^`([\w.]+)` is not a script", text, flags=re.M))
    scripts = {
        p.relative_to(ROOT / "scripts").as_posix()
        for p in [*(ROOT / "scripts").glob("*.py"), *(ROOT / "scripts/experiments").glob("*.[ps][yh]")]
    }
    assert scripts - helpers == rows


def test_no_file_cites_a_guide_the_repository_does_not_hold():
    """The project's guide to style lives outside the repository, so nothing here cites it: a reader
    could not follow the citation. The guide (docs/guide.md) and README say the rules the tests hold."""
    cited = re.compile("style" + r"\s+guide|STYLE\.md|STYLE \d", re.IGNORECASE)
    files = [
        *DOCS,
        *(ROOT / "mt").rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "scripts").rglob("*.py"),
    ]
    assert [str(p.relative_to(ROOT)) for p in files if cited.search(p.read_text(encoding="utf-8"))] == []


def test_readme_stays_short():
    """README is the front page: at most 180 lines; the rest lives in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 180
