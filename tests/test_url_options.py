"""Every option naming a URL is checked as the command line is read: one that is not an
http(s) URL with a host is a usage error (exit 2, docs/exit-codes.md) naming the option,
the URL never repeated (it may hold a key). Before, `attribute --base-url 'http://[::1'`
ran the case and ended it errored (exit 4, "Invalid IPv6 URL"), and each other command
failed its own way, later."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main

DEMO = str(Path(__file__).parent.parent / "src" / "faultfinder" / "data" / "demo_trace.json")
BAD = [
    ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
    ("http://127.0.0.1:99999/v1", "not a valid URL (Port out of range"),
    ("http://127.0.0.1:port/v1", "not a valid URL (its port is not a number)"),
    # Python splits a password with no host after it as the port, and its message quoted it.
    ("http://user:sk-Uq73Wd", "not a valid URL (its port is not a number)"),
    ("https://user:sk-Uq73Wd@/v1", "a URL that names no host"),
    ("127.0.0.1:8080/v1", "not an http:// or https:// URL"),
]


def commands(tmp: Path) -> list[tuple[str, list[str]]]:
    """(option, argv before the option's value, after it) for every command with one."""
    model = ["--model", "openai:gpt-4o"]
    return [
        ("--base-url", ["attribute", *model, "--base-url", "{}", DEMO]),
        ("--base-url", ["eval", *model, "--base-url", "{}", DEMO]),
        ("--base-url", ["graph", *model, "--base-url", "{}", DEMO]),
        ("--upstream", ["replay", "--upstream", "{}", str(tmp)]),
        ("--upstream", ["debug", "--upstream", "{}", str(tmp)]),
        ("--upstream", ["check", "--upstream", "{}", str(tmp)]),
        ("--upstream", ["verify-edit", "--upstream", "{}", str(tmp)]),
        ("--upstream", ["record", "--upstream", "{}", "--", "true"]),
        ("--upstream", ["proxy", "--upstream", "{}"]),
        ("--upstream", ["ui", "--upstream", "{}", str(tmp)]),
        ("--url", ["export", "--url", "{}", "--to", "otlp", DEMO, DEMO]),
        ("--langfuse-host", ["import", "--langfuse-host", "{}", "--from-langfuse", "t1"]),
        ("--api-upstream", ["record", "--api-upstream", "messages={}", "--upstream", "http://h"]),
    ]


@pytest.mark.parametrize(("url", "reason"), BAD)
def test_attribute_refuses_a_base_url_that_is_not_one_as_a_usage_error(
    url: str, reason: str
) -> None:
    result = CliRunner().invoke(
        main, ["attribute", DEMO, "--method", "echo", "--model", "openai:x", "--base-url", url]
    )
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert f"Error: Invalid value for '--base-url': {reason}" in result.output
    assert "sk-Uq73Wd" not in result.output


def test_every_url_option_of_every_command_is_checked(tmp_path: Path) -> None:
    url, reason = BAD[0]
    for option, argv in commands(tmp_path):
        args = [a.format(url) for a in argv]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert f"Error: Invalid value for '{option}'" in result.output, (args, result.output)
        assert reason in result.output, (args, result.output)


def test_an_empty_base_url_still_means_the_default_endpoint() -> None:
    # '' was the backend's default endpoint before the check, and stays so: a script
    # passing an unset "$BASE_URL" keeps working (shortlist calls no model).
    result = CliRunner().invoke(
        main, ["attribute", DEMO, "--method", "shortlist", "--cache", "none", "--base-url", ""]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "value",
    [
        "mesages=https://user:sk-Uq73Wd@api.example.com/v1",  # a misspelt API
        "https://api.example.com/v1?api-key=sk-Uq73Wd",  # the URL alone, API= forgotten
        "https://user:sk-Uq73Wd@api.example.com/v1",
        "messages=",  # no URL
    ],
)
def test_an_api_upstream_that_names_no_api_is_refused_without_repeating_it(value: str) -> None:
    """`--api-upstream` quoted its whole value when the part before '=' was no API (a
    misspelt name, or the URL given without `API=`), so the key in the URL reached the
    terminal and the logs the URL check keeps it out of. Now the message names the
    option and the APIs, and what was wrong, never the value."""
    argv = ["record", "--api-upstream", value, "--upstream", "http://h", "--", "true"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Invalid value for '--api-upstream'" in result.output
    assert "give API=URL with API one of chat, responses, messages" in result.output
    assert "sk-Uq73Wd" not in result.output and "api.example.com" not in result.output


@pytest.mark.usefixtures("loopback_requests")
@pytest.mark.parametrize("given", ["option", "variable"])
def test_blanks_around_a_base_url_are_not_part_of_it(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """The check read a URL without the blanks around it (a value pasted from a .env file,
    `OPENAI_BASE_URL="http://host/v1 "`) and let it through, while the request then went
    to the URL with them (`/v1%20/chat/completions`, a 404; a leading blank made it no
    URL at all): the failure of the first request the check is there to prevent. Now the
    URL used is the one checked."""
    import json

    from faultfinder.testing.fake_openai import FakeOpenAIServer
    from faultfinder.traces.loader import load_trace

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("FAULTFINDER_CACHE", "none")
    agent = load_trace(DEMO).steps[1].agent
    answer = json.dumps({"agent": agent, "step": 1, "reason": "wrong sum"})
    with FakeOpenAIServer(reply=answer) as server:
        url = f" {server.base_url} "
        argv = ["attribute", DEMO, "--method", "all-at-once", "--model", "openai:fake-model"]
        argv += ["--no-save"]
        if given == "option":
            argv += ["--base-url", url]
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", url)
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 0, result.output
        assert server.requests and all(r.path == "/v1/chat/completions" for r in server.requests)
