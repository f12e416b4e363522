"""Time `faultfinder collect` on one large export request (no network, no model).

Builds a request of ``--spans`` spans (``--traces`` traces of agent, chat and tool spans,
chat spans carrying a growing conversation as the GenAI conventions do) with the real
OpenTelemetry SDK and its OTLP encoder, then times what the collector does with it:
reading the request (the ``--raw`` copy's scrubbing included) and writing every trace.

    python bench/collect_redaction.py --spans 3000 [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import tempfile
import time
from pathlib import Path

from faultfinder.collect.collector import PROTOBUF, Collector, CollectorConfig
from faultfinder.replay.httpserver import Request


def build(spans: int, traces: int) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    per_trace = max(3, spans // traces)
    text = "The result of the analysis is in the table below; see https://example.com/docs. "
    for t in range(traces):
        history: list[dict[str, object]] = [
            {"role": "user", "parts": [{"type": "text", "content": f"Task {t}: " + text * 4}]}
        ]
        with tracer.start_as_current_span(
            "invoke_agent Team", attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            for i in range((per_trace - 1) // 2):
                agent = ("Planner", "Coder", "Reviewer")[i % 3]
                reply = {"role": "assistant", "parts": [{"type": "text", "content": text * 3}]}
                with tracer.start_as_current_span(
                    f"chat {agent}",
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.agent.name": agent,
                        "gen_ai.request.model": "gpt-4o",
                        "gen_ai.input.messages": json.dumps(history[-12:]),
                        "gen_ai.output.messages": json.dumps([reply]),
                        "gen_ai.usage.input_tokens": 900,
                        "gen_ai.usage.output_tokens": 120,
                    },
                ):
                    pass
                with tracer.start_as_current_span(
                    "execute_tool search",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.arguments": json.dumps({"q": f"step {i}", "n": 5}),
                        "gen_ai.tool.call.result": text * 2,
                    },
                ):
                    pass
                history.append(reply)
    provider.shutdown()
    return bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


async def run(body: bytes, out: Path, raw: bool) -> tuple[float, float]:
    config = CollectorConfig(out_dir=out, port=0, raw_file=out / "raw.jsonl" if raw else None)
    collector = Collector(config)
    out.mkdir(parents=True, exist_ok=True)
    request = Request("POST", "/v1/traces", [("content-type", PROTOBUF)], body)
    start = time.perf_counter()
    response = await collector.handle(request)
    read = time.perf_counter() - start
    assert response.status == 200, response.body
    start = time.perf_counter()
    collector.flush(force=True)
    assert not collector.errors, collector.errors
    return read, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=3000)
    parser.add_argument("--traces", type=int, default=10)
    parser.add_argument("--raw", action="store_true", help="keep a --raw copy too")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = parser.parse_args()
    body = build(args.spans, args.traces)
    with tempfile.TemporaryDirectory() as tmp:
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        read, write = asyncio.run(run(body, Path(tmp) / "out", args.raw))
        if profile is not None:
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    print(f"{len(body)} bytes: request read in {read:.2f} s, traces written in {write:.2f} s")


if __name__ == "__main__":
    main()
