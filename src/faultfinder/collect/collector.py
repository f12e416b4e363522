"""A live OTLP/HTTP trace collector: spans in, one canonical trace file per finished trace.

A program exports its spans with any OTLP/HTTP exporter to ``http://127.0.0.1:PORT``
(``OTEL_EXPORTER_OTLP_ENDPOINT``); the collector accepts ``POST /v1/traces`` in protobuf
(``application/x-protobuf``) or JSON (``application/json``), compressed with gzip or deflate
(the OpenTelemetry SDK's ``OTEL_EXPORTER_OTLP_COMPRESSION`` choices) or not, groups the
spans by trace id, and writes ``OUT/<trace id>.json`` once the trace is *finished*:

- its root span (a span without parent) has arrived — exporters send a span when it ends,
  so the root has ended — and
- no new span of that trace has arrived for ``quiet_seconds``.

On shutdown every trace still open is written too, finished or not (``metadata.complete``
says which). A span arriving after its trace was written rewrites the file with it.

Memory is bounded by time: a trace written finished whose last span came ``forget_seconds``
ago is dropped from memory; only its id and the secrets its spans revealed are kept. A span
of it arriving later cannot be merged (the spans are gone), so it is written, with any
others that follow it, to ``OUT/<trace id>.late-<n>.json`` (trace id
``collected/<trace id>/late-<n>``, ``metadata.late_for`` naming the trace); the complete
file is never overwritten by a fragment. So for a trace whose file is already in ``OUT``
when its first span of this run arrives (written by an earlier run: a verdict exported back
to the collector, a program exporting across a restart): its spans go to the first
``.late-<n>.json`` not on disk.

A trace that cannot be written (a full disk, say) is named in :attr:`Collector.errors` and
skipped; the others are still written. Ids are lower-case hex as ``faultfinder import``
reads them; one longer than ``MAX_NAME`` digits (not a valid OTLP id) gets a bounded file
name: its first 32 digits and a hash. JSON bodies are read as the importers read files
(``traces.io.parse_json``: nesting, lone surrogates... are a 400), and ``--raw`` lines are
scrubbed of credentials as the traces are (``_spans.keep_raw``). Every answer is in the
request's encoding, a refusal a ``google.rpc.Status`` (:mod:`.otlp_http`), and each refusal
is noted in :attr:`Collector.refusals` for the user to see.

It reuses the project's HTTP server (``replay.httpserver``): loopback bind by default, the
same request body limit as the proxy, and ``read_timeout`` for each of a client's waits (for
the next request on a kept-alive connection: closed; for a request's head or its body: 408),
so idle and slow clients are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultfinder.collect.otlp_http import PROTOBUF, Refusal, content_kind, failure, success
from faultfinder.errors import ConfigError, FaultfinderError
from faultfinder.redact import Redactor
from faultfinder.replay.httpserver import (
    LOOPBACK,
    MAX_BODY,
    HttpLimits,
    HttpServer,
    Request,
    Response,
    from_a_web_page,
)
from faultfinder.traces.importers._semconv import build_trace
from faultfinder.traces.importers._spans import Span, keep_raw, spans_from_otlp
from faultfinder.traces.importers.base import no_steps_reason
from faultfinder.traces.importers.otlp import decode_protobuf
from faultfinder.traces.io import check_value, parse_json, write_trace

MAX_NAME = 64
"""Longest trace id (hex digits) used as a file name as it is."""


def file_stem(trace_id: str) -> str:
    """The file name (without ``.json``) of a trace: its id, or for an id longer than
    ``MAX_NAME`` its first 32 digits and a hash of the whole id."""
    if len(trace_id) <= MAX_NAME:
        return trace_id
    return f"{trace_id[:32]}-{hashlib.sha256(trace_id.encode()).hexdigest()[:16]}"


def short_id(trace_id: str) -> str:
    """A trace id fit for a one-line message."""
    return trace_id if len(trace_id) <= 32 else f"{trace_id[:32]}... ({len(trace_id)} digits)"


@dataclass
class CollectorConfig:
    """How the collector listens and when it writes."""

    out_dir: Path
    """Directory receiving one canonical ``<trace id>.json`` per trace."""
    host: str = LOOPBACK
    """Interface to bind; loopback unless the user names another."""
    port: int = 4318
    """TCP port (4318 is OTLP/HTTP's default; 0 picks a free one)."""
    quiet_seconds: float = 2.0
    """A trace whose root span has arrived is finished after this long without new spans."""
    forget_seconds: float = 60.0
    """A finished trace, once written, leaves memory after this long without new spans (at
    least ``quiet_seconds``); a later span of it goes to a ``.late-<n>.json`` file."""
    read_timeout: float = 30.0
    """Seconds a client may take to start its next request (then it is disconnected), and
    then to send the request's head, and its body (408 after either)."""
    max_body: int = MAX_BODY
    """Largest accepted request body, as sent (413 above it) and after decompression (400)."""
    raw_file: Path | None = None
    """When set, every accepted export request is also appended to this file as one line of
    OTLP/JSON (what `faultfinder import` reads back), for debugging or sharing."""


@dataclass
class _Open:
    spans: list[Span] = field(default_factory=list)
    """Every span received, copies of one span id included: the trace builder keeps one
    and counts the others (``duplicate_spans``), keeping a differing copy's record, as an
    import of the same spans from a file does."""
    last_seen: float = 0.0
    has_root: bool = False
    written: bool = False
    dirty: bool = True
    late: int = 0
    """0 for a trace's own file; n for the n-th file of spans that came after it left
    memory (finished once quiet: its root came before)."""
    secrets: frozenset[str] = frozenset()
    """What the spans of the trace that left memory revealed, scrubbed here too."""


@dataclass
class _Gone:
    """A trace written and dropped from memory."""

    secrets: frozenset[str]
    late: int


def _inflate(wbits: int, data: bytes, limit: int, used: int, name: str) -> tuple[bytes, bytes]:
    """One compressed stream at the start of ``data`` (zlib's ``wbits`` say which format),
    decompressed with ``used`` bytes of ``limit`` already taken, and what follows it. A
    body that is not ``name``, is cut short or decompresses past the limit is a
    ValueError saying so."""
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(data, limit + 1 - used)
    except zlib.error as exc:
        raise ValueError(f"content-encoding {name}, but the body is not {name}: {exc}") from None
    if used + len(out) > limit:
        raise ValueError(f"body decompresses to more than {limit} bytes")
    if not d.eof:
        raise ValueError(f"content-encoding {name}, but the {name} body is truncated")
    return out, d.unused_data


class Collector:
    """Receives OTLP spans and writes finished traces. Use as ``async with``."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.traces: dict[str, _Open] = {}
        """The traces in memory: open, or written less than ``forget_seconds`` ago."""
        self.gone: dict[str, _Gone] = {}
        """The traces written and dropped from memory, by id."""
        self.written: list[Path] = []
        self.runs: set[str] = set()
        """Ids of the traces written whole (a late fragment's file is not one)."""
        self.warnings: list[str] = []
        """A trace written with no step (nothing in its spans is a model call, an agent or
        a tool), once per trace."""
        """Every file written, in order (a rewritten trace appears again)."""
        self.errors: list[str] = []
        """One line per trace that could not be written (or raw line not kept), in order."""
        self.rejected = 0
        self.refusals: list[str] = []
        """One line per request answered with an error status (what, and why), in order."""
        wait = config.read_timeout  # for the next request, then its head, then its body
        limits = HttpLimits(  # max_body: as sent; the decompressed size is checked here
            idle_timeout=wait, header_timeout=wait, body_timeout=wait, max_body=config.max_body
        )
        self._server = HttpServer(
            self.handle,
            config.host,
            config.port,
            limits,
            on_refusal=lambda status, why, request: self.refuse(Refusal(status, why), request),
        )
        self._sweeper: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    @property
    def url(self) -> str:
        return self._server.url

    async def start(self) -> Collector:
        try:
            self.config.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {self.config.out_dir}: {exc.strerror or exc}") from None
        if self.config.raw_file is not None:
            try:
                self.config.raw_file.open("a", encoding="utf-8").close()
            except OSError as exc:
                raise ConfigError(
                    f"--raw {self.config.raw_file}: cannot write: {exc.strerror or exc}"
                ) from None
        try:
            await self._server.start()
        except OSError as exc:
            raise FaultfinderError(
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror or exc}"
            ) from None
        self._sweeper = asyncio.create_task(self._sweep())
        return self

    async def close(self) -> None:
        """Stop listening and write every trace still open."""
        try:
            if self._sweeper is not None:
                self._sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sweeper
                self._sweeper = None
            await self._server.close()
        finally:
            self.flush(force=True)

    async def __aenter__(self) -> Collector:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def handle(self, request: Request) -> Response:
        try:
            answer = self._answer(request)
        except Exception as exc:  # a bug: still answered as OTLP wants, and shown
            answer = Refusal(500, f"internal error: {type(exc).__name__}: {_reason(exc)}")
        if isinstance(answer, Response):
            return answer
        return self.refuse(answer, request)

    def refuse(self, refusal: Refusal, request: Request | None) -> Response:
        """The answer to a refused request (as an OTLP failure in the request's encoding),
        noted in :attr:`refusals`: the exporter may log no more than the status. The HTTP
        server's own refusals (body too large, a slow client, a bad or oversized head, too
        many connections) come here too, ``request`` being None when its head was not read."""
        what = f"{request.method} {request.path}" if request is not None else "(request unread)"
        self.refusals.append(_printable(f"{refusal.status} {what}: {refusal.message}"))
        return failure(refusal, request)

    def _answer(self, request: Request) -> Response | Refusal:
        if request.path != "/v1/traces":
            return Refusal(404, f"unknown path {request.path}; use /v1/traces")
        if request.method != "POST":
            return Refusal(405, "use POST")
        refused = from_a_web_page(request, self.config.host)
        if refused is not None:  # a page in the user's browser, not an exporter
            self.rejected += 1
            return Refusal(*refused)
        kind = content_kind(request)
        try:
            body = self._decoded_body(request)
            if kind == PROTOBUF:
                payload: Any = decode_protobuf(body, path="request")
                check_value(payload, "request")
            elif kind in ("application/json", ""):
                payload = parse_json(body.decode("utf-8"), "request")
            else:
                return Refusal(415, f"unsupported content type {kind!r}")
            # an export of no spans (a 0-byte protobuf body, "{}"): valid, nothing to keep
            spans = spans_from_otlp(payload, path="request") if payload != {} else []
        except (FaultfinderError, ValueError) as exc:
            self.rejected += 1
            return Refusal(400, str(exc))
        self.add(spans)
        if self.config.raw_file is not None and payload != {}:
            self._keep_raw(self.config.raw_file, payload)
        return success(request)

    def _decoded_body(self, request: Request) -> bytes:
        encoding = (request.header("content-encoding") or "identity").strip().lower()
        if encoding == "identity":
            return request.body
        if encoding == "deflate":
            return self._inflated(request.body)
        if encoding != "gzip":
            raise ValueError(
                f"unsupported content encoding {encoding!r}; use gzip, deflate or none"
            )
        out, data = bytearray(), request.body
        while True:  # one gzip member after another (RFC 1952), all bounded together
            piece, data = _inflate(
                16 + zlib.MAX_WBITS, data, self.config.max_body, len(out), "gzip"
            )
            out += piece
            if not data:
                return bytes(out)

    def _inflated(self, body: bytes) -> bytes:
        """A ``content-encoding: deflate`` body, bounded by ``max_body``: the zlib format
        (RFC 1950, what HTTP names deflate and the OpenTelemetry SDK sends), or the raw
        deflate stream some clients send under that name."""
        zlib_header = len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0
        wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
        return _inflate(wbits, body, self.config.max_body, 0, "deflate")[0]

    def _keep_raw(self, raw_file: Path, payload: Any) -> None:
        """Append one request to the ``--raw`` file, credentials removed. A failure is
        reported, never fatal: the spans are already collected."""
        try:
            line = json.dumps(keep_raw(payload), separators=(",", ":"))
            with raw_file.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except (OSError, ValueError) as exc:
            self.errors.append(f"--raw {raw_file}: request not kept: {_reason(exc)}")

    def add(self, spans: list[Span]) -> None:
        now = time.monotonic()
        for span in spans:
            entry = self.traces.get(span.trace_id)
            if entry is None:
                entry = self._open(span.trace_id)
                self.traces[span.trace_id] = entry
            entry.spans.append(span)
            entry.last_seen = now
            entry.dirty = True
            if span.parent_id is None:
                entry.has_root = True
        self.changed.set()

    def _open(self, trace_id: str) -> _Open:
        """The entry of a trace not in memory: its own file, or the next free late file
        when its spans are gone from memory or its file is already on disk (written by an
        earlier run of the collector, whose spans this run never had: a verdict exported
        back with ``faultfinder export --to otlp``, a program still running across a
        restart). A file on disk is never overwritten by a trace this run only partly holds."""
        gone = self.gone.get(trace_id)
        stem = self.config.out_dir / file_stem(trace_id)
        if gone is None and not Path(f"{stem}.json").exists():
            return _Open()
        late = 1 if gone is None else gone.late + 1
        while Path(f"{stem}.late-{late}.json").exists():
            late += 1
        return _Open(late=late, secrets=frozenset() if gone is None else gone.secrets)

    def flush(self, *, force: bool = False) -> list[Path]:
        """Write the traces that are finished (all open ones when ``force``)."""
        now = time.monotonic()
        out = []
        forget = max(self.config.forget_seconds, self.config.quiet_seconds)
        for trace_id, entry in list(self.traces.items()):
            idle = now - entry.last_seen
            if not entry.dirty:
                if entry.written and not force and idle >= forget:
                    self._forget(trace_id, entry)
                continue
            finished = (entry.has_root or entry.late > 0) and idle >= self.config.quiet_seconds
            if not (finished or force):
                continue
            try:
                out.append(self._write(trace_id, entry, complete=entry.has_root))
            except Exception as exc:  # one trace that cannot be written must not stop the rest
                entry.dirty = False  # retried when a new span of it arrives
                self.errors.append(
                    f"cannot write trace {short_id(trace_id)}: {_reason(exc)}; skipped"
                )
        return out

    def _forget(self, trace_id: str, entry: _Open) -> None:
        """Drop a written trace's spans, keeping its id and the secrets they revealed.

        Learned here, not taken from the last write: ``build_trace`` keeps what it learns to
        itself, and spans a rewrite failed to take in (a full disk) are held here too, but
        in no file; a late span may quote what they revealed."""
        redactor = Redactor(entry.secrets)
        redactor.learn_data([(s.attributes, s.resource) for s in entry.spans])
        self.gone[trace_id] = _Gone(frozenset(redactor.secrets), entry.late)
        del self.traces[trace_id]

    def _write(self, trace_id: str, entry: _Open, *, complete: bool) -> Path:
        late = f".late-{entry.late}" if entry.late else ""
        target = self.config.out_dir / f"{file_stem(trace_id)}{late}.json"
        trace = build_trace(
            list(entry.spans),
            path=target,
            fmt="otlp-collector",
            trace_id=f"collected/{trace_id}{late.replace('.', '/')}",
            secrets=entry.secrets,
        )
        trace.metadata["complete"] = complete and not entry.late
        if entry.late:
            trace.metadata["late_for"] = f"collected/{trace_id}"
        write_trace(trace, target)
        entry.dirty = False
        if not entry.late:
            if not trace.steps and not entry.written:
                self.warnings.append(f"{target} has no steps: {no_steps_reason(trace)}")
            self.runs.add(trace_id)
        entry.written = True
        self.written.append(target)
        return target

    async def _sweep(self) -> None:
        interval = max(0.05, min(0.5, self.config.quiet_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            self.flush()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _printable(text: str, limit: int = 300) -> str:
    """``text`` fit for one line of a terminal: control characters (a client's bytes may
    carry escape sequences) replaced, and bounded."""
    line = "".join(c if c.isprintable() else "?" for c in text)
    return line if len(line) <= limit else line[:limit] + "..."
