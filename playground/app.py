"""The FastAPI application: the static page (docs/en/playground.md) and the JSON / Server-Sent Events API.

Design choices:
- Sampling and loading block: each runs in a worker thread, a character at a time, so the event loop keeps serving.
- A client that goes away stops its sample after the step in flight: worker threads are never abandoned.
- Attention beyond the context window is the window's that ends at the position (`start` says where it begins),
  weights rounded to 4 decimals: more digits cannot be seen on the page and only lengthen the answer."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import torch
from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.device import pick_device
from common.errors import UserError
from model.attention_maps import attention_maps
from playground.config import ServeConfig
from playground.guard import BodyGuard, GenerationSlots, HostGuard
from playground.runs import CachedRun, RunCache, RunRegistry, relative_message
from playground.sampling import Continuation, SamplingError
from playground.schemas import ApiError, AttentionRequest, GenerateRequest, SafeJSONResponse, dumps, validation_error

STATIC = Path(__file__).resolve().parent / "static"
log = logging.getLogger("kochar.playground")


class Playground:
    def __init__(self, cfg: ServeConfig, device: torch.device | None = None):
        self.cfg = cfg
        self.registry = RunRegistry(cfg.runs_dir, cfg.ckpt, weights=cfg.weights)
        self.cache = RunCache(cfg.cache_size, device if device is not None else pick_device(cfg.device), cfg.weights)
        self.slots = GenerationSlots(cfg.max_generations, cfg.max_generations_per_run)

    async def load(self, name: str | None) -> CachedRun:
        """The loaded run a request names (None = the default run); every failure is an ApiError."""
        run_name, path = await to_thread.run_sync(self.registry.resolve, name)  # finding the default walks runs_dir
        try:
            return await to_thread.run_sync(lambda: self.cache.get(run_name, self.registry.file(path)))
        except FileNotFoundError:
            raise ApiError(404, "run", f"run {run_name!r} was removed") from None
        except UserError as e:
            raise ApiError(400, "run", relative_message(str(e), path, run_name)) from None
        except (OSError, RuntimeError, ValueError) as e:  # a file changed under us, a loop, an odd model
            raise ApiError(
                400,
                "run",
                f"run {run_name!r} cannot be loaded ({type(e).__name__}: {relative_message(str(e), path, run_name)})",
            ) from None


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {dumps(data)}\n\n".encode()


def _failure(e: Exception) -> str:
    if isinstance(e, SamplingError):
        return str(e)
    return f"sampling failed: {type(e).__name__}: {' '.join(str(e).split())}"


async def _steps(cont: Continuation) -> AsyncIterator[dict]:
    """The events of one sample, each computed in a worker thread; closing stops the sample."""
    try:
        while (event := await to_thread.run_sync(cont.next_event)) is not None:
            yield event
    finally:
        cont.close()


async def _events(cont: Continuation) -> AsyncIterator[bytes]:
    """The SSE stream of one sample: a `char` event per character, then always `done` or `error`."""
    steps = _steps(cont)
    try:
        async for event in steps:
            yield _sse("char", event)
        yield _sse("done", cont.summary())
    except Exception as e:  # noqa: BLE001 - the stream has started: report in it, the status is already sent
        yield _sse("error", {"error": _failure(e), "field": None})
    finally:
        await steps.aclose()


async def _until_disconnect(request: Request, work: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
    """(finished, result) of `work`, cancelled if the client disconnects first."""
    outcome: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        outcome.append(await work())
        tg.cancel_scope.cancel()
    return bool(outcome), outcome[0] if outcome else None


class _SlotStream(StreamingResponse):
    """The SSE answer of a sample: holds its generation slot until the stream ends, however it ends."""

    def __init__(self, events: AsyncIterator[bytes], release: Callable[[], None]):
        super().__init__(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        self._release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _collect(cont: Continuation) -> dict | ApiError:
    try:
        async for _ in _steps(cont):
            pass
    except Exception as e:  # noqa: BLE001 - a broken model: the run's fault, answered like a broken file
        return ApiError(400, "run", _failure(e))
    return {**cont.summary(), "tokens": cont.events}


async def _generate(pg: Playground, body: GenerateRequest, request: Request) -> Response:
    body.check_limits(pg.cfg.max_new_tokens_limit, pg.cfg.max_prompt_chars)
    cached = await pg.load(body.run)
    with ExitStack() as slot:
        slot.enter_context(pg.slots.take(cached.name))
        try:
            cont = await to_thread.run_sync(Continuation, cached, body)
        except (ValueError, RuntimeError, UnicodeError) as e:
            raise ApiError(
                422,
                "prompt",
                f"the prompt cannot be encoded for run {cached.name!r} "
                f"({type(e).__name__}: {' '.join(str(e).split())})",
            ) from None
        if body.stream:
            return _SlotStream(_events(cont), slot.pop_all().close)  # the stream gives the slot back
        finished, result = await _until_disconnect(request, partial(_collect, cont))
    if isinstance(result, ApiError):
        raise result
    return SafeJSONResponse(result) if finished else Response(status_code=499)


def attention_row(cached: CachedRun, text: str, position: int | None) -> dict:
    """Weights (blocks x heads x keys) of the query at token `position` (None = the last token) of `text`."""
    run = cached.run
    ids = run.tokenizer.encode(text).tolist()
    if not ids:
        raise ApiError(422, "text", "text is empty: give the text whose attention to show")
    if position is None:
        position = len(ids) - 1
    if not 0 <= position < len(ids):
        raise ApiError(
            422,
            "position",
            f"position must be in [0, {len(ids) - 1}] for this text ({len(ids)} tokens), got {position}",
        )
    start = max(0, position + 1 - run.model.context_length)
    window = torch.tensor(ids[start : position + 1], dtype=torch.long, device=next(run.model.parameters()).device)
    with cached.lock, torch.inference_mode():
        maps = attention_maps(run.model, window)  # (L, H, T, T)
    rows = maps[:, :, -1, :].float().cpu()  # the query is the window's last token
    return {
        "run": cached.name,
        "model_weights": run.weights.kind,  # which set of the run's weights (`weights` is the attention's)
        "position": position,
        "start": start,
        "tokens": [run.tokenizer.decode([i]) for i in ids[start : position + 1]],
        "num_blocks": rows.shape[0],
        "num_heads": rows.shape[1],
        "weights": [[[round(w, 4) for w in head] for head in block] for block in rows.tolist()],
    }


def _error_handlers(app: FastAPI) -> None:
    """Every refusal as {"error", "field"}: ours, pydantic's, Starlette's, and a JSON 500 for anything unforeseen."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 503 else None  # busy: worth another try soon
        return SafeJSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _api_error(request, validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return SafeJSONResponse(
            {"error": str(exc.detail), "field": None}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unforeseen(request: Request, exc: Exception) -> JSONResponse:
        log.error("playground: %s %s failed", request.method, request.url.path, exc_info=exc)
        return SafeJSONResponse(
            {"error": f"internal error ({type(exc).__name__}); the server log has the details", "field": None},
            status_code=500,
        )


def create_app(
    cfg: ServeConfig, device: torch.device | None = None, allowed_hosts: frozenset[str] | None = None
) -> FastAPI:
    """The playground app for `cfg`; `allowed_hosts` (None = any) lists the Host header names it answers."""
    pg = Playground(cfg, device)
    app = FastAPI(
        title="kochar-gpt playground",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=SafeJSONResponse,
    )
    app.state.playground = pg
    app.add_middleware(
        BodyGuard, max_bytes=cfg.max_body_bytes, timeout=cfg.body_timeout_s, send_timeout=cfg.send_timeout_s
    )
    if allowed_hosts is not None:  # added last: the outermost, before any body is read
        app.add_middleware(HostGuard, names=allowed_hosts)
    _error_handlers(app)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/api/runs")
    async def runs() -> list[dict]:
        return [asdict(r) for r in await to_thread.run_sync(pg.registry.list_runs)]

    @app.post("/api/generate")
    async def generate(body: GenerateRequest, request: Request) -> Response:
        return await _generate(pg, body, request)

    @app.post("/api/attention")
    async def attention(body: AttentionRequest) -> dict:
        body.check_limits(cfg.max_prompt_chars + cfg.max_new_tokens_limit)
        cached = await pg.load(body.run)
        with pg.slots.take(cached.name):
            return await to_thread.run_sync(attention_row, cached, body.text, body.position)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
