"""What the collector answers over OTLP/HTTP, in the encoding of the request.

The OTLP specification (OTLP/HTTP Response) wants the response in the request's
``Content-Type``: a protobuf request gets ``application/x-protobuf``, a JSON one
``application/json``. A success is an empty ``ExportTraceServiceResponse``; a failure (any
4xx or 5xx) carries a ``google.rpc.Status`` whose ``message`` says what was wrong. The
``code`` field is left out, as the specification allows: clients act on the HTTP status.
"""

from __future__ import annotations

from dataclasses import dataclass

from faultfinder.replay.httpserver import Request, Response, json_response

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Refusal:
    """A request the collector does not take: the HTTP status and why."""

    status: int
    message: str


def content_kind(request: Request | None) -> str:
    """The media type of a request's body, lower-cased, without parameters ("" when unknown)."""
    value = request.header("content-type") if request is not None else None
    return (value or "").split(";")[0].strip().lower()


def success(request: Request) -> Response:
    """200 with an empty ``ExportTraceServiceResponse`` (0 bytes in protobuf, ``{}`` in JSON)."""
    if content_kind(request) == PROTOBUF:
        return Response(200, [("content-type", PROTOBUF)], b"")
    return json_response(200, {})


def failure(refusal: Refusal, request: Request | None) -> Response:
    """``refusal`` as an OTLP/HTTP failure: a ``google.rpc.Status`` with its message, in
    protobuf for a protobuf request and in JSON otherwise (an unknown or unsupported
    content type, or a request whose head was never read).

    The protobuf form needs googleapis-common-protos (extra ``[otel]``, as reading protobuf
    does); without it a protobuf request is answered in JSON, labelled as such."""
    # A lone surrogate quoted from a request cannot be a protobuf string: escaped instead.
    message = refusal.message.encode("utf-8", "backslashreplace").decode("utf-8")
    if content_kind(request) == PROTOBUF:
        try:
            from google.rpc.status_pb2 import Status
        except ImportError:
            pass
        else:
            body = Status(message=message).SerializeToString()
            return Response(refusal.status, [("content-type", PROTOBUF)], body)
    return json_response(refusal.status, {"message": message})
