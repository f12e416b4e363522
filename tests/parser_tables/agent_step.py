"""``parse_agent_step_reason`` (all-at-once, hybrid's first stage, CHIEF's direct answer):
reply -> (agent, step) or None. The step is read as written; whether it can stand (inside
the trace, taken by the named agent) is the agent/step rule's business, not the parser's.
"""

from __future__ import annotations

from parser_tables.agents import ALIASES, NAMES

__all__ = ["ALIASES", "NAMES", "ROWS"]

_R = "\nReason for Mistake: the agent used an outdated source."

ROWS: list[tuple[str, tuple[str, int] | None, str]] = [
    # the paper's format
    ("Agent Name: WebSurfer\nStep Number: 12" + _R, ("WebSurfer", 12), "paper format"),
    ("Agent Name: Orchestrator\nStep Number: 0" + _R, ("Orchestrator", 0), "step 0"),
    (
        "Agent Name: Excel_Expert\nStep Number: 3\nReason for Mistake: bad sum",
        ("Excel_Expert", 3),
        "AG2 name",
    ),
    ("Agent Name: Coder\nStep Number: 7", ("Coder", 7), "no reason"),
    ("Agent Name:WebSurfer\nStep Number:4", ("WebSurfer", 4), "no space after colon"),
    ("agent name: websurfer\nstep number: 4", ("WebSurfer", 4), "lower case labels"),
    (
        "Agent Name: WebSurfer\n\nStep Number: 4\n\nReason for Mistake: x",
        ("WebSurfer", 4),
        "blank lines",
    ),
    (
        "Agent Name: Verification_Expert\nStep Number: 9" + _R,
        ("Verification_Expert", 9),
        "paper format",
    ),
    # step spellings
    ("Agent Name: WebSurfer\nStep Number: Step 12", ("WebSurfer", 12), "'Step 12'"),
    ("Agent Name: WebSurfer\nStep Number: #12", ("WebSurfer", 12), "'#12'"),
    ("Agent Name: WebSurfer\nStep Number: **12**", ("WebSurfer", 12), "bold number"),
    (
        "Agent Name: WebSurfer\nStep Number: 12 (the search for the paper)",
        ("WebSurfer", 12),
        "note",
    ),
    ("Agent Name: WebSurfer\nStep Number: 12.", ("WebSurfer", 12), "full stop"),
    (
        "Agent Name: WebSurfer\nStep Number: The first mistake happens at step 12.",
        ("WebSurfer", 12),
        "sentence",
    ),
    ("Agent Name: WebSurfer\nStep Number: It is 12", ("WebSurfer", 12), "sentence, one number"),
    ("Agent Name: WebSurfer\nStep Number: 12 (0-based)", ("WebSurfer", 12), "numbering note"),
    ("Agent Name: WebSurfer\nStep Number: step12", ("WebSurfer", 12), "no space"),
    (
        "Agent Name: WebSurfer\nStep Number: 12, i.e. its 4th message",
        ("WebSurfer", 12),
        "comment after",
    ),
    # markdown
    (
        "**Agent Name:** WebSurfer\n**Step Number:** 12\n**Reason for Mistake:** x",
        ("WebSurfer", 12),
        "bold labels",
    ),
    (
        "**Agent Name**: WebSurfer\n**Step Number**: 12",
        ("WebSurfer", 12),
        "bold labels, colon outside",
    ),
    (
        "- Agent Name: WebSurfer\n- Step Number: 12\n- Reason for Mistake: x",
        ("WebSurfer", 12),
        "bullets",
    ),
    (
        "1. Agent Name: WebSurfer\n2. Step Number: 12\n3. Reason for Mistake: x",
        ("WebSurfer", 12),
        "numbered",
    ),
    (
        "### Agent Name\nWebSurfer\n### Step Number\n12\n### Reason for Mistake\nx",
        ("WebSurfer", 12),
        "headings",
    ),
    ("Agent Name: `Coder`\nStep Number: `7`", ("Coder", 7), "code spans"),
    ("Agent Name: **Excel_Expert**\nStep Number: **3**", ("Excel_Expert", 3), "bold values"),
    ("> Agent Name: WebSurfer\n> Step Number: 12", ("WebSurfer", 12), "block quote"),
    (
        "**Agent Name:**\nWebSurfer\n**Step Number:**\n12",
        ("WebSurfer", 12),
        "value on the next line",
    ),
    # JSON
    (
        '{"Agent Name": "WebSurfer", "Step Number": 12, "Reason for Mistake": "x"}',
        ("WebSurfer", 12),
        "JSON",
    ),
    (
        '```json\n{"agent": "Coder", "step": 7, "reason": "x"}\n```',
        ("Coder", 7),
        "fenced JSON, short keys",
    ),
    (
        '{"agent_name": "Orchestrator", "step_number": "5"}',
        ("Orchestrator", 5),
        "snake keys, string step",
    ),
    (
        'Here is my answer:\n{"mistake_agent": "FileSurfer", "mistake_step": 2}',
        ("FileSurfer", 2),
        "prose then JSON",
    ),
    ('"Agent Name": "WebSurfer",\n"Step Number": "12",', ("WebSurfer", 12), "JSON-ish lines"),
    # chatty prose around the fields
    (
        "Let me analyse the conversation. The Orchestrator planned well, but WebSurfer "
        "opened the wrong page.\n\nAgent Name: WebSurfer\nStep Number: 12" + _R,
        ("WebSurfer", 12),
        "analysis first, names two agents in prose",
    ),
    (
        "Agent Name: WebSurfer\nStep Number: 12\nReason for Mistake: The Orchestrator asked "
        "for the 2020 data but WebSurfer returned step 3's numbers.",
        ("WebSurfer", 12),
        "reason names other agents and steps",
    ),
    (
        "Sure! Here is my prediction.\nAgent Name: Coder\nStep Number: 7\nHope this helps.",
        ("Coder", 7),
        "chatty",
    ),
    # echoes of the question
    (
        "Agent Name: (Your prediction)\nStep Number: (Your prediction)\n"
        "Reason for Mistake: (Your reason)\n\n"
        "Agent Name: WebSurfer\nStep Number: 12\nReason for Mistake: x",
        ("WebSurfer", 12),
        "format echoed first",
    ),
    ("Agent Name: (Your prediction)\nStep Number: (Your prediction)", None, "only the echo"),
    (
        'For example, "agent c" at step 2.\nAgent Name: Coder\nStep Number: 7',
        ("Coder", 7),
        "example echoed in prose",
    ),
    (
        "Agent Name: WebSurfer\nStep Number: 12\n\nAgent Name: WebSurfer\nStep Number: 12",
        ("WebSurfer", 12),
        "repeated, agreeing",
    ),
    # Magentic-One qualified speakers
    ("Agent Name: Orchestrator (thought)\nStep Number: 5", ("Orchestrator", 5), "alias"),
    (
        "Agent Name: Orchestrator (-> WebSurfer)\nStep Number: 6",
        ("Orchestrator", 6),
        "alias naming WebSurfer",
    ),
    (
        "Agent Name: orchestrator (-> coder)\nStep Number: 8",
        ("Orchestrator", 8),
        "alias, lower case",
    ),
    # Chinese colon and full-width text
    ("Agent Name：WebSurfer\nStep Number：12", ("WebSurfer", 12), "Chinese colon"),
    (
        "Agent Name： Excel_Expert\nStep Number： 3\nReason for Mistake： 计算错误",
        ("Excel_Expert", 3),
        "Chinese colon, spaces",
    ),
    ("Agent Name：WebSurfer\nStep Number：7或8", None, "Chinese 'or'"),
    # steps outside the trace are read as written (the rule marks them later)
    ("Agent Name: WebSurfer\nStep Number: 57", ("WebSurfer", 57), "beyond the trace"),
    ("Agent Name: WebSurfer\nStep Number: -1", ("WebSurfer", -1), "negative"),
    # ambiguous answers
    ("Agent Name: WebSurfer, then Orchestrator\nStep Number: 12", None, "two agents"),
    ("Agent Name: WebSurfer or FileSurfer\nStep Number: 12", None, "two agents, or"),
    ("Agent Name: WebSurfer\nStep Number: 12 or 13", None, "two steps"),
    ("Agent Name: WebSurfer\nStep Number: 12-13", None, "step range"),
    ("Agent Name: WebSurfer\nStep Number: steps 12 and 14", None, "two steps in words"),
    (
        "Agent Name: WebSurfer\nStep Number: 12\n\nAgent Name: Coder\nStep Number: 7",
        None,
        "two different answers",
    ),
    ("Agent Name: WebSurfer\nStep Number: between step 3 and step 5", None, "two steps in prose"),
    # missing or unreadable fields
    ("Agent Name: WebSurfer", None, "no step"),
    ("Step Number: 12", None, "no agent"),
    ("Agent Name: WebSurfer\nStep Number: unknown", None, "step unknown"),
    ("Agent Name: WebSurfer\nStep Number: N/A", None, "step N/A"),
    ("Agent Name: WebSurfer\nStep Number: the twelfth", None, "step in words"),
    ("Agent Name: Assistant\nStep Number: 3", None, "agent not on the roster"),
    ("Agent Name: \nStep Number: 3", None, "empty agent"),
    ("WebSurfer made the mistake at step 12.", None, "no fields"),
    ("The agent WebSurfer, step 12", None, "no fields"),
    ("", None, "empty"),
    ("Agent: WebSurfer\nStep: 12", ("WebSurfer", 12), "short labels"),
    ("The responsible Agent: WebSurfer\nStep: 12", None, "label not at line start"),
    # JSON quoted from a step inside a sentence is not the answer; alone, it is
    (
        'Agent Name: WebSurfer\nStep Number: 12\nReason: it printed {"agent": "Orchestrator", '
        '"step": 0} and stopped',
        ("WebSurfer", 12),
        "JSON quoted in the reason",
    ),
    ('My answer is {"agent": "Coder", "step": 7}.', ("Coder", 7), "JSON in a sentence, alone"),
    # corrections are read as written (docs/eval.md): the field, not the prose after it
    (
        "Agent Name: WebSurfer\nStep Number: 5\nReason for Mistake: wrong page\nActually, step 7.",
        ("WebSurfer", 5),
        "prose correction after the fields",
    ),
    (
        "Agent Name: WebSurfer\nStep Number: 5\nWait, no.\nStep Number: 7",
        None,
        "the field written again, differently",
    ),
]
