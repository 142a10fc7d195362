"""mt/serving/app.py: `mt serve`'s HTTP API (FastAPI's test client) around its decoding thread, and
every refusal.

The server must answer exactly what `mt translate` writes for the same lines, one result per line,
in order, whichever requests its worker merged."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
from conftest import ODD, expected, make_worker  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from mt.cli import main  # noqa: E402
from mt.plumbing.metrics import HEADLINE  # noqa: E402
from mt.serving.app import create_app, server_info  # noqa: E402
from mt.serving.worker import Job  # noqa: E402


@pytest.fixture
def client(served):
    worker = make_worker(served, max_lines=8, max_line_chars=2000, max_request_bytes=4000, max_beam=4)
    worker.start()
    info = server_info(worker.translator, worker.limits)
    with TestClient(create_app(worker, info), raise_server_exceptions=False) as c:
        yield c


def test_odd_lines_get_what_mt_translate_writes(client, served, tmp_path, capsys):
    (tmp_path / "in.de").write_text("".join(line + "\n" for line in ODD), encoding="utf-8")
    assert (
        main(["translate", "--run", str(served[0]), "--input", str(tmp_path / "in.de"), "--device", "cpu"])
        == 0
    )
    cli = capsys.readouterr().out.split("\n")[:-1]
    response = client.post("/translate", json={"lines": ODD})
    assert response.status_code == 200
    got = response.json()
    assert [t["translation"] for t in got["translations"]] == cli and cli[0]  # words, not ""
    assert (got["beam"], got["n_best"], got["length_penalty"]) == (1, 1, 1.0)
    assert got["translations"][1] == {"translation": "", "nbest": [{"translation": "", "score": 0.0}]}


def test_nbest_and_scores_follow_the_options(client, served):
    lines = ODD[:2] + ["Ein Hund läuft ."]
    got = client.post(
        "/translate", json={"lines": lines, "beam": 3, "n_best": 2, "length_penalty": 0.5}
    ).json()
    want = expected(served, lines, beam=3, n_best=2, length_penalty=0.5)
    assert [[(h["translation"], h["score"]) for h in t["nbest"]] for t in got["translations"]] == [
        [(text, round(score, 4)) for text, score in hyps] for hyps in want
    ]
    assert [len(t["nbest"]) for t in got["translations"]] == [2, 1, 2]  # an empty line has one hypothesis


def test_split_sentences_gives_one_joined_translation_a_line(client, served):
    lines = ["Der Hund sieht die Katze. Die Katze schläft.", "", "Ein Mann läuft."]
    got = client.post("/translate", json={"lines": lines, "split_sentences": True}).json()
    alone = [
        hyps[0][0] for hyps in expected(served, ["Der Hund sieht die Katze.", "Die Katze schläft.", lines[2]])
    ]
    assert [t["translation"] for t in got["translations"]] == [f"{alone[0]} {alone[1]}", "", alone[2]]
    assert len(got["translations"]) == 3 and "alignment" not in got["translations"][0]


def test_samples_are_mt_translates_line_for_line(client, served):
    lines = ["Ein Hund läuft .", "Zwei Männer", "Eine Frau sitzt ."]
    options = {"sample": "topk:20", "temperature": 1.5, "seed": 4}
    got = client.post("/translate", json={"lines": lines, **options}).json()
    want = expected(served, lines, **options)  # in-process, as `mt translate --sample` decodes them
    assert [t["translation"] for t in got["translations"]] == [hyps[0][0] for hyps in want]


def test_n_samples_per_line_come_in_the_order_drawn(client, served):
    lines, options = ["Ein Hund läuft .", "Zwei Männer"], {"sample": "topk:20", "temperature": 1.5, "seed": 4}
    got = client.post("/translate", json={"lines": lines, "n_best": 3, **options}).json()["translations"]
    want = expected(served, lines, n_best=3, **options)
    assert [[h["translation"] for h in t["nbest"]] for t in got] == [
        [text for text, _ in hyps] for hyps in want
    ]


def test_each_line_keeps_its_prefix_and_alignments_line_up_with_the_words(client, served):
    lines, prefixes = ["Ein Hund läuft .", "Zwei Männer", ""], ["a dog", "", ""]
    got = client.post("/translate", json={"lines": lines, "prefixes": prefixes, "alignments": True}).json()
    translations = got["translations"]
    assert [t["translation"] for t in translations] == [
        hyps[0][0] for hyps in expected(served, lines, prefixes)
    ]
    assert translations[0]["translation"].startswith("a dog")
    assert translations[2]["alignment"] == ""
    for line, t in zip(lines[:2], translations):
        pairs = [tuple(map(int, pair.split("-"))) for pair in t["alignment"].split()]
        assert {j for _, j in pairs} == set(range(len(t["translation"].split())))
        assert all(0 <= i < len(line.split()) for i, _ in pairs)
    plain = client.post("/translate", json={"lines": lines}).json()["translations"]
    assert "alignment" not in plain[0] and [t["translation"] for t in plain[1:]] == [
        t["translation"] for t in translations[1:]
    ]


def test_a_line_break_or_a_lone_surrogate_inside_an_item_stays_one_line(client, served):
    got = client.post(
        "/translate",
        content=json.dumps({"lines": ["Der Hund\nsieht die Katze .", "a \ud800 b"]}),
        headers={"Content-Type": "application/json"},
    ).json()["translations"]
    want = expected(served, ["Der Hund sieht die Katze .", "a \ufffd b"])
    assert [t["translation"] for t in got] == [hyps[0][0] for hyps in want]
    assert client.post("/translate", json={"lines": []}).json()["translations"] == []


def test_a_full_queue_is_503_not_a_hang(served):
    worker = make_worker(served, max_queue=2)
    decoding, release = threading.Event(), threading.Event()
    translate = worker.translate
    worker.translate = lambda *args: (decoding.set(), release.wait(30), translate(*args))[2]
    worker.start()
    first = worker.submit(Job.translate(["a"], served[1].decode))
    # its round is closed and decoding waits on `release` (an empty queue alone is not enough: the
    # worker takes jobs that come within max_wait_ms of the first into the same round)
    assert decoding.wait(30)
    waiting = [worker.submit(Job.translate(["b"], served[1].decode)) for _ in range(2)]
    with TestClient(create_app(worker, {})) as c:
        response = c.post("/translate", json={"lines": ["c"]})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json() == {
            "error": "the queue is full (2 requests waiting, mt serve --max-queue); retry later"
        }
        release.set()
        assert [f.result(timeout=60)[0].nbest[0][0] for f in [first, *waiting]] == [
            expected(served, [x])[0][0][0] for x in "abb"
        ]
        assert c.post("/translate", json={"lines": ["c"]}).status_code == 200


def test_a_failing_decoder_is_a_500_and_the_server_goes_on(client):
    worker = client.app.state.worker
    translate = worker.translate
    worker.translate = lambda *args: 1 / 0
    response = client.post("/translate", json={"lines": ["a"]})
    assert (response.status_code, response.json()) == (
        500,
        {"error": "internal error (ZeroDivisionError); the server log has the traceback"},
    )
    worker.translate = translate
    assert client.post("/translate", json={"lines": ["a"]}).status_code == 200
    assert client.get("/health").json()["status"] == "ok"


LIMITS = [  # (body, status, error, name): every refusal, with the limits of the `client` fixture
    (
        {"lines": ["a"] * 9},
        413,
        "the request has 9 lines, more than max_lines=8 (mt serve --max-lines); send them in "
        "several requests",
        ("limit", "max_lines"),
    ),
    (
        {"lines": ["a", "b" * 2001]},
        413,
        "lines[1] has 2001 characters, more than max_line_chars=2000 (mt serve "
        "--max-line-chars); split the line",
        ("limit", "max_line_chars"),
    ),
    (
        {"lines": ["a" * 600] * 8},
        413,
        "the request body is larger than max_request_bytes=4000 (mt serve "
        "--max-request-bytes); send fewer lines per request",
        ("limit", "max_request_bytes"),
    ),
    ({"lines": ["a"], "beem": 2}, 422, "beem: unknown option; did you mean beam?", ("option", "beem")),
    (
        {"lines": ["a"], "colour": 2},
        422,
        "colour: unknown option; the options are lines, beam, n_best, length_penalty, max_len_a, max_len_b, "
        "no_repeat_ngram, min_len, sample, temperature, seed, mbr, mbr_samples, mbr_temperature, rerank, "
        "rerank_weight, split_sentences, prefixes, alignments",
        ("option", "colour"),
    ),
    (
        {"lines": ["a"], "beam": 0},
        422,
        "beam: Input should be greater than or equal to 1",
        ("option", "beam"),
    ),
    ({"lines": ["a"], "beam": "4"}, 422, "beam: Input should be a valid integer", ("option", "beam")),
    (
        {"lines": ["a"], "beam": 5},
        422,
        "beam: 5 is more than max_beam=4 (mt serve --max-beam)",
        ("option", "beam"),
    ),
    (
        {"lines": ["a"], "n_best": 2},
        422,
        "n_best: 2 is more than the run's beam (1): beam search keeps only that "
        "many hypotheses; send beam 2 or more",
        ("option", "n_best"),
    ),
    (
        {"lines": ["a"], "beam": 2, "n_best": 3},
        422,
        "n_best: 3 is more than beam 2: beam search keeps only that many hypotheses; send beam 3 or more",
        ("option", "n_best"),
    ),
    (
        {"lines": ["a"], "length_penalty": -1},
        422,
        "length_penalty: Input should be greater than or equal to 0",
        ("option", "length_penalty"),
    ),
    (
        {"lines": ["a"], "sample": "topk:3", "beam": 2},
        422,
        "sample: topk:3 draws one token at a time: send beam 1",
        ("option", "sample"),
    ),
    (
        {"lines": ["a", "b"], "prefixes": ["the"]},
        422,
        'prefixes: 1 given for 2 lines; give one per line ("" for none)',
        ("option", "prefixes"),
    ),
    (
        {"lines": ["a"], "prefixes": ["x" * 2001]},
        413,
        "prefixes[0] has 2001 characters, more than max_line_chars=2000 (mt serve --max-line-chars); "
        "split the line",
        ("limit", "max_line_chars"),
    ),
    (
        {"lines": ["a"], "alignments": "yes"},
        422,
        "alignments: Input should be a valid boolean",
        ("option", "alignments"),
    ),
    (
        {"lines": ["a. b."], "split_sentences": True, "alignments": True},
        422,
        "alignments: split_sentences joins the translations of a line's sentences, which are aligned one "
        "by one; ask for alignments without split_sentences",
        ("option", "alignments"),
    ),
    (
        {"lines": ["a. b."], "split_sentences": True, "beam": 3, "n_best": 2},
        422,
        "n_best: 2: split_sentences joins the best translation of each sentence, so it gives no n-best "
        "lists; send n_best 1, or leave split_sentences out",
        ("option", "n_best"),
    ),
    (
        {"lines": ["a"], "split_sentences": 1},
        422,
        "split_sentences: Input should be a valid boolean",
        ("option", "split_sentences"),
    ),
    ({"lines": "a"}, 422, "lines: Input should be a valid list", ("option", "lines")),
    ({"lines": ["a", 7]}, 422, "lines[1]: Input should be a valid string", ("option", "lines")),
    ({}, 422, "lines: Field required", ("option", "lines")),
    ([], 422, 'body: send a JSON object, e.g. {"lines": ["Ein Hund."]}', ("option", "body")),
]


@pytest.mark.parametrize("body,status,error,name", LIMITS)
def test_every_refusal_is_one_json_line_naming_the_limit_or_option(client, body, status, error, name):
    response = client.post("/translate", json=body)
    assert (response.status_code, response.json()) == (status, {"error": error, name[0]: name[1]})


def test_refusals_of_the_body_itself(client):
    post = lambda content, kind="application/json": client.post(  # noqa: E731
        "/translate", content=content, headers={"Content-Type": kind}
    )
    assert post(b'{"lines": [').json() == {
        "error": "body: not valid JSON (Expecting value)",
        "option": "body",
    }
    assert (
        post(b'{"lines": ["a"], "length_penalty": NaN}').json()["error"]
        == "length_penalty: Input should be a finite number"
    )
    assert (
        post(b'{"lines": ["a"]}', "text/plain").json()["error"]
        == "body: send a JSON object with Content-Type: application/json (got text/plain)"
    )
    body = b'{"lines": ["' + b"a" * 4000 + b'"]}'
    response = client.post(
        "/translate", content=(body[i : i + 100] for i in range(0, len(body), 100))
    )  # chunked
    assert (response.status_code, response.json()["limit"]) == (413, "max_request_bytes")
    assert client.get("/translate").json() == {"error": "GET /translate: Method Not Allowed"}
    assert client.get("/nowhere").status_code == 404


def test_health_info_and_the_page(client, served):
    assert client.get("/health").json() == {"status": "ok", "queued": 0, "batches": 0}
    info = client.get("/info").json()
    assert (info["name"], info["checkpoint"], info["card"]["steps"]) == (
        "toy",
        str(served[0] / "best.pt"),
        30,
    )
    assert info["limits"]["max_lines"] == 8 and info["model"]["heads"] == served[3].cfg.n_heads
    assert (info["model"]["encoder_layers"], info["model"]["decoder_layers"]) == served[3].cfg.depth
    assert info["languages"] == {"source": "de", "target": "en"}  # the page names them
    assert info["card"]["headline"] == [[m.key, m.label] for m in HEADLINE]  # the page labels the scores
    assert all(isinstance(info["card"][f"best_val_{m.key}"], float) for m in HEADLINE)
    page = client.get("/")
    assert page.status_code == 200 and 'src="static/app.js"' in page.text
    for name in ("app.js", "style.css"):
        text = client.get(f"/static/{name}").text
        assert (
            "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
        )  # offline


def test_attention_shows_the_batch_padding_and_the_masks(client, served):
    lines = ["Der Hund .", "Der Hund sieht die Katze und der Mann sieht den Hund ."]
    got = client.post("/attention", json={"lines": lines, "index": 0}).json()
    S, T, H = len(got["source"]), len(got["target"]), got["heads"]
    assert got["translation"] == expected(served, lines[:1])[0][0][0]
    assert got["source"][-1] == "<pad>" and got["source_mask"][-1] is False  # padded to the longer line
    assert got["target"][0] == "<s>" and got["predicted"][sum(got["target_mask"]) - 1] == "</s>"
    assert got["masks"]["decoder"][1][:3] == [True, True, False]
    for kind, (rows, cols) in {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}.items():
        mask = got["masks"][kind]
        assert len(got[kind]) == served[3].cfg.layers and len(got[kind][0]) == H
        for head in got[kind][0]:
            assert (len(head), len(head[0])) == (rows, cols)
            assert all((p == 0) == (not m) for row, mrow in zip(head, mask) for p, m in zip(row, mrow)), kind
            assert all(abs(sum(row) - 1) < 1e-3 for row in head)
    alignment = got["alignment"]
    assert (alignment["source"], alignment["target"]) == (lines[0].split(), got["translation"].split())
    assert {j for _, j in alignment["pairs"]} == set(range(len(alignment["target"])))
    assert all(0 <= i < len(alignment["source"]) for i, _ in alignment["pairs"])
    empty = client.post("/attention", json={"lines": lines + [""], "index": 2}).json()
    assert (empty["translation"], empty["target"][:2], empty["predicted"][0]) == (
        "",
        ["<s>", "<pad>"],
        "</s>",
    )
    response = client.post("/attention", json={"lines": lines, "prefixes": ["a", ""]})
    assert response.json() == {
        "error": "prefixes: /attention shows the model's own translation; send them to /translate",
        "option": "prefixes",
    }
    response = client.post("/attention", json={"lines": lines, "index": 2})
    assert response.json() == {"error": "index: 2 is not a line of the request (2 lines)", "option": "index"}


def test_serve_refuses_a_taken_port_in_one_line(served, capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--run", str(served[0]), "--port", str(port)]) == 2
    assert capsys.readouterr().err == (
        f"mt: error: 127.0.0.1:{port}: cannot listen (Address already in use); "
        "pick another --port or --host\n"
    )


def test_mt_serve_answers_over_loopback_and_stops_on_ctrl_c(served):
    """The command itself (here serving an ensemble): uvicorn in a thread, decoding in the main one;
    SIGINT ends it with code 0."""
    import http.client
    import signal
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mt",
            "serve",
            "--run",
            str(served[0]),
            "--port",
            str(port),
            "--device",
            "cpu",
            "--ensemble",
            str(served[0]),  # the run with itself: what the run alone answers
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # not ignored, as under `&`
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request(
                    "POST", "/translate", json.dumps({"lines": ODD[:2]}), {"Content-Type": "application/json"}
                )
                answer = json.loads(conn.getresponse().read())
                break
            except OSError:
                time.sleep(0.1)
        assert [t["translation"] for t in answer["translations"]] == [
            hyps[0][0] for hyps in expected(served, ODD[:2])
        ]
        conn.request("GET", "/info")
        assert json.loads(conn.getresponse().read())["ensemble"] == [str(served[0])] * 2
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and err.splitlines()[-1].endswith("INFO mt.serving.app: stopped by Ctrl-C")
