"""Tests never reach a real model: the global switch forbids it (smoke tests re-allow it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faultfinder.llm import base


@pytest.fixture(autouse=True, scope="session")
def _session_results_store_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The results store of what runs before any test's own fixtures (a module-scoped
    fixture running `attribute`): a file of this session, not the working directory."""
    with pytest.MonkeyPatch.context() as patch:
        store = tmp_path_factory.mktemp("results") / "results.jsonl"
        patch.setenv("FAULTFINDER_RESULTS", str(store))
        yield


@pytest.fixture(autouse=True)
def _results_store_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`attribute` appends to a results store: each test gets its own, out of the working
    directory."""
    store = tmp_path_factory.mktemp("results") / "results.jsonl"
    monkeypatch.setenv("FAULTFINDER_RESULTS", str(store))


@pytest.fixture(autouse=True, scope="session")
def _chief_stages_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """CHIEF's default stage cache goes to a directory of this session, never the working
    tree, where entries outlived the run and one run's were read by the next. Session-wide
    so that module-scoped fixtures, set up before any test's own fixtures, use it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAULTFINDER_CHIEF_STAGES", str(tmp_path_factory.mktemp("stages")))
        yield


@pytest.fixture(autouse=True, scope="session")
def _response_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The response cache a command uses without --cache goes to a file of this session,
    never the working tree, where it outlived the run and one run's replies were read by
    the next. Session-wide for the same reason as the stage cache above."""
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("response-cache") / "cache.sqlite"
        patch.setenv("FAULTFINDER_CACHE", str(cache))
        yield


@pytest.fixture(autouse=True)
def _response_cache_per_test(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's own response cache, as each had when the default was a file of the
    directory it ran in: a test counting model calls is never served another test's reply
    (a module-level function model is cached by its code, the same in every test)."""
    cache = tmp_path_factory.mktemp("response-cache") / "cache.sqlite"
    monkeypatch.setenv("FAULTFINDER_CACHE", str(cache))


@pytest.fixture(autouse=True)
def _forbid_model_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    previous = base.ALLOW_MODEL_REQUESTS
    base.ALLOW_MODEL_REQUESTS = request.node.get_closest_marker("smoke") is not None
    yield
    base.ALLOW_MODEL_REQUESTS = previous


@pytest.fixture
def loopback_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the LLM layer send requests, for a test whose every server is a loopback fake in
    this process, not a model (a module of such tests:
    ``pytestmark = pytest.mark.usefixtures("loopback_requests")``)."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
