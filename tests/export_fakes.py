"""Loopback stand-ins for the servers `faultfinder export` writes to, answering as the real
ones do (their source, read for this):

- Langfuse ``POST /api/public/scores`` (web/src/pages/api/public/scores/index.ts,
  packages/shared/src/features/scores/interfaces/api/shared.ts, apiAuth.ts): basic auth
  (401 ``{"message": "Invalid credentials. Confirm that you've configured the correct
  host."}``), the body checked (exactly a ``traceId``, ``observationId`` only with it; a
  CATEGORICAL value is a string, NUMERIC a number; else 400 ``{"message": "Invalid request
  data", "error": [...]}``), the score stored under its ``id`` (``body.id ||
  randomUUID()``: the same id again replaces it), 200 ``{"id": ...}``. Scores are not
  checked against the traces (they may arrive before the trace).
- Phoenix ``POST /v1/span_annotations`` (src/phoenix/server/api/routers/v1/spans.py,
  annotations.py, bearer_auth.py): ``Authorization: Bearer`` when authentication is on
  (401), ``{"data": [...]}`` of annotations (``name``, ``annotator_kind`` LLM/CODE/HUMAN,
  ``span_id``, optional ``result``, ``metadata``, ``identifier`` default ``""``; else
  422), the name ``note`` refused (400); with ``?sync=true`` a span it does not hold is
  404 ``{"detail": "Spans with IDs ... do not exist."}``, and an annotation is upserted on
  (name, span, identifier), 200 ``{"data": [{"id": ...}]}``; without it, 200 ``{"data":
  []}`` and an unknown span is dropped.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from faultfinder.replay.httpserver import HttpServer, Request, Response, ServerThread, json_response

BAD_CREDENTIALS = "Invalid credentials. Confirm that you've configured the correct host."


@dataclass
class FakeLangfuse:
    public_key: str = "pk-lf-test"
    secret_key: str = "sk-lf-test"
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    answer: Callable[[Request], Response | None] | None = None
    """Answers first when it returns a response (an outage, a rate limit)."""

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        if self.answer is not None and (forced := self.answer(request)) is not None:
            return forced
        if request.path != "/api/public/scores":
            return json_response(404, {"message": "Not Found"})
        if request.method != "POST":
            return json_response(405, {"message": "Method not allowed"})
        expected = base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        if request.header("authorization") != f"Basic {expected}":
            return json_response(401, {"message": BAD_CREDENTIALS})
        try:
            body = json.loads(request.body)
        except ValueError:
            return json_response(400, {"message": "Invalid request data", "error": "json"})
        problem = _score_problem(body)
        if problem:
            return json_response(400, {"message": "Invalid request data", "error": [problem]})
        score_id = body.get("id") or str(uuid.uuid4())
        self.scores[score_id] = {**body, "id": score_id}
        return json_response(200, {"id": score_id})


def _score_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "expected an object"
    if not isinstance(body.get("name"), str) or not body["name"]:
        return "name: non-empty string required"
    if not body.get("traceId") or body.get("sessionId") or body.get("datasetRunId"):
        return "Provide exactly one of the following: traceId (with optional observationId)"
    kind, value = body.get("dataType"), body.get("value")
    if kind in ("CATEGORICAL", "TEXT", "CORRECTION") and not isinstance(value, str):
        return f"value: string expected for {kind}"
    if kind in ("NUMERIC", "BOOLEAN") and not isinstance(value, (int, float)):
        return f"value: number expected for {kind}"
    for key in ("id", "observationId", "comment"):
        if body.get(key) is not None and not isinstance(body[key], str):
            return f"{key}: string expected"
    return None


@dataclass
class FakePhoenix:
    spans: set[str] = field(default_factory=set)
    api_key: str | None = None
    annotations: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    answer: Callable[[Request], Response | None] | None = None

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        if self.answer is not None and (forced := self.answer(request)) is not None:
            return forced
        if self.api_key is not None and request.header("authorization") != (
            f"Bearer {self.api_key}"
        ):
            return json_response(401, {"detail": "Invalid token"})
        if request.path != "/v1/span_annotations":
            return json_response(404, {"detail": "Not Found"})
        if request.method != "POST":
            return json_response(405, {"detail": "Method Not Allowed"})
        try:
            data = json.loads(request.body)["data"]
            items = [_annotation(item) for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            return json_response(422, {"detail": [{"msg": str(exc)}]})
        if any(item["name"] == "note" for item in items):
            return json_response(400, {"detail": "The name 'note' is reserved."})
        if "sync=true" not in request.query.split("&"):
            for item in items:
                if item["span_id"] in self.spans:
                    self._upsert(item)
            return json_response(200, {"data": []})
        missing = {item["span_id"] for item in items} - self.spans
        if missing:
            return json_response(
                404, {"detail": f"Spans with IDs {', '.join(missing)} do not exist."}
            )
        ids = [self._upsert(item) for item in items]
        return json_response(200, {"data": [{"id": i} for i in ids]})

    def _upsert(self, item: dict[str, Any]) -> str:
        key = (item["name"], item["span_id"], item["identifier"])
        number = list(self.annotations).index(key) + 1 if key in self.annotations else None
        self.annotations[key] = item
        number = number or len(self.annotations)
        return base64.b64encode(f"SpanAnnotation:{number}".encode()).decode()


def _annotation(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise TypeError("annotation: object expected")
    for key in ("name", "span_id"):
        if not isinstance(item.get(key), str):
            raise TypeError(f"{key}: string required")
    if item.get("annotator_kind") not in ("LLM", "CODE", "HUMAN"):
        raise ValueError("annotator_kind: one of LLM, CODE, HUMAN")
    result = item.get("result")
    if result is not None:
        if not isinstance(result, dict) or set(result) - {"label", "score", "explanation"}:
            raise TypeError("result: {label, score, explanation}")
        if result.get("score") is not None and not isinstance(result["score"], (int, float)):
            raise TypeError("result.score: number")
    identifier = item.get("identifier", "")
    if not isinstance(identifier, str):
        raise TypeError("identifier: string")
    return {**item, "identifier": identifier}


@contextmanager
def serving(fake: FakeLangfuse | FakePhoenix) -> Iterator[str]:
    """The fake on a loopback port; yields its base URL."""

    async def factory() -> HttpServer:
        return await HttpServer(fake.handle).start()

    with ServerThread(factory) as server:
        yield server.url
