"""Credentials never reach an imported trace: OTLP resource and span attributes, JSON held
in string attributes, URLs with keys in the query or user info, Langfuse and Phoenix records.

Every planted secret starts with ``LEAK``; each test scans the whole written trace for it.
The names that count as secrets are decided in one place, ``faultfinder.redact``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.redact import REDACTED, Redactor, is_secret_field, is_secret_name
from faultfinder.traces.importers._common import is_credential_key, without_credentials
from faultfinder.traces.importers._spans import keep_raw
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

LEAK = re.compile(r"LEAK\d+")

SECRET_NAMES = [
    "api_key",
    "apiKey",
    "x-api-key",
    "X-Goog-Api-Key",
    "Authorization",
    "http.request.header.authorization",
    "Cookie",
    "set-cookie",
    "OPENAI_API_KEY",
    "openaiApiKey",
    "HF_TOKEN",
    "GITHUB_TOKEN",
    "token",
    "id_token",
    "accessToken",
    "x-auth-token",
    "client_secret",
    "clientSecret",
    "SECRET_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "LANGFUSE_SECRET_KEY",
    "db_password",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "Ocp-Apim-Subscription-Key",
    "private_key",
]

USAGE_AND_ORDINARY_NAMES = [
    "max_tokens",
    "max_completion_tokens",
    "gen_ai.request.max_tokens",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt",
    "llm.token_count.total",
    "token_count",
    "tokens",
    "total_tokens",
    "promptTokens",
    "completion_tokens_details",
    "gen_ai.server.time_to_first_token",
    "max_token",
    "eos_token",
    "token_type",
    "TOKENIZERS_PARALLELISM",
    "LANGFUSE_PUBLIC_KEY",
    "cache_key",
    "key",
    "secretary",
    "gen_ai.request.headers",
    "url.full",
    "service.name",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name) and is_credential_key(name)


@pytest.mark.parametrize("name", USAGE_AND_ORDINARY_NAMES)
def test_usage_and_ordinary_names_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name) and not is_credential_key(name)


@pytest.mark.parametrize("name", ["key", "sig", "signature", "X-Amz-Signature", "auth"])
def test_query_parameter_names(name: str) -> None:
    assert is_secret_name(name, loose=True)


def test_a_logprob_token_is_model_output() -> None:
    entry = {"token": " world", "logprob": -0.5, "bytes": [32]}
    assert not is_secret_field("token", entry)
    assert Redactor().data({"logprobs": {"content": [entry]}}) == {"logprobs": {"content": [entry]}}
    assert without_credentials([entry]) == [entry]
    assert is_secret_field("token", {"token": "x"})


def test_redactor_and_importers_agree() -> None:
    """One definition: what the Redactor hides, the importers drop, usage kept by both."""
    record = {
        "OPENAI_API_KEY": "LEAK1-abcdefgh",
        "nested": {"hfToken": "LEAK2-abcdefgh", "max_tokens": 7, "token_count": 3},
        "headers": [{"name": "X-Api-Key", "value": "LEAK3-abcdefgh"}],
        "attrs": [{"key": "GITHUB_TOKEN", "value": {"stringValue": "LEAK4-abcdefgh"}}],
        "echo": "the key was LEAK1-abcdefgh",
    }
    redacted = Redactor().data(record)
    dropped = without_credentials(record)
    for value in (redacted, dropped):
        assert not LEAK.search(json.dumps(value))
        assert value["nested"]["max_tokens"] == 7 and value["nested"]["token_count"] == 3
        assert value["echo"] == f"the key was {REDACTED}"
        assert value["attrs"] == [{"key": "GITHUB_TOKEN", "value": {"stringValue": REDACTED}}]
        assert value["headers"] == [{"name": "X-Api-Key", "value": REDACTED}]
    assert redacted["OPENAI_API_KEY"] == REDACTED
    assert "OPENAI_API_KEY" not in dropped and "hfToken" not in dropped["nested"]


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://host/models?key=LEAK1-abcdefgh", "https://host/models?key=[REDACTED]"),
        (
            "https://host/v1?api_key=LEAK1-abcdefgh&model=m",
            "https://host/v1?api_key=[REDACTED]&model=m",
        ),
        ("https://host/v1?token=LEAK1-abcdefgh#x", "https://host/v1?token=[REDACTED]#x"),
        (
            "https://acct.blob.core.windows.net/c/b?sv=2024&sig=LEAK1-abcdefgh",
            "https://acct.blob.core.windows.net/c/b?sv=2024&sig=[REDACTED]",
        ),
        ("https://user:LEAK1-abcdefgh@host/v1", "https://[REDACTED]@host/v1"),
        ("https://LEAK1-abcdefghijkl@github.com/o/r", "https://[REDACTED]@github.com/o/r"),
        (
            "https://app/cb#access_token=LEAK1-abcdefgh&state=s",
            "https://app/cb#access_token=[REDACTED]&state=s",
        ),
    ],
)
def test_credentials_in_urls(url: str, kept: str) -> None:
    assert Redactor().url(url) == kept
    assert Redactor().text(f"GET {url}, then stop.") == f"GET {kept}, then stop."
    secret = re.findall(r"LEAK1-[a-z]+", url)[0]
    assert without_credentials({"url.full": url, "other": secret}) == {
        "url.full": kept,
        "other": REDACTED,  # the learned secret, wherever else it appears
    }


def test_ordinary_urls_are_unchanged() -> None:
    for url in (
        "https://example.com/search?q=tokens&max_tokens=5&page=2",
        "https://medium.com/@author/post-1",
        "https://host:8443/v1/chat/completions",
    ):
        assert Redactor().text(url) == url
        assert keep_raw({"url.full": url}) == {"url.full": url}


# --- the audit's hostile OTLP file --------------------------------------------------------


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, list):
        return {
            "key": key,
            "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}},
        }
    return {"key": key, "value": {"stringValue": value}}


def hostile_otlp() -> dict[str, Any]:
    """One OTLP chat span with secrets in every place the audit found them, and more."""
    resource = {
        "service.name": "svc",
        "HF_TOKEN": "LEAK5-hfabcdefghij",
        "OPENAI_API_KEY": "LEAK6-openaiabcdef",
        "GITHUB_TOKEN": "LEAK7-githubabcdef",
    }
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.max_tokens": 100,
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.request.headers": '{"x-api-key":"LEAK3-headerabcdef","accept":"json"}',
        "gen_ai.request.extra": '[{"name":"Authorization","value":"Bearer LEAK8-bearerabcdef"}]',
        "url.full": "https://host/models?key=LEAK4-urlabcdefgh&alt=json",
        "server.url": "https://user:LEAK9-passwordabc@proxy.example/v1",
        "http.request.header.authorization": ["Bearer LEAK10-arrayabcdefgh"],
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "Say hi."}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Hi."}]}]
        ),
    }
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr(k, v) for k, v in resource.items()]},
                "scopeSpans": [
                    {
                        "scope": {"name": "x"},
                        "spans": [
                            {
                                "traceId": "0123456789abcdef0123456789abcdef",
                                "spanId": "0123456789abcdef",
                                "name": "chat gpt-4o",
                                "kind": 3,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000001000000000",
                                "attributes": [_attr(k, v) for k, v in attributes.items()],
                            }
                        ],
                    }
                ],
            }
        ]
    }


def check_clean(trace: Trace) -> None:
    """No planted secret anywhere; usage and request parameters kept."""
    written = trace.model_dump_json()
    assert not LEAK.findall(written), LEAK.findall(written)
    (step,) = [s for s in trace.steps if s.kind == "llm"]
    assert step.usage is not None and step.usage.prompt_tokens == 12
    assert step.request is not None and step.request["max_tokens"] == 100
    assert json.loads(step.request["headers"]) == {"x-api-key": REDACTED, "accept": "json"}
    assert step.model == "gpt-4o" and step.content == "Hi."


def test_audit_reproduction_through_the_cli(tmp_path: Path) -> None:
    source = tmp_path / "secrets2.otlp.json"
    source.write_text(json.dumps(hostile_otlp()))
    out = tmp_path / "sec2.json"
    result = CliRunner().invoke(main, ["import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not LEAK.findall(out.read_text())
    (trace,) = load_traces(out)
    check_clean(trace)
    written = json.loads(out.read_text())
    attrs = written["steps"][0]["metadata"]["source"]["attributes"]
    url = next(a for a in attrs if a["key"] == "url.full")
    assert url["value"] == {"stringValue": "https://host/models?key=[REDACTED]&alt=json"}
    (source_info,) = written["metadata"]["sources"]
    kept = {a["key"]: a["value"] for a in source_info["resource"]["resource"]["attributes"]}
    assert kept["service.name"] == {"stringValue": "svc"}
    assert kept["HF_TOKEN"] == kept["OPENAI_API_KEY"] == {"stringValue": REDACTED}


def test_secrets_in_what_the_steps_say_are_scrubbed(tmp_path: Path) -> None:
    """Key-shaped tokens, URL keys and secret-named fields of tool-call arguments in the
    messages themselves (not only in attributes): gone from the steps, the task and the
    final answer, as they are from the kept source records. The rest of the text stays."""
    doc = hostile_otlp()
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    # LEAK6 is the resource's OPENAI_API_KEY: a secret the attributes reveal, not key-shaped
    asked = "Fetch https://api.example/v1?api_key=LEAK21-urlkeyabcdef for me, LEAK6-openaiabcdef."
    said = [
        {"type": "text", "content": "Using sk-LEAK22abcdefghijklmnopqrst and done."},
        {"type": "tool_call", "id": "c1", "name": "fetch",
         "arguments": {"api_key": "LEAK23-toolargabcdef", "q": "weather"}},
    ]  # fmt: skip
    for item in span["attributes"]:
        if item["key"] == "gen_ai.input.messages":
            parts = [{"type": "text", "content": asked}]
            item["value"]["stringValue"] = json.dumps([{"role": "user", "parts": parts}])
        if item["key"] == "gen_ai.output.messages":
            item["value"]["stringValue"] = json.dumps([{"role": "assistant", "parts": said}])
    source = tmp_path / "said.otlp.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "said.json"
    result = CliRunner().invoke(main, ["import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not LEAK.findall(out.read_text()), LEAK.findall(out.read_text())
    (trace,) = load_traces(out)
    (step,) = [s for s in trace.steps if s.kind == "llm"]
    assert step.content == f"Using {REDACTED} and done."
    assert json.loads(step.tool_calls[0].arguments) == {"api_key": REDACTED, "q": "weather"}
    assert trace.task == f"Fetch https://api.example/v1?api_key={REDACTED} for me, {REDACTED}."


# --- real OTLP from the OpenTelemetry SDK -------------------------------------------------


def sdk_export() -> Any:
    """The hostile span made with the real OpenTelemetry SDK and encoded by its OTLP
    exporter's encoder (an ExportTraceServiceRequest message)."""
    pytest.importorskip("opentelemetry.sdk.trace")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.common")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    doc = hostile_otlp()
    resource_spans = doc["resourceSpans"][0]
    span = resource_spans["scopeSpans"][0]["spans"][0]

    def plain(attrs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for a in attrs:
            value = a["value"]
            if "intValue" in value:
                out[a["key"]] = int(value["intValue"])
            elif "arrayValue" in value:
                out[a["key"]] = [v["stringValue"] for v in value["arrayValue"]["values"]]
            else:
                out[a["key"]] = value["stringValue"]
        return out

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(plain(resource_spans["resource"]["attributes"]))
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("hostile.test")
    with tracer.start_as_current_span("chat gpt-4o", attributes=plain(span["attributes"])):
        pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def test_real_sdk_protobuf_export(tmp_path: Path) -> None:
    message = sdk_export()
    path = tmp_path / "export.pb"
    path.write_bytes(message.SerializeToString())
    assert b"LEAK6" in path.read_bytes()  # the secrets really are in the export
    (trace,) = load_traces(path)
    check_clean(trace)
    assert trace.metadata["service"] == "svc"


def test_real_sdk_json_export(tmp_path: Path) -> None:
    from google.protobuf.json_format import MessageToDict

    message = sdk_export()
    path = tmp_path / "export.otlp.json"
    path.write_text(json.dumps(MessageToDict(message)))
    assert "LEAK5" in path.read_text()
    (trace,) = load_traces(path)
    check_clean(trace)


# --- Langfuse and Phoenix ------------------------------------------------------------------


def test_langfuse_observations(tmp_path: Path) -> None:
    generation = {
        "id": "o2",
        "traceId": "t-1",
        "parentObservationId": None,
        "type": "GENERATION",
        "name": "chat",
        "startTime": "2025-01-01T00:00:02Z",
        "endTime": "2025-01-01T00:00:02.5Z",
        "input": [{"role": "user", "content": "Say hi."}],
        "output": {"role": "assistant", "content": "Hi."},
        "model": "gpt-4o",
        "usageDetails": {"input": 12, "output": 3},
        "modelParameters": {"max_tokens": 100, "api_key": "LEAK1-paramabcdef"},
        "metadata": {
            "attributes": {
                "gen_ai.request.headers": '{"Authorization":"Bearer LEAK2-headerabcdef"}',
                "url.full": "https://host/models?api_key=LEAK3-urlabcdefgh",
                "http.request.header.x-api-key": "LEAK4-plainabcdef",
            },
            "resourceAttributes": {
                "service.name": "svc",
                "HF_TOKEN": "LEAK5-hfabcdefghij",
                "OPENAI_API_KEY": "LEAK6-openaiabcdef",
            },
        },
    }
    path = tmp_path / "observations.json"
    path.write_text(json.dumps({"data": [generation], "meta": {"cursor": None}}))
    (trace,) = load_traces(path)
    assert trace.source.format == "langfuse"
    written = trace.model_dump_json()
    assert not LEAK.findall(written), LEAK.findall(written)
    (step,) = trace.steps
    assert step.request is not None and step.request["max_tokens"] == 100
    assert "api_key" not in step.request
    assert step.usage is not None and step.usage.prompt_tokens == 12


def test_phoenix_spans_nested_and_dataframe(tmp_path: Path) -> None:
    params = {"temperature": 0, "max_tokens": 100, "api_key": "LEAK1-paramabcdef"}
    attributes: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.invocation_parameters": json.dumps(params),
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Say hi.",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Hi.",
        "llm.token_count.prompt": 12,
        "llm.token_count.completion": 3,
        "url.full": "https://user:LEAK2-passwordabc@host/v1?token=LEAK3-tokenabcdef",
        "http.request.header.authorization": "Bearer LEAK4-bearerabcdef",
        "OPENAI_API_KEY": "LEAK5-openaiabcdef",
    }
    nested = {
        "name": "ChatCompletion",
        "context": {"trace_id": "a" * 32, "span_id": "b" * 16},
        "span_kind": "LLM",
        "parent_id": None,
        "start_time": "2025-01-01T00:00:01+00:00",
        "end_time": "2025-01-01T00:00:02+00:00",
        "status_code": "OK",
        "status_message": "",
        "attributes": attributes,
        "events": [],
    }
    frame_row = {
        "name": "ChatCompletion",
        "context.trace_id": "a" * 32,
        "context.span_id": "b" * 16,
        "span_kind": "LLM",
        "parent_id": None,
        "start_time": "2025-01-01T00:00:01+00:00",
        "end_time": "2025-01-01T00:00:02+00:00",
        "status_code": "OK",
        **{f"attributes.{k}": v for k, v in attributes.items()},
    }
    for name, doc in (("rest.json", [nested]), ("frame.jsonl", frame_row)):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        (trace,) = load_traces(path, format="phoenix")
        written = trace.model_dump_json()
        assert not LEAK.findall(written), (name, LEAK.findall(written))
        (step,) = trace.steps
        assert step.request is not None and step.request["max_tokens"] == 100
        assert step.usage is not None and step.usage.prompt_tokens == 12


