"""What `replay` says about live calls that failed, for programs on the real async SDKs
(Anthropic's Messages API and OpenAI's Responses API, streamed, with parallel tool calls)
against the loopback fake upstream:

- a live call the upstream never answered (unreachable) is listed as such, not as
  "-> None", and every try the SDK made is counted;
- a transient error the SDK retried (Anthropic's 529) is named, without the hint about
  --api-upstream, which explains calls sent to another provider's endpoint (404), not an
  overloaded upstream.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.testing import FakeOpenAIServer

MESSAGES_PROGRAM = """
import asyncio, sys
from anthropic import AsyncAnthropic
TOOLS = [{"name": "lookup", "input_schema": {"type": "object",
          "properties": {"q": {"type": "string"}}}}]
async def ask(client, messages):
    async with client.messages.stream(model="m", max_tokens=100, tools=TOOLS,
                                      system="You are the Researcher.",
                                      messages=messages) as stream:
        async for _ in stream:
            pass
        return await stream.get_final_message()
async def main():
    client = AsyncAnthropic()
    messages = [{"role": "user", "content": sys.argv[1]}]
    reply = await ask(client, messages)
    uses = [b for b in reply.content if b.type == "tool_use"]
    if uses:
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                              for b in reply.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                          "content": "fact " + u.input["q"]} for u in uses]},
        ]
        reply = await ask(client, messages)
    print("FINAL ANSWER:", "".join(b.text for b in reply.content if b.type == "text"))
asyncio.run(main())
"""

RESPONSES_PROGRAM = """
import asyncio, json, sys
from openai import AsyncOpenAI
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object",
          "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
async def ask(client, items):
    async with client.responses.stream(model="m", tools=TOOLS, input=items,
                                       instructions="You are the Researcher.") as events:
        async for _ in events:
            pass
        return await events.get_final_response()
async def main():
    client = AsyncOpenAI(max_retries=2)
    items = [{"role": "user", "content": sys.argv[1]}]
    reply = await ask(client, items)
    calls = [i for i in reply.output if i.type == "function_call"]
    if calls:
        items += [i.model_dump(exclude_none=True) for i in reply.output]
        items += [{"type": "function_call_output", "call_id": c.call_id,
                   "output": "fact " + json.loads(c.arguments)["q"]} for c in calls]
        reply = await ask(client, items)
    print("FINAL ANSWER:", reply.output_text)
asyncio.run(main())
"""


def researcher(body: dict[str, Any]) -> Any:
    """Two parallel lookups, then the answer once the results are back."""
    if body["messages"][-1].get("role") == "tool":
        return "answer 42"
    calls = [{"name": "lookup", "arguments": {"q": q}} for q in ("a", "b")]
    return {"text": "let me look", "tool_calls": calls}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def record(tmp_path: Path, upstream: FakeOpenAIServer, program: str) -> tuple[Path, list[str]]:
    command = [sys.executable, "-c", program, "task"]
    result = CliRunner().invoke(
        main,
        ["record", "--upstream", upstream.base_url, "--out", str(tmp_path), "--run-id", "r",
         "--quiet", "--", *command],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return tmp_path / "r", command


def test_a_retried_529_is_named_without_the_api_upstream_hint(
    tmp_path: Path, clean_env: None
) -> None:
    with FakeOpenAIServer(reply=researcher) as upstream:
        run_dir, command = record(tmp_path, upstream, MESSAGES_PROGRAM)
        upstream.fail_first, upstream.fail_status = 1, 529
        asked = len(upstream.requests)
        result = CliRunner().invoke(
            main,
            ["replay", str(run_dir), "--at", "0", "--upstream", upstream.base_url, "--quiet",
             "--", *command],
        )  # fmt: skip
        reached = len(upstream.requests) - asked
    assert result.exit_code == 0, result.output
    assert reached == 3  # the 529, the SDK's retry of it, the second step
    assert "live calls:  3 sent to the upstream" in result.stdout
    assert "POST /v1/messages (messages call) -> 529" in result.stderr
    assert "--api-upstream" not in result.stderr


def test_an_unreachable_upstream_is_said_so_and_every_try_counted(
    tmp_path: Path, clean_env: None
) -> None:
    with FakeOpenAIServer(reply=researcher) as upstream:
        run_dir, command = record(tmp_path, upstream, RESPONSES_PROGRAM)
    result = CliRunner().invoke(
        main,
        ["replay", str(run_dir), "--at", "1", "--upstream", "http://127.0.0.1:9/v1",
         "--quiet", "--", *command],
    )  # fmt: skip
    assert result.exit_code == 4, result.output  # the program failed: never 0
    tries = [line for line in result.stdout.splitlines() if "POST /v1/responses" in line]
    assert len(tries) == 3, result.stdout  # the first try and the SDK's 2 retries
    assert all(line.endswith("-> no answer (upstream unreachable)") for line in tries), tries
    assert "-> None" not in result.stdout
    assert "--api-upstream" not in result.stderr
