"""`debug` and `debug-report` end with DoVer's model usage. Its tokens include the calls
the response cache answered (`Usage.cached_calls`: "their tokens are still counted"), so
the line names those calls too, as `attribute` does ("1 call (0 cached)"): a second
`debug` run whose judge hit the cache printed fewer calls than the first for the same
tokens, with nothing saying why."""

from __future__ import annotations

from faultfinder.dover.report import DoverSummary, format_summary
from faultfinder.usage import Usage


def _usage_line(usage: Usage) -> str:
    lines = format_summary(DoverSummary(usage=usage)).splitlines()
    return next(line for line in lines if line.startswith("DoVer model usage:"))


def test_cached_calls_are_named_beside_the_tokens_they_count_in() -> None:
    # What the demo's debug run wrote: 3 calls made, 2 answered from the cache (the judge
    # asked the same question of three identical replays), one shared segmentation call.
    usage = Usage(prompt_tokens=2950, completion_tokens=161, calls=3, cached_calls=2)
    usage = usage + Usage(prompt_tokens=399, completion_tokens=25, calls=1)
    assert _usage_line(usage) == "DoVer model usage:   4 calls (2 cached), 3535 tokens"


def test_one_call_is_singular_and_no_cache_hit_says_0_cached() -> None:
    usage = Usage(prompt_tokens=10, completion_tokens=2, calls=1)
    assert _usage_line(usage) == "DoVer model usage:   1 call (0 cached), 12 tokens"
