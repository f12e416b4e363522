"""The per-API upstreams a recording keeps in meta.json, and the rules a replay applies to
them (the CLI end to end is in tests/test_live_api_upstreams.py): --trust-run uses them,
--api-upstream wins, an API recorded at an upstream of its own is never sent to another
one's, credentials never reach the file, and an old meta.json reads as having none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultfinder.errors import ConfigError
from faultfinder.redact import Redactor
from faultfinder.replay.recorder import RunMeta, read_meta, write_meta
from faultfinder.replay.trust import (
    misrouted_apis,
    replay_upstream,
    replay_upstreams,
    require_api_upstreams,
)

OPENAI = "http://127.0.0.1:8001/v1"
ANTHROPIC = "http://127.0.0.1:8002/v1"
LOCAL = "http://127.0.0.1:8003/v1"


def two_providers() -> RunMeta:
    return RunMeta(run_id="r", upstream=OPENAI, upstreams={"messages": ANTHROPIC})


def test_an_old_meta_without_the_field_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"run_id": "old", "upstream": OPENAI}))
    meta = read_meta(tmp_path)
    assert meta.upstreams == {}
    assert misrouted_apis(meta, LOCAL, {}) == {}


def test_the_field_is_written_with_credentials_cut(tmp_path: Path) -> None:
    meta = RunMeta(
        run_id="r",
        upstream=OPENAI,
        upstreams={"messages": "https://ff:pass-word-123@api.example/v1?api_key=sk-secret-99"},
    )
    write_meta(tmp_path, meta, Redactor(["sk-program-key-42"]))
    text = (tmp_path / "meta.json").read_text(encoding="utf-8")
    assert "pass-word-123" not in text and "sk-secret-99" not in text
    (url,) = read_meta(tmp_path).upstreams.values()
    assert url == "https://[REDACTED]@api.example/v1?api_key=[REDACTED]"
    # Such a URL cannot be used as it stands: --trust-run asks for it again.
    with pytest.raises(ConfigError, match="pass --api-upstream messages=URL"):
        replay_upstreams(read_meta(tmp_path), {}, trust_run=True)


def test_trust_run_uses_the_recorded_ones_and_the_command_line_wins() -> None:
    meta = two_providers()
    assert replay_upstreams(meta, {}, trust_run=False) == {}
    assert replay_upstreams(meta, {}, trust_run=True) == {"messages": ANTHROPIC}
    assert replay_upstreams(meta, {"messages": LOCAL}, trust_run=True) == {"messages": LOCAL}
    assert replay_upstreams(meta, {"chat": LOCAL}, trust_run=True) == {
        "messages": ANTHROPIC,
        "chat": LOCAL,
    }


@pytest.mark.parametrize(
    ("upstream", "upstreams", "misrouted"),
    [
        (OPENAI, {}, {"messages": ANTHROPIC}),  # the Anthropic key would go to OpenAI
        (LOCAL, {"chat": LOCAL}, {"messages": ANTHROPIC}),  # another API's option is no help
        (OPENAI, {"messages": LOCAL}, {}),  # named here
        (ANTHROPIC + "/", {}, {}),  # --upstream is where Messages went
        (None, {}, {}),  # no upstream at all: require_upstream's error
    ],
)
def test_an_api_recorded_at_its_own_upstream(
    upstream: str | None, upstreams: dict[str, str], misrouted: dict[str, str]
) -> None:
    assert misrouted_apis(two_providers(), upstream, upstreams) == misrouted


def test_an_api_recorded_with_the_main_upstream_follows_upstream() -> None:
    """An --api-upstream equal to --upstream at record time changed nothing: that API
    follows --upstream wherever the replay points it, as every other API does."""
    meta = RunMeta(run_id="r", upstream=OPENAI, upstreams={"messages": OPENAI + "/"})
    assert misrouted_apis(meta, LOCAL, {}) == {}


def test_the_refusal_names_the_api_and_the_option() -> None:
    with pytest.raises(ConfigError) as refused:
        require_api_upstreams(two_providers(), OPENAI, {})
    message = str(refused.value)
    assert "\n" not in message  # verify-edit shows the first line only
    assert f"program's messages calls (and its key for them) to --upstream {OPENAI!r}" in message
    assert f"messages -> {ANTHROPIC!r}" in message
    assert "pass --api-upstream messages=URL (or --trust-run" in message
    require_api_upstreams(two_providers(), OPENAI, {"messages": ANTHROPIC})


def test_a_recorded_main_upstream_with_credentials_cut_is_not_trusted() -> None:
    meta = RunMeta(run_id="r", upstream="https://[REDACTED]@api.example/v1")
    with pytest.raises(ConfigError, match="pass --upstream URL"):
        replay_upstream(meta, None, trust_run=True)
    assert replay_upstream(meta, LOCAL, trust_run=True) == LOCAL