def test_a_secret_only_a_dropped_copy_of_a_span_revealed_is_scrubbed(tmp_path: Path) -> None:
    # An exporter sent one span twice: the first copy's resource holds the key, the second
    # (more attributes, so the one kept) quotes it. The dropped copy still teaches the key.
    def copy(resource: dict[str, str], attributes: dict[str, str]) -> dict[str, Any]:
        span: dict[str, Any] = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat gpt-4o"}
        span["attributes"] = [_attr(k, v) for k, v in attributes.items()]
        return {
            "resource": {"attributes": [_attr(k, v) for k, v in resource.items()]},
            "scopeSpans": [{"spans": [span]}],
        }

    chat = {"gen_ai.operation.name": "chat"}
    key = "LEAK11-dropcopyabcdef"
    reply = [{"role": "assistant", "parts": [{"type": "text", "content": f"key: {key}"}]}]
    said = {**chat, "gen_ai.output.messages": json.dumps(reply), "x.n": "1"}
    source = tmp_path / "dup.otlp.json"
    doc = {"resourceSpans": [copy({"service.api_key": key}, chat)]}
    doc["resourceSpans"].append(copy({"service.name": "svc"}, said))
    source.write_text(json.dumps(doc))
    (trace,) = load_traces(source)
    assert trace.metadata["duplicate_spans"] == 1
    assert trace.steps[0].content == "key: [REDACTED]"
    assert not LEAK.findall(trace.model_dump_json())


