"""A three-agent program (Planner, Researcher, Writer in turn, plain openai SDK at its
default retry settings) with switchable mutations, for bench/replay_frameworks.py: each
mutant is replayed against the recording of the unmutated program, and the replay must
report a divergence instead of serving recorded answers to different questions.

    python bench/mutant_team.py TASK [--prompt AGENT] [--order P,R,W] [--extra-at K]
"""

from __future__ import annotations

import argparse

from openai import OpenAI

PROMPTS = {
    "Planner": "You are the Planner. Say what must be found out.",
    "Researcher": "You are the Researcher. Find the facts the plan asks for.",
    "Writer": "You are the Writer. State the final answer.",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument("--prompt", default=None, help="Agent whose system prompt changes.")
    parser.add_argument("--order", default="Planner,Researcher,Writer")
    parser.add_argument("--extra-at", type=int, default=None, help="Add a call at this turn.")
    args = parser.parse_args()
    client = OpenAI()
    order = args.order.split(",")
    if args.extra_at is not None:
        order.insert(args.extra_at, order[min(args.extra_at, len(order) - 1)])
    notes: list[str] = []
    for agent in order:
        prompt = PROMPTS[agent] + (" Be brief." if agent == args.prompt else "")
        reply = client.chat.completions.create(
            model="bench-model",
            messages=[
                {"role": "system", "content": prompt},
                {"role": "user", "content": "\n".join([args.task, *notes])},
            ],
        )
        notes.append(f"{agent}: {reply.choices[0].message.content}")
    print(f"FINAL ANSWER: {notes[-1]}", flush=True)


if __name__ == "__main__":
    main()
