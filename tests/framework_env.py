"""A private virtual environment for a framework whose pins conflict with the project's.

``framework_python("crewai", ["crewai==X"])`` builds ``<cache>/crewai-<key>/`` once (key:
Python version and requirements), with pip from the package registry, and returns its
interpreter; later calls (and later test runs) reuse it. The cache is
``$FAULTFINDER_ENV_CACHE``, else ``~/.cache/faultfinder/envs``. A file lock keeps two
test processes from building the same environment at once. The framework program then
runs in that interpreter as a subprocess, recorded and replayed by the project's proxy.

Tests that call this carry the ``frameworks_env`` marker (registered in pyproject.toml):
building an environment takes minutes the first time, and ``pytest -m "not
frameworks_env"`` leaves those tests out. The README's full test command runs them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

INSTALL_TIMEOUT_S = 1200

CREWAI = ["crewai==1.15.30"]
"""The CrewAI environment's pins (name ``crewai``)."""
CREWAI_OTEL = [
    *CREWAI,
    "openinference-instrumentation-crewai==1.1.21",
    "openinference-instrumentation-openai==0.1.66",
]
"""CrewAI traced by OpenInference's CrewAI and OpenAI instrumentations, exported by the
OTLP/HTTP exporter CrewAI installs (name ``crewai-otel``)."""
AG2_GROUPCHAT = ["ag2[openai]==0.14.0"]
"""The AG2 GroupChat environment's pins (name ``ag2-groupchat``)."""
AUTOGEN_AGENTCHAT = ["autogen-agentchat==0.7.5", "autogen-ext[openai]==0.7.5"]
"""The AutoGen AgentChat environment's pins (name ``autogen-agentchat``)."""
PYDANTIC_AI = ["pydantic-ai-slim[openai]==2.68.0"]
"""The pydantic-ai environment's pins (name ``pydantic-ai``)."""
OTEL_EXPORT = ["opentelemetry-sdk==1.45.2", "opentelemetry-exporter-otlp-proto-http==1.45.2"]
"""The OpenTelemetry SDK and OTLP/HTTP exporter the traced framework programs export with."""
AUTOGEN_AGENTCHAT_OTEL = [
    *AUTOGEN_AGENTCHAT,
    *OTEL_EXPORT,
    "opentelemetry-instrumentation-openai-v2==2.4b0",
    "httpx==0.28.1",  # imported by openai-v2, no longer installed by openai 3
    "opentelemetry-util-genai==1.1b0",  # 1.2b0 moved the module openai-v2 imports
    "openinference-instrumentation-openai==0.1.66",
]
"""AutoGen AgentChat with its own tracing exported, and either OpenAI client instrumentation
(name ``autogen-agentchat-otel``)."""
PYDANTIC_AI_OTEL = [*PYDANTIC_AI, *OTEL_EXPORT]
"""pydantic-ai with its own instrumentation exported (name ``pydantic-ai-otel``)."""
NO_TELEMETRY = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
    "AUTOGEN_USE_DOCKER": "False",
}
"""The frameworks' documented switches that keep their telemetry home, set for every
framework program the tests and the fault-injection bench run."""


def cache_root() -> Path:
    configured = os.environ.get("FAULTFINDER_ENV_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "faultfinder" / "envs"


def framework_python(name: str, requirements: list[str]) -> Path:
    """The interpreter of the environment with ``requirements`` (built on first use)."""
    key_data = json.dumps([list(sys.version_info[:2]), sorted(requirements)])
    key = hashlib.sha256(key_data.encode()).hexdigest()[:12]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    env = root / f"{name}-{key}"
    python = env / "bin" / "python"
    done = env / ".complete"
    if done.exists():
        return python
    with (root / f"{name}-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return python
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
        result = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"building the {name} environment failed:\n{result.stderr[-2000:]}")
        done.write_text(key_data, encoding="utf-8")
    return python
