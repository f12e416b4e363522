"""How much of ECHO's and CHIEF's prompts the Messages API's prompt cache would serve,
with the cache marks the Anthropic backend places (docs/llm.md, "Prompt caching").

Each method runs its normal path on the first ``--limit`` Who&When traces of each subset
through the LLM layer and the real Anthropic SDK, against the loopback fake upstream's
Messages endpoint with its prompt-cache stand-in (``faultfinder.testing.fake_messages.
PromptCache``: a marked block writes the prompt up to it, a request reads the longest
cached prefix ending at one of its block boundaries, prefixes under 1,024 tokens are not
kept; one cache per method for the whole run, as a session within the cache's lifetime
would see). Replies come from a stand-in that answers every method's formats with the
same text (a model's replies would change which later prompts are sent, and CHIEF's
prompts quote earlier replies); token counts are the fake's estimate, ~4 characters per
token. "billed" weighs the tokens as Anthropic prices a 5-minute cache: input 1, cache
writes 1.25, cache reads 0.1, against 1 for every prompt token without marks.

    python bench/cache_messages.py [--limit 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from _shared import WHO_AND_WHEN_DATA

from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, make_backend
from faultfinder.registry import create_method
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_messages import FakeMessages, PromptCache
from faultfinder.usage import Usage

DEFAULT_DATA = WHO_AND_WHEN_DATA

ANSWER = "Agent Name: A\nStep Number: 1\nReason for Mistake: a stand-in answer.\n" + json.dumps(
    {"agent_name": "A", "step_number": 1, "reason": "stand-in", "confidence": 0.5}
)


def stand_in(body: dict[str, Any]) -> Any:
    """One text in every method's formats; a submit call where tools are offered."""
    if body.get("tools"):
        arguments = {"agent": "A", "step": 1, "reason": "stand-in", "confidence": 0.5}
        return {"tool_calls": [{"name": "submit", "arguments": arguments}]}
    return ANSWER


async def run(method: str, traces: list[Any]) -> tuple[Usage, int]:
    with FakeOpenAIServer(stand_in) as server:
        server.mount(FakeMessages(prompt_cache=PromptCache()))
        llm = LLM(make_backend("anthropic:claude-bench", base_url=server.base_url))
        total = Usage()
        for trace in traces:
            result = await run_method(create_method(method), trace, llm)
            total = total + result.usage
        return total, len(server.requests_of("messages"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=10, help="traces per subset")
    parser.add_argument("--methods", default="echo,chief")
    args = parser.parse_args()
    print("| method | subset | cases | calls | prompt tokens / case | read | written | billed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        traces = load_dataset(args.data, DatasetOptions(subsets=[subset], limit=args.limit))
        for method in args.methods.split(","):
            usage, calls = asyncio.run(run(method, traces))
            prompt = usage.prompt_tokens
            read, written = usage.cached_prompt_tokens, usage.cache_write_prompt_tokens
            fresh = prompt - read - written
            billed = (fresh + 1.25 * written + 0.1 * read) / prompt if prompt else 0.0
            print(
                f"| `{method}` | {subset} | {len(traces)} | {calls} | {prompt / len(traces):,.0f} "
                f"| {read / prompt:.0%} | {written / prompt:.0%} | {billed:.0%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
