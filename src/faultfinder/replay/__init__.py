"""Record any agent program's model calls through an OpenAI-compatible proxy, and replay
the program from any step with an edit.

- :mod:`~faultfinder.replay.proxy`: the recording/replaying proxy;
- :mod:`~faultfinder.replay.recorder`: run directories, ``steps.jsonl`` and ``trace.json``;
- :mod:`~faultfinder.replay.run_format`: what a run directory's files hold;
- :mod:`~faultfinder.replay.replayer`: replay decisions (each call matched to the recording);
- :mod:`~faultfinder.replay.live_calls`: what a call that goes live or carries the edit gets;
- :mod:`~faultfinder.replay.replay_options`: what a replay is asked to do;
- :mod:`~faultfinder.replay.report`: what a replay did (``report.json``);
- :mod:`~faultfinder.replay.session`: run a program through the proxy (record / replay);
- :mod:`~faultfinder.replay.child`: the program as a child process (its environment, output);
- :mod:`~faultfinder.replay.trust`: what a replay takes from a run directory, only on the
  user's word;
- :mod:`~faultfinder.replay.local_server`: serve any faultfinder model as an endpoint.
"""

from faultfinder.replay.edits import Edit
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    RecordedCall,
    RunMeta,
    RunStore,
    build_trace,
    load_calls,
    rebuild_trace,
)
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import (
    ReplayOutcome,
    RunOutcome,
    SessionOptions,
    record_run,
    replay_run,
)

__all__ = [
    "Edit",
    "ProxyConfig",
    "RecordedCall",
    "RecordingProxy",
    "ReplayOptions",
    "ReplayOutcome",
    "ReplayPlan",
    "ReplayReport",
    "RunMeta",
    "RunOutcome",
    "RunStore",
    "SessionOptions",
    "build_trace",
    "load_calls",
    "rebuild_trace",
    "record_run",
    "replay_run",
]
