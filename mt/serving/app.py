"""`mt serve`'s HTTP API (FastAPI on uvicorn) and the attention explorer page, in front of one opened
run (mt.translator's `Translator`).

The event loop (uvicorn, in a thread of its own) only parses, checks and answers requests; one
decoding thread (the main one, mt.serving.worker) calls the Translator. It takes every waiting
request, and those that keep coming less than `max_wait_ms` apart, merges the ones with the same
decoding options into one `Translator.nbest` call (which sorts their lines into token-budget
batches, as `mt translate` does a file) and hands each request its own lines' results back, in
order. Lines go through the same code as there: control characters (a newline too) become spaces,
an empty line gives an empty translation, a line longer than the model takes is translated in parts.

Every error is JSON {"error": one line, ...}: 413 for a request over a limit ("limit": its name), 422
for a bad option ("option": its name, which also leads the message; mt.serving.requests checks what
a request asks), 503 when the queue is full or the decoding thread has stopped (and 404/405 for a
wrong path or method).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import threading
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from mt.decode_config import DecodeConfig
from mt.model import count_parameters
from mt.plumbing.errors import ServeError
from mt.run.card import card_summary, card_tuning
from mt.run.folder import tuned_options
from mt.serving.limits import ServeLimits, check_run_fits
from mt.serving.requests import (
    AttentionRequest,
    Refused,
    TranslateRequest,
    attention_index,
    check_alignable,
    checked_lines,
    checked_prefixes,
    request_decoding,
    validation_error,
)
from mt.serving.worker import Job, Overloaded, Translated, Worker
from mt.translator import Translator

log = logging.getLogger(__name__)
PAGE = Path(__file__).parent / "static"


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes gets 413 before the app parses any of it (by its
    Content-Length, or counted as it arrives when sent in chunks)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        body, more = bytearray(), True
        while more and len(body) <= self.limit and (not declared.isdigit() or int(declared) <= self.limit):
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if more or len(body) > self.limit:
            error = Refused(
                413,
                "max_request_bytes",
                f"the request body is larger than max_request_bytes="
                f"{self.limit} (mt serve --max-request-bytes); send fewer lines per request",
            )
            return await error_response(error)(scope, receive, send)
        unread = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay():
            return unread.pop() if unread else await receive()  # after the body: e.g. the client's disconnect

        await self.app(scope, replay, send)


def error_response(e: Exception) -> JSONResponse:  # Refused, Overloaded, or a bug
    if isinstance(e, Refused):
        return JSONResponse(
            {"error": str(e), "limit" if e.status == 413 else "option": e.name}, status_code=e.status
        )
    if isinstance(e, Overloaded):
        return JSONResponse({"error": str(e)}, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse(
        {"error": f"internal error ({type(e).__name__}); the server log has the traceback"}, status_code=500
    )


def decodes_as_tuned(translator: Translator) -> bool:
    """Whether an opened run translates as `mt tune` chose: its decode section untouched by options, with
    the tuned options (`TUNED`: beam, length penalty, MBR, reranking), on the checkpoint tuned, no
    ensemble; /info and the page say so."""
    tuning = card_tuning(translator.run, translator.checkpoint)
    decode = translator.decode
    if translator.ensemble or not tuning or decode != translator.config.decode:
        return False
    return all(getattr(decode, key) == value for key, value in tuned_options(translator.run, tuning).items())


def server_info(translator: Translator, limits: ServeLimits) -> dict:
    t, m = translator, translator.model.cfg
    return {
        "name": t.config.name,
        "run": str(t.run),
        "checkpoint": str(t.checkpoint),
        "ensemble": [str(t.run), *t.ensemble] if t.ensemble else None,
        "device": str(t.device),
        "model": {
            "encoder_layers": m.depth[0],
            "decoder_layers": m.depth[1],
            "d_model": m.d_model,
            "heads": m.n_heads,
            "vocab_size": t.model.vocab_size,
            "parameters": count_parameters(t.model),
        },
        # the decoding a request without options gets, and so the page's first: tuned = as `mt tune` chose
        "decode": {
            **{k: getattr(t.decode, k) for k in ("beam", "n_best", "length_penalty", "engine", "sample")},
            "tuned": decodes_as_tuned(t),
        },
        "languages": {"source": t.config.data.src_lang, "target": t.config.data.tgt_lang},
        "card": card_summary(t.run),
        "limits": dataclasses.asdict(limits),
    }


def translation_json(found: list[Translated], decode: DecodeConfig) -> dict:
    return {
        "translations": [
            {
                "translation": line.nbest[0][0],
                "nbest": [{"translation": text, "score": round(score, 4)} for text, score in line.nbest],
                **({"alignment": line.alignment} if line.alignment is not None else {}),
            }
            for line in found
        ],
        "beam": decode.beam,
        "n_best": decode.n_best,
        "length_penalty": decode.length_penalty,
    }


def create_app(worker: Worker, info: dict) -> FastAPI:
    """The HTTP API and the page, in front of a started `worker`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.stop()

    # no /docs or /redoc: their pages load scripts from a CDN
    app = FastAPI(title="mt", version="1", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.worker = worker
    app.add_middleware(BodyLimit, limit=worker.limits.max_request_bytes)
    app.mount("/static", StaticFiles(directory=PAGE), name="static")
    add_error_handlers(app)
    add_routes(app, worker, info)
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every error as {"error": one line, ...} (see the module's docstring)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        model = AttentionRequest if request.url.path == "/attention" else TranslateRequest
        name, message = validation_error(
            e.errors(), list(model.model_fields), request.headers.get("content-type", "")
        )
        return JSONResponse({"error": message, "option": name}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": f"{request.method} {request.url.path}: {e.detail}"}, status_code=e.status_code
        )

    async def refused(request: Request, e: Exception) -> JSONResponse:
        return error_response(e)

    for kind in (Refused, Overloaded, Exception):
        app.add_exception_handler(kind, refused)


def add_routes(app: FastAPI, worker: Worker, info: dict) -> None:
    async def run(job: Job) -> list:
        return await asyncio.wrap_future(worker.submit(job))

    @app.post("/translate")
    async def translate(req: TranslateRequest) -> dict:
        """One result per line, in order: the best translation, the n-best list with scores and, when
        asked, the best one's word alignment; each line's translation starts with its prefix, if any."""
        lines, decode = (
            checked_lines(req.lines, worker.limits),
            request_decoding(worker.translator.decode, req, worker.limits),
        )
        check_alignable(worker, req, decode)
        job = Job.translate(lines, decode, checked_prefixes(req, lines, worker.limits), req.alignments)
        return translation_json(await run(job) if lines else [], decode)

    @app.post("/attention")
    async def attention(req: AttentionRequest) -> dict:
        """Encoder self-, decoder self- and cross-attention of line `index`'s 1-best translation, in a
        teacher-forced pass over all the lines as one batch (so its padding shows), and its word
        alignment (`alignment`: the words of both sides and the pairs)."""
        lines, decode = (
            checked_lines(req.lines, worker.limits),
            request_decoding(worker.translator.decode, req, worker.limits),
        )
        return (await run(Job.attention(lines, decode, attention_index(req, lines))))[0]

    @app.get("/health")
    async def health() -> JSONResponse:
        alive = worker.running.is_set()
        return JSONResponse(
            {
                "status": "ok" if alive else "decoding thread stopped",
                "queued": worker.queue.qsize(),
                "batches": worker.batches,
            },
            status_code=200 if alive else 503,
        )

    @app.get("/info")
    async def server() -> dict:
        return info

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE / "index.html")


def check_port(host: str, port: int) -> None:
    """Fail before the model loads when the address is taken."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise ServeError(f"{host}:{port}: cannot listen ({reason}); pick another --port or --host") from None


def serve(translator: Translator, host: str, port: int, limits: ServeLimits) -> None:
    """Serve an opened run until Ctrl-C: HTTP in a thread, decoding in this one. The run's decoding
    options (from_run's) are those of requests that do not name them."""
    import uvicorn

    check_run_fits(translator.decode.beam, limits)
    worker = Worker(translator, limits)
    info = server_info(translator, limits)
    http = uvicorn.Server(uvicorn.Config(create_app(worker, info), host=host, port=port, log_level="warning"))
    worker.running.set()  # requests are taken from the first one on; `run` below answers them
    threading.Thread(target=lambda: (http.run(), worker.stop()), name="mt-http", daemon=True).start()
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving on %s: anyone who can reach this machine can use it (mt serve has no authentication)",
            host,
        )
    log.info(
        "serving %s (%s) on http://%s:%d/ ; Ctrl-C stops", translator.run, info["checkpoint"], host, port
    )
    try:
        worker.run()
    except KeyboardInterrupt:
        log.info("stopped by Ctrl-C")
    finally:
        http.should_exit = True
