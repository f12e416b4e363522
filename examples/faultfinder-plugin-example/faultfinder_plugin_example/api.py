"""plainchat: the PlainChat wire format (plainchat.md) for the recording proxy.

With this adapter installed, ``faultfinder record`` (and ``proxy``, ``replay``, ``debug``)
records a program's PlainChat calls as steps, and replays them, as it does OpenAI's and
Anthropic's. The adapter translates PlainChat's request and reply to and from the
canonical call (a Chat Completions-shaped request and one assistant message); matching,
edits, DoVer, the importers and the UI need nothing else. The contract is
``faultfinder.replay.apis.base.WireAdapter``; ``AdapterBase`` gives what is not written
here (requests handled by path, no chained requests, OpenAI's error body).
"""

from __future__ import annotations

import copy
from typing import Any

from faultfinder.replay.apis import AdapterBase, CanonicalReply, Chains, SSEEvent, encode_sse
from faultfinder.replay.apis.base import edited_id

FINISH = {"end": "stop", "length": "length"}


class _NoStream:
    """PlainChat has no streams (``is_stream`` is always False), so the proxy never asks
    for this; the contract wants an accumulator all the same."""

    finished = False

    def add(self, event: SSEEvent) -> None:
        return None

    def result(self) -> dict[str, Any] | None:
        return None


class PlainChatAdapter(AdapterBase):
    """PlainChat: ``POST /v1/plainchat/generate``."""

    name = "plainchat"  # must be the entry point's name: recorded calls carry it
    path = "/plainchat/generate"  # a path of its own: built-in adapters are asked first
    overridable = frozenset({"temperature", "max_tokens"})  # what a live call may override

    # --- requests ------------------------------------------------------------------

    def is_stream(self, body: dict[str, Any]) -> bool:
        return False

    def canonical_request(self, body: dict[str, Any], chains: Chains) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if body.get("system"):
            messages.append({"role": "system", "content": str(body["system"])})
        for turn in body.get("turns") or []:
            if isinstance(turn, dict):
                role = "assistant" if turn.get("role") == "model" else "user"
                messages.append({"role": role, "content": str(turn.get("text", ""))})
        canonical: dict[str, Any] = {"model": body.get("model"), "messages": messages}
        for key in ("max_tokens", "temperature", "stop"):
            if key in body:
                canonical[key] = body[key]
        return canonical

    def rewrite_tool_result(
        self, body: dict[str, Any], call_id: str, content: str
    ) -> dict[str, Any] | None:
        return None  # PlainChat has no tools

    def edit_input(self, body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
        changed = copy.deepcopy(body)
        turns = [t for t in changed.get("turns") or [] if isinstance(t, dict)]
        users = [i for i, t in enumerate(turns) if t.get("role") == "user"]
        if mode == "append-user" or not users:
            turns.append({"role": "user", "text": text})
        else:
            turns[users[-1]] = {**turns[users[-1]], "text": text}
        changed["turns"] = turns
        return changed

    # --- replies -------------------------------------------------------------------

    def reply_ok(self, payload: Any) -> bool:
        return isinstance(payload, dict) and isinstance(payload.get("text"), str)

    def canonical_reply(self, response: dict[str, Any]) -> CanonicalReply:
        tokens = response.get("tokens")
        if not isinstance(tokens, dict):
            tokens = {}
        stop = response.get("stop")
        return CanonicalReply(
            message={"role": "assistant", "content": response.get("text")},
            finish_reason=FINISH.get(str(stop), stop),
            model=response.get("model"),
            prompt_tokens=tokens.get("in"),
            completion_tokens=tokens.get("out"),
            reply_id=response.get("id"),
        )

    def with_reply(self, response: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(response) if response else {}
        out["text"] = str(message.get("content") or "")
        out["stop"] = "end"
        out["id"] = edited_id(out, "pc-faultfinder")
        return out

    # --- streams (none) ------------------------------------------------------------

    def accumulator(self) -> _NoStream:
        return _NoStream()

    def synthesise(self, response: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        return [encode_sse(response)]  # never asked: no request is a stream

    # --- the program's environment -------------------------------------------------

    def client_env(self, proxy_url: str) -> dict[str, str]:
        # What `record` sets for the program so its PlainChat client talks to the proxy.
        return {"PLAINCHAT_BASE_URL": proxy_url + "/v1"}

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}  # a key from --api-key-env goes upstream in this header