def test_a_secret_in_a_mapping_key_is_scrubbed_and_no_entry_is_lost(tmp_path: Path) -> None:
    """A key is text a program wrote too: tool-call arguments keyed by a token, or by a URL
    with a key in it, lose the secret and keep every entry (two keys that scrub alike
    both stay)."""
    redactor = Redactor(["LEAK25-knownvalue1"])
    data = {
        "sk-LEAK24abcdefghijklmnopqrst": 1,
        "sk-LEAK26abcdefghijklmnopqrst": 2,
        "https://host/v1?key=LEAK27-urlkeyabcdef": 3,
        "by LEAK25-knownvalue1": 4,
        "q": "weather",
    }
    assert redactor.data(data) == {
        REDACTED: 1,
        f"{REDACTED} #2": 2,
        f"https://host/v1?key={REDACTED}": 3,
        f"by {REDACTED}": 4,
        "q": "weather",
    }
    doc = hostile_otlp()
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    said = [
        {"type": "tool_call", "id": "c1", "name": "fetch",
         "arguments": {"sk-LEAK24abcdefghijklmnopqrst": "x", "q": "weather"}},
    ]  # fmt: skip
    for item in span["attributes"]:
        if item["key"] == "gen_ai.output.messages":
            item["value"]["stringValue"] = json.dumps([{"role": "assistant", "parts": said}])
    source = tmp_path / "keys.otlp.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "keys.json"
    result = CliRunner().invoke(main, ["import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not LEAK.findall(out.read_text()), LEAK.findall(out.read_text())
    (trace,) = load_traces(out)
    (step,) = [s for s in trace.steps if s.kind == "llm"]
    assert json.loads(step.tool_calls[0].arguments) == {REDACTED: "x", "q": "weather"}


def test_a_secret_in_an_agent_description_is_scrubbed(tmp_path: Path) -> None:
    """The OTel GenAI instrumentation of the OpenAI Agents SDK writes the agent's
    description (``gen_ai.agent.description``, an instrumentor option) on its spans, and the
    roster takes it. A key-shaped token in it, and a value only the resource's secret-named
    attribute shows is a secret, are scrubbed from the roster as from the steps."""
    fixture = Path(__file__).parent / "fixtures" / "otel" / "openai-agents-genai.otlp.jsonl"
    said = "OpenAI Agents instrumentation"
    planted = f"{said}, key sk-LEAK31abcdefghijklmnopqrst, gateway LEAK32-gatewayabcdef"
    text = fixture.read_text()
    assert f'"gen_ai.agent.description","value":{{"stringValue":"{said}"}}' in text
    lines = []
    for line in text.replace(f'"stringValue":"{said}"', f'"stringValue":"{planted}"').splitlines():
        request = json.loads(line)
        for rs in request["resourceSpans"]:
            rs["resource"]["attributes"].append(_attr("GATEWAY_TOKEN", "LEAK32-gatewayabcdef"))
        lines.append(json.dumps(request))
    source = tmp_path / "described.otlp.jsonl"
    source.write_text("\n".join(lines))
    (trace,) = load_traces(source)
    assert [(a.name, a.description) for a in trace.agents] == [
        (name, f"{said}, key {REDACTED}, gateway {REDACTED}") for name in ("Triage", "Math tutor")
    ]
    assert not LEAK.findall(trace.model_dump_json()), LEAK.findall(trace.model_dump_json())
