"""The loopback fake's OpenAI Responses endpoint (``POST /v1/responses``), mounted by
:class:`faultfinder.testing.FakeOpenAIServer`.

It answers as the real API does in what programs rely on: ``instructions`` and ``input``
items in, a ``response`` object out (``reasoning``, ``message`` and ``function_call``
output items, ids ``resp_``/``msg_``/``fc_``/``rs_``, usage as ``input_tokens`` /
``output_tokens``); ``stream: true`` gives named events with sequence numbers, text in
several deltas, each event its own write. ``previous_response_id`` continues a stored
response; responses are stored unless the request says ``store: false`` (and can be
fetched again: ``GET /v1/responses/<id>``), and a reference to one the server does not
hold is refused (400), as the real API does.

Background mode (``background: true``, not streamed) answers at once with the response
``queued`` and no output; each ``GET /v1/responses/<id>`` then says ``in_progress`` until
:attr:`FakeResponses.background_polls` polls have been answered, and the next gives the
completed response. ``POST /v1/responses/<id>/cancel`` makes a pending one ``cancelled``
(cancelling again returns that final object). A background request with ``store: false``
is refused (400): the API keeps background responses to be polled.

The reply callable gets the request in canonical chat form (``messages``, chat-style
``tools``), with ``api: "responses"`` and the body as sent under ``raw``; it may answer
with text, a spec (``text``, ``tool_calls``, ``reasoning``, ``usage``) or a complete
``response`` object (one with ``output``).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from faultfinder.llm.base import approx_token_count
from faultfinder.replay.apis.base import Chains
from faultfinder.replay.apis.responses import (
    ResponsesAdapter,
    function_call_item,
    message_item,
    response_events,
    response_object,
)


class FakeResponses:
    """``POST /v1/responses`` for the fake server."""

    name = "responses"

    def __init__(self) -> None:
        self.stored = Chains()
        self.responses: dict[str, dict[str, Any]] = {}
        """Stored responses by id (``GET /v1/responses/<id>``)."""
        self._adapter = ResponsesAdapter()
        self._ids = itertools.count(1)
        self.background_polls = 1
        """How many polls of a background response answer ``in_progress`` before one
        answers it completed."""
        self._pending: dict[str, int] = {}
        """Background responses not completed yet: id -> polls left in progress."""
        self._background: set[str] = set()

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/responses")

    def check(self, body: dict[str, Any]) -> str | None:
        """Why the request is refused (400), or None."""
        previous = body.get("previous_response_id")
        if previous and str(previous) not in self.stored:
            return f"Previous response with id '{previous}' not found."
        if "input" not in body and not previous:
            return "Missing required parameter: 'input'."
        if body.get("background") and body.get("store", True) is False:
            return "Background mode requires store=true."
        return None

    def canonical(self, body: dict[str, Any]) -> dict[str, Any]:
        canonical = self._adapter.canonical_request(body, self.stored)
        canonical["raw"] = body
        return canonical

    def is_complete(self, value: Any) -> bool:
        return isinstance(value, dict) and "output" in value

    def build(
        self, body: dict[str, Any], spec: dict[str, Any], model: str, cached: int | None
    ) -> dict[str, Any]:
        """The ``response`` for ``spec``; stored for later ``previous_response_id``."""
        number = next(self._ids)
        text = str(spec.get("text") or "")
        output: list[dict[str, Any]] = []
        if spec.get("reasoning"):
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_fake_{number}",
                    "summary": [{"type": "summary_text", "text": str(spec["reasoning"])}],
                }
            )
        if text:
            output.append(message_item(f"msg_fake_{number}", text))
        for position, call in enumerate(spec.get("tool_calls") or []):
            arguments = call.get("arguments", {})
            output.append(
                function_call_item(
                    f"fc_fake_{number}_{position}",
                    call.get("id") or f"call_{number}_{position}",
                    call["name"],
                    arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
        response = response_object(body, f"resp_fake_{number}", body.get("model") or model, output)
        response["max_output_tokens"] = body.get("max_output_tokens")
        response["truncation"] = body.get("truncation", "disabled")
        usage = spec.get("usage", "auto")
        if usage == "auto":
            canonical = self._adapter.canonical_request(body, self.stored)
            prompt = approx_token_count(json.dumps(canonical.get("messages") or []))
            produced = approx_token_count(text + "".join(json.dumps(c) for c in output[1:]))
            usage = {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": min(cached or 0, prompt)},
                "output_tokens": produced,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + produced,
            }
        response["usage"] = usage
        self.remember(body, response)
        return response

    def remember(self, body: dict[str, Any], response: dict[str, Any]) -> None:
        if body.get("store", True) is not False:
            self._adapter.remember(self.stored, body, response)
            self.responses[str(response.get("id"))] = response

    def accepted(self, body: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        """What the create call answers: ``response`` itself, or, for a background
        request, the response ``queued`` (it completes as it is polled)."""
        if not body.get("background") or body.get("stream"):
            return response
        reply_id = str(response.get("id"))
        self._pending[reply_id] = self.background_polls
        self._background.add(reply_id)
        return self._unfinished(response, "queued")

    def retrieve(self, method: str, path: str) -> dict[str, Any] | None:
        """A stored response fetched by id (``GET /v1/responses/<id>``), or a background
        one cancelled (``POST /v1/responses/<id>/cancel``); None when neither."""
        parent, _, reply_id = path.rstrip("/").rpartition("/")
        if method == "POST" and reply_id == "cancel":
            parent, _, reply_id = parent.rpartition("/")
            if not parent.endswith("/responses") or reply_id not in self._background:
                return None
            if self._pending.pop(reply_id, None) is not None:
                self.responses[reply_id] = self._unfinished(self.responses[reply_id], "cancelled")
            return self.responses.get(reply_id)
        if method != "GET" or not parent.endswith("/responses"):
            return None
        left = self._pending.get(reply_id)
        if left is not None and reply_id in self.responses:
            if left > 0:
                self._pending[reply_id] = left - 1
                return self._unfinished(self.responses[reply_id], "in_progress")
            del self._pending[reply_id]
        return self.responses.get(reply_id)

    @staticmethod
    def _unfinished(response: dict[str, Any], status: str) -> dict[str, Any]:
        return {**response, "status": status, "output": [], "usage": None}

    def stream(self, response: dict[str, Any]) -> list[bytes]:
        """The events of ``response``, text and arguments in word-sized deltas."""
        words = 1
        for item in response.get("output") or []:
            for part in item.get("content") or []:
                words = max(words, len(str(part.get("text", "")).split()))
        return response_events(response, pieces=words)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": status,
            }
        }
