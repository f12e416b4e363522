"""Helpers for testing and benchmarking faultfinder without a real model endpoint."""

from faultfinder.testing.fake_openai import FakeOpenAIServer, RecordedRequest, ReplyError

__all__ = ["FakeOpenAIServer", "RecordedRequest", "ReplyError"]
