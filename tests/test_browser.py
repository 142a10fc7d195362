"""The page at `/`, driven in headless Chromium through Selenium: type German, get the translation and
the heatmaps, pick a sentence, layer and head. Skipped where no Chromium and chromedriver are installed
(Debian: apt-get install chromium chromium-driver; .ci/run does so). Selenium Manager is never asked (it
would download a driver): both paths are given.

MT_SERVE_RUN=DIR serves that run instead of a toy one; MT_SCREENSHOT=FILE keeps the screenshot
(docs/serve/page.png was taken so, with the Multi30k run)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from mt.plumbing.metrics import HEADLINE  # noqa: E402
from mt.run.card import read_card  # noqa: E402
from mt.serving.app import create_app, server_info  # noqa: E402
from mt.serving.limits import ServeLimits  # noqa: E402
from mt.serving.worker import Worker  # noqa: E402
from mt.training.tuning import Grid, tune  # noqa: E402
from mt.translator import Translator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def executable(*candidates: str) -> str | None:
    """The first candidate that is an executable file: a path as it is, a bare name looked up on PATH."""
    return next(filter(None, map(shutil.which, candidates)), None)


CHROMIUM = executable("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
DRIVER = executable("/usr/bin/chromedriver", "chromedriver")
MISSING = " and ".join(name for name, path in (("Chromium", CHROMIUM), ("chromedriver", DRIVER)) if not path)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        bool(MISSING), reason=f"no {MISSING} (Debian: apt-get install chromium chromium-driver)"
    ),
]
LINES = ["Ein Mann fährt mit dem Fahrrad durch die Stadt .", "Zwei Hunde spielen im Schnee ."]


@pytest.fixture(scope="module")
def served_run(fluent, tmp_path_factory) -> Path:
    """MT_SERVE_RUN, or a copy of a toy run whose translations are words, tuned on val to beam 2 and
    length penalty 1.5: the page must start from those, not from values of its own."""
    if os.environ.get("MT_SERVE_RUN"):
        return Path(os.environ["MT_SERVE_RUN"])
    run = tmp_path_factory.mktemp("browser") / "run"
    shutil.copytree(fluent, run)
    tune(run, device="cpu", grid=Grid((2,), (1.5,)))
    return run


@pytest.fixture(scope="module")
def server(served_run):
    """uvicorn on a free loopback port, in a thread: its base URL."""
    import uvicorn

    translator = Translator.from_run(served_run, device="cpu")
    worker = Worker(translator, ServeLimits())
    worker.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(worker, server_info(translator, worker.limits))
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    uv.should_exit = True
    thread.join(10)


@pytest.fixture
def browser(tmp_path_factory):
    """Headless Chromium, fit to run as root on a machine whose network is closed: no sandbox, no GPU, and
    none of the background connections (updates, sync, QUIC) that would be refused; a fresh profile."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
        "--window-size=1400,1150",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def api(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def read(driver, selector: str, what: str = "textContent") -> list[str]:
    """A property (or attribute) of every element the selector matches, in one round trip."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => arguments[1] in e && "
        "typeof e[arguments[1]] === 'string' ? e[arguments[1]] : e.getAttribute(arguments[1]))",
        selector,
        what,
    )


def cells(driver, kind: str, what: str = "fill") -> list[str]:
    return read(driver, f"#heatmap-{kind} rect.cell", what)


def test_type_translate_and_explore_the_attention(server, served_run, browser, tmp_path):
    wait = WebDriverWait(browser, 60)
    browser.get(server)
    wait.until(lambda d: "layers" in d.find_element(By.ID, "model-info").text)  # GET /info answered
    card = read_card(served_run)["training"]  # the scores are labelled from mt.plumbing.metrics
    best = ", ".join(f"{m.label} {card['best_val_' + m.key]:.2f}" for m in HEADLINE)
    assert browser.find_element(By.ID, "model-info").text.endswith(f"steps, best validation {best}")
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(LINES))
    for field, value in (("beam", "3"), ("n-best", "2"), ("length-penalty", "1.0")):
        browser.find_element(By.ID, field).clear()
        browser.find_element(By.ID, field).send_keys(value)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: len(cells(d, "cross")) > 0)

    want = api(
        server,
        "translate",
        {"lines": LINES, "beam": 3, "n_best": 2, "length_penalty": 1.0, "alignments": True},
    )
    shown = read(browser, "#results .translation")
    assert shown == [t["translation"] for t in want["translations"]]
    scores = read(browser, "#results td.score")
    assert scores == [f"{h['score']:.4f}" for t in want["translations"] for h in t["nbest"]]

    Select(browser.find_element(By.ID, "sentence")).select_by_value(
        "1"
    )  # the shorter line: padded in its batch
    wait.until(lambda d: d.find_element(By.ID, "batch-note").text.startswith("Sentence 2"))
    att = api(
        server, "attention", {"lines": LINES, "index": 1, "beam": 3, "n_best": 2, "length_penalty": 1.0}
    )
    S, T = len(att["source"]), len(att["target"])
    assert "<pad>" in att["source"]
    for kind, rows, cols in (
        ("encoder", att["source"], att["source"]),
        ("decoder", att["target"], att["target"]),
        ("cross", att["target"], att["source"]),
    ):
        svg = f"#heatmap-{kind}"
        assert read(browser, f"{svg} text.col") == cols and read(browser, f"{svg} text.row") == rows
        assert len(cells(browser, kind)) == len(rows) * len(cols)
        mask, key_real = (
            att["masks"][kind],
            att["source_mask"] if cols is att["source"] else att["target_mask"],
        )
        hidden = [(q, k) for q in range(len(rows)) for k in range(len(cols)) if not mask[q][k]]
        drawn = {kind_: len(read(browser, f"{svg} rect.masked.{kind_}")) for kind_ in ("pad", "future")}
        assert drawn == {
            "pad": sum(not key_real[k] for _, k in hidden),
            "future": sum(key_real[k] for _, k in hidden),
        }
    real_t = sum(att["target_mask"])  # the causal triangle over real target positions; padding hides the rest
    assert len(read(browser, "#heatmap-decoder rect.masked.future")) == sum(
        max(real_t - 1 - q, 0) for q in range(T)
    )
    assert len(read(browser, "#heatmap-encoder rect.masked.pad")) == S * (S - sum(att["source_mask"]))

    aligned = att["alignment"]  # the word alignment: the words of both sides, a line per pair
    assert read(browser, "#alignment text", "textContent") == aligned["source"] + aligned["target"]
    assert len(read(browser, "#alignment line.link", "x1")) == len(aligned["pairs"])
    assert read(browser, "#results .alignment", "textContent") == [
        f"alignment: {t['alignment'] or 'none'}" for t in want["translations"]
    ]

    before = cells(browser, "cross")
    Select(browser.find_element(By.ID, "head")).select_by_value("0")
    Select(browser.find_element(By.ID, "layer")).select_by_index(len(att["cross"]) - 1)
    after = cells(browser, "cross", "data-p")
    assert after == [str(p) if p % 1 else str(int(p)) for row in att["cross"][-1][0] for p in row]
    assert before != cells(browser, "cross")
    shot = Path(os.environ.get("MT_SCREENSHOT") or tmp_path / "page.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_the_page_starts_from_the_runs_decoding(server, served_run, browser):
    """Untouched, the page's controls show what GET /info reports (the run's tuned beam and length
    penalty), and its first translation is `mt translate`'s."""
    wait = WebDriverWait(browser, 60)
    browser.get(server)
    wait.until(lambda d: "layers" in d.find_element(By.ID, "model-info").text)
    with urllib.request.urlopen(server + "info", timeout=60) as response:
        decode = json.loads(response.read())["decode"]
    shown = [
        browser.find_element(By.ID, f).get_attribute("value") for f in ("beam", "n-best", "length-penalty")
    ]
    assert shown == [str(decode["beam"]), str(decode["n_best"]), f"{decode['length_penalty']:g}"]
    if not os.environ.get("MT_SERVE_RUN"):
        assert (decode["beam"], decode["length_penalty"], decode["tuned"]) == (2, 1.5, True)
        assert browser.find_element(By.ID, "decoding-note").text == (
            "Starting from the run's own decoding (GET /info): beam 2, length penalty 1.5, as mt tune chose "
            "it on val."
        )
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(LINES))
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: len(read(d, "#results .translation")) == len(LINES))
    assert read(browser, "#results .translation") == Translator.from_run(served_run, device="cpu").translate(
        LINES
    )
