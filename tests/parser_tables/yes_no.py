"""``parse_yes_no`` (step-by-step's judge): reply -> True (Yes), False (No), None."""

from __future__ import annotations

ROWS: list[tuple[str, bool | None, str]] = [
    # the paper's format: '1. Yes/No. 2. Reason for the judgment.'
    ("1. Yes. 2. The agent used the wrong year.", True, "paper format"),
    ("1. No. 2. The step is a reasonable plan.", False, "paper format"),
    ("1. Yes 2. Wrong column.", True, "no full stop"),
    ("1. No\n2. The search was fine.", False, "two lines"),
    ("1) Yes. 2) It misread the table.", True, "parenthesis numbering"),
    ("1. YES. 2. Bad call.", True, "upper case"),
    ("1. no. 2. fine", False, "lower case"),
    ("1. Yes, the agent ignored the constraint. 2. See above.", True, "reason in item 1"),
    ("1. No, there is no error in this step. 2. It follows the plan.", False, "no + 'no error'"),
    ("1. No - the code runs and prints the right value. 2. -", False, "dash"),
    ("1.Yes. 2.The link is wrong.", True, "no spaces"),
    # echoes of the format
    ("Yes/No: No\nReason: the step is fine.", False, "'Yes/No:' label echoed"),
    ("Yes/No: Yes\nReason: wrong unit.", True, "'Yes/No:' label echoed"),
    ("1. Yes/No: No. 2. Reason for the judgment: fine.", False, "label echoed in item 1"),
    ("1. Yes/No: Yes 2. Reason: the agent hallucinated a source.", True, "label echoed"),
    ("Yes/No：No\nReason：没有错误", False, "Chinese colon"),
    (
        "Attention: Respond in the format:\n1. Yes/No. 2. Reason for the judgment.\n\n"
        "1. No. 2. Correct step.",
        False,
        "whole format echoed first",
    ),
    ("1. Yes/No. 2. Reason for the judgment.", None, "only the echo"),
    ("Yes/No", None, "only the label"),
    # markdown
    ("**1. Yes.** 2. The agent skipped verification.", True, "bold item"),
    ("1. **No**. 2. Fine.", False, "bold answer"),
    ("**Yes/No:** **Yes**\n**Reason:** wrong file", True, "bold label and answer"),
    ("### Answer\nNo\n### Reason\nThe step is fine.", False, "heading then value"),
    ("- Answer: Yes\n- Reason: misread", True, "bullets"),
    ("> 1. No. 2. fine", False, "quoted"),
    ("1. `Yes`. 2. wrong", True, "code span"),
    ("*No*. The step is fine.", False, "italic first word"),
    # labelled answers
    ("Answer: No. The action is correct.", False, "Answer label"),
    ("No.\nError: none found in this step.", False, "a later 'Error:' line is not the answer"),
    ("Final Answer: Yes", True, "Final Answer label"),
    ("Judgment: Yes\nThe agent picked the wrong city.", True, "Judgment label"),
    ("Judgement: No", False, "British spelling"),
    ("Decision: yes", True, "Decision label"),
    ("Verdict: No.", False, "Verdict label"),
    # JSON
    ('{"answer": "Yes", "reason": "wrong source"}', True, "JSON answer"),
    ('{"answer": "No", "reason": "fine"}', False, "JSON answer"),
    ('```json\n{"answer": "no", "reason": "ok"}\n```', False, "fenced JSON"),
    ('{"answer": true, "reason": "bad"}', True, "JSON boolean"),
    ('{"answer": "maybe"}', None, "JSON hedge"),
    # plain prose that starts with the answer
    ("No.", False, "bare no"),
    ("Yes", True, "bare yes"),
    ("No, the most recent action is correct.", False, "prose"),
    ("Yes. The agent reported 42 instead of 24.", True, "prose"),
    ("No - the orchestrator's plan is sound.", False, "prose with dash"),
    ("Yes! It used data from 2019.", True, "exclamation"),
    ("Yes, there is no source for this claim.", True, "'no' later in the sentence"),
    ("Here is my judgment:\nNo. The agent's plan is reasonable.", False, "announcing preface"),
    ("Sure, let me evaluate.\n\nNo, the step is fine.", None, "preface sentence: not the field"),
    # negations and answers that do not start with Yes/No
    ("I would not say yes.", None, "negated yes"),
    ("I would say no.", None, "answer not in the field's first word"),
    ("Not really.", None, "not a yes/no"),
    ("The step contains an error: yes.", None, "answer at the end"),
    ("There is no error in this step.", None, "'no' as a determiner"),
    ("Nope.", None, "slang"),
    ("Correct.", None, "other word"),
    # hedges
    ("Maybe.", None, "hedge"),
    ("1. Maybe. 2. Hard to say.", None, "hedge in item 1"),
    ("1. Yes, possibly. 2. The value could be wrong.", None, "hedged yes"),
    ("No, probably not. The step seems fine.", None, "hedged no"),
    ("Yes, partially: the first half is right.", None, "partial"),
    ("1. Yes, the step is partially wrong. 2. One unit is off.", True, "partially wrong: an error"),
    ("Yes. It is partially incorrect.", True, "partially incorrect: an error"),
    ("Yes, partially correct.", None, "partially correct: a hedge"),
    ("It is unclear whether this step is wrong.", None, "unclear"),
    ("1. Uncertain. 2. Not enough information.", None, "uncertain"),
    ("No (not sure).", None, "not sure"),
    # both
    ("Yes and no.", None, "both"),
    ("1. Yes/No: Yes or No. 2. It depends.", None, "both after the echo"),
    ("1. No/Yes. 2. ?", None, "both, slash"),
    # empty and junk
    ("", None, "empty"),
    ("   \n  ", None, "blank"),
    ("2. The reason is that the agent erred.", None, "item 2 only"),
    ("1000000000000000", None, "junk digits"),
    # Chinese
    ("1. 否。2. 该步骤正确。", False, "Chinese no"),
    ("1. 是。2. 数据来源错误。", True, "Chinese yes"),
]
