"""``parse_half`` (binary search): reply -> 'upper', 'lower', or None.

The prompt (Who&When Appendix G.2) asks: "Please simply output either 'upper half' or
'lower half'." Only those two labels count.
"""

from __future__ import annotations

ROWS: list[tuple[str, str | None, str]] = [
    # as asked
    ("upper half", "upper", "as asked"),
    ("lower half", "lower", "as asked"),
    ("Upper half", "upper", "capitalised"),
    ("LOWER HALF", "lower", "upper case"),
    ("upper half.", "upper", "full stop"),
    ("lower half\n", "lower", "newline"),
    ("  upper half  ", "upper", "spaces"),
    ("Lower Half", "lower", "title case"),
    ("upper-half", "upper", "hyphen"),
    ("lower_half", "lower", "underscore"),
    # quoting and markdown
    ("'upper half'", "upper", "quoted"),
    ('"lower half"', "lower", "double quoted"),
    ("’lower half’", "lower", "typographic quotes (the paper's)"),
    ("**upper half**", "upper", "bold"),
    ("`lower half`", "lower", "code span"),
    ("*upper half*", "upper", "italic"),
    ("> lower half", "lower", "quote block"),
    ("# upper half", "upper", "heading"),
    # labelled
    ("Answer: lower half", "lower", "Answer label"),
    ("Final answer: upper half", "upper", "Final answer label"),
    ("answer：lower half", "lower", "Chinese colon"),
    # followed by a reason
    ("upper half. The mistake is the wrong search at step 3.", "upper", "reason after"),
    ("lower half - step 8 uses the wrong unit.", "lower", "reason after"),
    (
        "Upper half. The lower half only repeats the error.",
        "upper",
        "starts with one, mentions the other",
    ),
    ("lower half\n\nReasoning: steps 5-9 contain the bad calculation.", "lower", "reasoning after"),
    # chatty prose naming one label
    ("The error is more likely in the lower half.", "lower", "sentence"),
    (
        "Based on my analysis, the critical mistake is located in the upper half of the segment.",
        "upper",
        "sentence",
    ),
    ("I think it's the lower half, since step 7 misreads the table.", "lower", "sentence"),
    ("After reviewing, I'd say: upper half", "upper", "sentence then label"),
    (
        "The most critical mistake appears in the lower half (steps 6 to 10).",
        "lower",
        "with the range",
    ),
    ('{"answer": "lower half"}', "lower", "JSON"),
    ("```\nupper half\n```", "upper", "fenced"),
    # echoes of the question
    ("upper half or lower half? lower half", "lower", "question echoed, then the answer"),
    ("Either 'upper half' or 'lower half': upper half", "upper", "instruction echoed"),
    ("’upper half’ or ’lower half’ -> lower half", "lower", "typographic echo"),
    (
        "You asked for 'upper half' or 'lower half'. My answer: lower half.",
        "lower",
        "echo in prose",
    ),
    ("upper half or lower half", None, "only the echo"),
    ("'upper half' or 'lower half'", None, "only the quoted echo"),
    # labels not asked for
    ("upper", None, "bare upper"),
    ("lower", None, "bare lower"),
    ("Upper.", None, "bare upper with full stop"),
    ("first half", None, "first half"),
    ("second half", None, "second half"),
    ("top half", None, "top half"),
    ("bottom half", None, "bottom half"),
    ("the earlier part", None, "other words"),
    ("the later steps", None, "other words"),
    ("upper part", None, "upper part"),
    ("lower segment", None, "lower segment"),
    ("A", None, "letter"),
    ("1", None, "number"),
    ("steps 0-4", None, "a range instead of a label"),
    # negations and both
    ("The error is not in the upper half.", None, "negated label"),
    ("Not the lower half.", None, "negated label"),
    ("It isn't in the lower half.", None, "negated with n't"),
    ("The mistake is in the upper half rather than the lower half.", None, "both, in prose"),
    ("Both the upper half and the lower half contain errors.", None, "both"),
    ("It could be the upper half or the lower half.", None, "both, hedged"),
    ("Neither upper half nor lower half.", None, "neither"),
    # empty and junk
    ("", None, "empty"),
    ("   ", None, "blank"),
    ("I cannot determine this.", None, "refusal"),
    ("halfhalfhalf", None, "junk"),
    ("上半部分", None, "Chinese label"),
]
