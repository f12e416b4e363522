"""Demo tasks with reference answers and reference solution steps.

``mock_plan`` is what the scripted demo model (:mod:`faultfinder.demo_team.mock_model`)
plans for the task. Some of those plans carry a mistake on purpose, so recorded runs
fail in ways a replay with an edited plan or instruction can fix; one task cannot be
solved at all (its fact is missing), so no intervention can flip it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class DemoTask(BaseModel):
    """One task for the demo team."""

    id: str
    """Short name for --task-id."""
    text: str
    """The task as given to the team."""
    answer: str
    """Reference answer."""
    reference_steps: list[str] = Field(default_factory=list)
    """A human-written solution, step by step (DoVer's milestones come from these)."""
    mock_plan: str
    """The scripted model's plan ('n. Worker: instruction' lines; '[result of step n]'
    stands for the number that step found)."""
    mock_replan: str | None = None
    """The scripted model's plan after a failure (default: the same plan again)."""
    mock_flaw: str | None = None
    """Where the scripted run goes wrong, for people reading the demo."""


TASKS: list[DemoTask] = [
    DemoTask(
        id="avalon-2020",
        text="What was the population of Avalon in 2020, multiplied by 3?",
        answer="144630",
        reference_steps=[
            "Look up the population of Avalon in 2020 in the fact book: 48210.",
            "Multiply 48210 by 3: 144630.",
        ],
        mock_plan=(
            "1. Researcher: Look up the population of Avalon\n"
            "2. Calculator: Compute [result of step 1] * 3"
        ),
        mock_flaw="The plan drops the year, so the Researcher finds the 2023 figure.",
    ),
    DemoTask(
        id="round-trip",
        text="How many kilometres is a round trip from Avalon to Brigadoon and back?",
        answer="684",
        reference_steps=[
            "Look up the distance from Avalon to Brigadoon in km: 342.",
            "Double it for the way back: 684.",
        ],
        mock_plan=(
            "1. Researcher: Look up the distance from Avalon to Brigadoon in km\n"
            "2. Calculator: Compute [result of step 1] * 2"
        ),
    ),
    DemoTask(
        id="brigadoon-percent",
        text="What is 15 percent of the population of Brigadoon in 2020?",
        answer="193.5",
        reference_steps=[
            "Look up the population of Brigadoon in 2020: 1290.",
            "Take 15 percent of 1290 (1290 * 15 / 100): 193.5.",
        ],
        mock_plan=(
            "1. Researcher: Look up the population of Brigadoon in 2020\n"
            "2. Calculator: Compute 15 percent of [result of step 1]"
        ),
        mock_flaw="The Calculator misreads 'percent' and multiplies by 15.",
    ),
    DemoTask(
        id="lyonesse-650",
        text="In which year will Lyonesse celebrate 650 years since its founding?",
        answer="2037",
        reference_steps=[
            "Look up the founding year of Lyonesse: 1387.",
            "Add 650 years: 2037.",
        ],
        mock_plan=(
            "1. Researcher: Look up the founding year of Lyonesse\n"
            "2. Calculator: Compute [result of step 1] - 650"
        ),
        mock_flaw="The plan subtracts instead of adding.",
    ),
    DemoTask(
        id="camelot",
        text="What was the population of Camelot in 2020?",
        answer="3050",
        reference_steps=[
            "Look up the population of Camelot in 2020: 3050.",
        ],
        mock_plan="1. Researcher: Look up the population of Camelot in 2020",
        mock_replan="1. Researcher: Look up Camelot population 2020",
        mock_flaw="The fact book has no entry for Camelot: no intervention can fix it.",
    ),
]


def find_task(text_or_id: str) -> DemoTask | None:
    """The demo task with this id or text (whitespace-insensitive)."""
    wanted = " ".join(text_or_id.split())
    for task in TASKS:
        if wanted in (task.id, task.text):
            return task
    return None
