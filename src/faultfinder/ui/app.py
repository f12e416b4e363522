"""The Starlette application behind `faultfinder ui`: read-only pages over a Catalog, plus
POST endpoints when (and only when) the command line enabled them: attribution runs
(`--allow-run`) and replays with an edited step (`--allow-replay -- COMMAND`)."""

from __future__ import annotations

import json
import re
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from faultfinder.dover.edit_repeats import REPEAT_TEMPERATURE, recorded_parts
from faultfinder.llm import json_text
from faultfinder.shown import safe
from faultfinder.ui import pages
from faultfinder.ui.catalog import Catalog
from faultfinder.ui.jobs import JobRunner
from faultfinder.ui.names import LISTED_CHARS, ClippedNames, name_filter, shown_name
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import MAX_REPEATS, JobRequestError, ReplayJob

MAX_BODY = 4096
"""Largest request body accepted, but for an edit (the POST that starts a run is empty)."""
MAX_EDIT_BODY = 1_000_000
"""Largest body of ``POST /replay-jobs`` (an edited step's text)."""
EDIT_PATH = "/replay-jobs"
MAX_RAW_FILE = 5_000_000
"""Largest file /raw serves."""
ANSWER_INDEX = re.compile(r"[0-9]{1,9}")
"""The ``?a=`` of a trace page: which answer is chosen."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@dataclass
class UIConfig:
    """How the app behaves (set by `faultfinder ui`)."""

    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    """Host header values accepted (DNS-rebinding guard)."""
    csp: bool = True
    """Send the Content-Security-Policy header (tests switch it off to prove that escaping
    alone keeps planted scripts inert)."""


def pretty(value: Any) -> str:
    """Indented JSON as plain text (autoescaped like any other text, unlike ``tojson``)."""
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def program_label(argv: tuple[str, ...]) -> str:
    """The replayed program as the header shows it: its executable by name (the full
    command line is the element's title)."""
    return shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else ""


T = TypeVar("T")


def found(table: Mapping[str, T], request: Request, what: str) -> T:
    """The entry the path's key names, or a 404 saying what was not found."""
    entry = table.get(request.path_params["key"])
    if entry is None:
        raise HTTPException(404, f"no such {what}")
    return entry


def shown_value(value: Any) -> Any:
    """What a template prints for ``value``: text with its control and direction-changing
    characters shown as escapes (a right-to-left override in an agent name would reorder
    what the page shows), then HTML-escaped by autoescape; anything else as it is. Markup
    (a macro's or a recursive loop's output) is already made of values that came through
    here, and is kept as it is."""
    return safe(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def templates() -> Environment:
    env = Environment(
        loader=PackageLoader("faultfinder.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        finalize=shown_value,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = pretty
    env.filters["name"] = name_filter
    return env


class LimitBody:
    """Refuse request bodies over MAX_BODY bytes (declared or streamed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = MAX_EDIT_BODY if scope.get("path") == EDIT_PATH else MAX_BODY
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > limit):
                await PlainTextResponse("request body too large", 413)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, "request body too large")
            return message

        await self.app(scope, limited, send)


class SecurityHeaders:
    def __init__(self, app: ASGIApp, csp: bool) -> None:
        self.app = app
        self.csp = csp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
                if self.csp:
                    headers.append((b"content-security-policy", CSP.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(
    catalog: Catalog,
    *,
    runner: JobRunner | None = None,
    replays: ReplayRunner | None = None,
    config: UIConfig | None = None,
) -> Starlette:
    """The app over ``catalog``; the POST endpoints exist only when ``runner`` (attribution
    runs) or ``replays`` (replays with an edit) is given."""
    cfg = config or UIConfig()
    env = templates()
    token = secrets.token_urlsafe(24)

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("run_method", runner.method_spec if runner else None)
        context.setdefault(
            "replay_program", program_label(replays.settings.program.command) if replays else None
        )
        argv = shlex.join(replays.settings.program.command) if replays else None
        context.setdefault("replay_argv", argv)
        context.setdefault("max_repeats", MAX_REPEATS)
        context["token"] = token
        context["shown"] = catalog.roots.shown
        context["clipped_names"] = ClippedNames()
        context["listed_chars"] = LISTED_CHARS
        page = env.get_template(name).render(**context)
        # Text that cannot be written as UTF-8 (a lone surrogate that got past the readers)
        # is shown escaped rather than failing the page.
        return HTMLResponse(page.encode("utf-8", "backslashreplace"), status_code=status)

    # The pages are plain functions, which Starlette runs in its worker threads: building
    # and rendering a large page (10,000 runs) never holds up the event loop, so other
    # requests (a stylesheet, a job's status) are answered meanwhile. What needs the loop
    # (starting and cancelling jobs, their status) stays async.

    def index(request: Request) -> Response:
        return render("index.html", **pages.index(catalog, dict(request.query_params)))

    def trace(request: Request) -> Response:
        entry = catalog.traces.get(request.path_params["key"])
        if entry is None:
            raise HTTPException(404, "no such trace")
        selected = request.query_params.get("a", "")
        # ASCII digits only: str.isdigit() is also true of '²', which int() refuses.
        number = int(selected) if ANSWER_INDEX.fullmatch(selected) else None
        ctx = pages.trace(catalog, entry, number)
        ctx["editable"] = replays is not None and entry.run_dir is not None
        return render("trace.html", **ctx)

    def step(request: Request) -> Response:
        entry = catalog.traces.get(request.path_params["key"])
        n = request.path_params["n"]
        if entry is None or not 0 <= n < len(entry.trace.steps):
            raise HTTPException(404, "no such step")
        return render("step.html", entry=entry, step=entry.trace.steps[n])

    def step_inputs(request: Request) -> Response:
        entry = catalog.traces.get(request.path_params["key"])
        n = request.path_params["n"]
        if entry is None or not 0 <= n < len(entry.trace.steps):
            raise HTTPException(404, "no such step")
        return JSONResponse(pages.input_messages(entry.trace.steps[n]))

    def graph(request: Request) -> Response:
        entry = found(catalog.graphs, request, "graph")
        return render("graph.html", **pages.graph(catalog, entry))

    def replay(request: Request) -> Response:
        entry = found(catalog.replays, request, "replay")
        return render("replay.html", **pages.replay(catalog, entry))

    def dover(request: Request) -> Response:
        entry = found(catalog.dovers, request, "DoVer file")
        return render("dover.html", **pages.dover(catalog, entry))

    def evaluation(request: Request) -> Response:
        entry = found(catalog.evals, request, "evaluation")
        return render("eval.html", **pages.evaluation(catalog, entry))

    def raw(request: Request) -> Response:
        given = request.query_params.get("path", "")
        if "\x00" in given:
            raise HTTPException(400, "a path cannot hold a NUL byte")
        real = catalog.roots.contains(Path(given)) if given else None
        # Only the files artefacts were read from: never a dotfile, a skipped directory
        # (.git, .faultfinder) or anything else that merely lies under the given paths.
        if real is None or real not in catalog.artefact_files():
            raise HTTPException(404, "not an artefact file under the given paths")
        if real.stat().st_size > MAX_RAW_FILE:
            raise HTTPException(413, "file too large to show")
        return PlainTextResponse(real.read_text(encoding="utf-8", errors="replace"))

    async def start_run(request: Request) -> Response:
        assert runner is not None
        sent = request.headers.get("x-faultfinder-token", "")
        if not secrets.compare_digest(sent, token):
            raise HTTPException(403, "missing or wrong page token")
        key = request.path_params["key"]
        if key not in catalog.traces:
            raise HTTPException(404, "no such trace")
        job = runner.start(key)
        return JSONResponse({"job": job.id}, status_code=202)

    async def job_status(request: Request) -> Response:
        assert runner is not None
        job = runner.jobs.get(request.path_params["job"])
        if job is None:
            raise HTTPException(404, "no such job")
        return JSONResponse(
            {
                "state": job.state,
                "calls": job.calls,
                "tokens": job.tokens,
                "message": job.message,
                "answer": job.answer_id,
            }
        )

    def token_ok(request: Request) -> bool:
        sent = request.headers.get("x-faultfinder-token", "")
        return secrets.compare_digest(sent, token)

    async def step_edit(request: Request) -> Response:
        entry = catalog.traces.get(request.path_params["key"])
        n = request.path_params["n"]
        if entry is None or not 0 <= n < len(entry.trace.steps):
            raise HTTPException(404, "no such step")
        parts = recorded_parts(entry.trace.steps[n])
        # What the panel only shows (its heading, the labels of its choices) is clipped and
        # escaped here, as the templates do; what it edits is the recorded text itself.
        parts["agent"] = shown_name(parts["agent"])
        for call in parts["tool_calls"]:
            call["label"] = pages.call_label(call)
        for result in parts["tool_results"]:
            result["label"] = shown_name(result["call_id"] or "result")
        return JSONResponse(parts)

    async def start_replay(request: Request) -> Response:
        assert replays is not None
        if not token_ok(request):
            return JSONResponse({"error": "missing or wrong page token"}, status_code=403)
        try:
            body = json_text.loads(await request.body())
        except json_text.JSONTextError as exc:
            return JSONResponse({"error": f"the request is not JSON: {exc}"}, status_code=400)
        try:
            job = replays.start(body)
        except JobRequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        url = f"/replay-jobs/{job.id}"
        return JSONResponse({"job": job.id, "url": url}, status_code=202)

    def replay_job_of(request: Request) -> ReplayJob:
        assert replays is not None
        job = replays.jobs.get(request.path_params["job"])
        if job is None:
            raise HTTPException(404, "no such job")
        return job

    async def replay_job_page(request: Request) -> Response:
        job = replay_job_of(request)
        base = catalog.traces[job.trace_key]
        return render("replay_job.html", job=job, base=base, temperature=REPEAT_TEMPERATURE)

    async def replay_job_status(request: Request) -> Response:
        assert replays is not None
        return JSONResponse(replays.status(replay_job_of(request)))

    async def cancel_replay_job(request: Request) -> Response:
        assert replays is not None
        job = replay_job_of(request)
        if not token_ok(request):
            return JSONResponse({"error": "missing or wrong page token"}, status_code=403)
        replays.cancel(job)
        return JSONResponse({"job": job.id}, status_code=202)

    async def error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return render("error.html", status=status, code=status, detail=detail)

    routes = [
        Route("/", index),
        Route("/trace/{key}", trace),
        Route("/trace/{key}/step/{n:int}", step),
        Route("/trace/{key}/step/{n:int}/inputs", step_inputs),
        Route("/graph/{key}", graph),
        Route("/replay/{key}", replay),
        Route("/dover/{key}", dover),
        Route("/eval/{key}", evaluation),
        Route("/raw", raw),
        Mount("/static", StaticFiles(packages=[("faultfinder.ui", "static")]), name="static"),
    ]
    if runner is not None:
        routes += [
            Route("/trace/{key}/attribute", start_run, methods=["POST"]),
            Route("/jobs/{job}", job_status),
        ]
    if replays is not None:
        routes += [
            Route("/trace/{key}/step/{n:int}/edit", step_edit),
            Route(EDIT_PATH, start_replay, methods=["POST"]),
            Route("/replay-jobs/{job}", replay_job_page),
            Route("/replay-jobs/{job}/status", replay_job_status),
            Route("/replay-jobs/{job}/cancel", cancel_replay_job, methods=["POST"]),
        ]
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders, csp=cfg.csp),
            Middleware(TrustedHostMiddleware, allowed_hosts=list(cfg.allowed_hosts)),
            Middleware(LimitBody),
        ],
        exception_handlers={HTTPException: error, 404: error},
    )
