"""A small multi-agent demo program for recording, replay and DoVer.

``python -m faultfinder.demo_team "task"`` runs an Orchestrator with two workers
(Researcher with a fact-book lookup tool, Calculator with an arithmetic tool) against
whatever OpenAI-compatible endpoint OPENAI_BASE_URL names. Offline, serve the scripted
demo model (:mod:`faultfinder.demo_team.mock_model`) or the embedded model with
``faultfinder serve-local``.
"""

from faultfinder.demo_team.tasks import TASKS, DemoTask, find_task
from faultfinder.demo_team.team import Team, TeamConfig

__all__ = ["TASKS", "DemoTask", "Team", "TeamConfig", "find_task"]
