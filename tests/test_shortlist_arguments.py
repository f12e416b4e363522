"""The shortlist's ``arguments`` group: where the values a step passes to its tools come
from (an argument with no source earlier in the run, or one contradicting an earlier value
for the same key)."""

from __future__ import annotations

from faultfinder.shortlist.arguments import COLUMNS, argument_columns, keyed_values, values
from faultfinder.shortlist.features import FeatureSpec, feature_names, trace_features
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Step, ToolCall, ToolResult, Trace

CONFLICTS, FIRST_CONFLICT, UNSUPPORTED, FIRST_UNSUPPORTED = range(4)


def call(index: int, agent: str, arguments: str, text: str = "", result: str = "") -> Step:
    return Step(
        index=index,
        agent=agent,
        content=text,
        tool_calls=[ToolCall(id=f"c{index}", name="tool", arguments=arguments)],
        tool_results=[ToolResult(call_id=f"c{index}", content=result)] if result else [],
    )


def say(index: int, agent: str, text: str) -> Step:
    return Step(index=index, agent=agent, content=text)


def test_values_are_compared_by_value_and_keyed_by_the_word_before_them() -> None:
    assert values("total 45 and 45.0 and 45.00", False) == {45.0}
    assert values("step 1, 2 and 3 of 12", False) == {12.0}
    assert values("step 1, 2 and 3 of 12", True) == {1.0, 2.0, 3.0, 12.0}
    assert keyed_values('{"qty": 3, "price": 120.5}') == [(("qty", 0), 3.0), (("price", 0), 120.5)]
    assert keyed_values("sizes 10 12 14") == [
        (("sizes", 0), 10.0),
        (("sizes", 1), 12.0),
        (("sizes", 2), 14.0),
    ]
    assert keyed_values("42 before any word") == []


def test_an_argument_found_nowhere_earlier_is_unsupported_and_the_first_is_marked() -> None:
    trace = Trace(
        id="t",
        task="Order 120 units of part 7781.",
        steps=[
            say(0, "Planner", "Order the 120 units of part 7781."),
            call(1, "Buyer", '{"part": 7781, "units": 120}', result="ok, cost 960"),
            call(2, "Buyer", '{"part": 7781, "units": 150}'),
            call(3, "Buyer", '{"part": 7781, "units": 175}'),
        ],
    )
    rows = argument_columns(trace)
    assert [r[UNSUPPORTED] > 0 for r in rows] == [False, False, True, True]
    assert [r[FIRST_UNSUPPORTED] for r in rows] == [0.0, 0.0, 1.0, 0.0]


def test_an_argument_contradicting_an_earlier_value_for_its_key_is_a_conflict() -> None:
    trace = Trace(
        id="t",
        task="Ship to warehouse 12.",
        steps=[
            say(0, "Planner", "warehouse 12, weeks 4"),
            call(1, "Clerk", '{"warehouse": 12, "weeks": 4}'),
            call(2, "Clerk", '{"warehouse": 12, "weeks": 6}'),
            call(3, "Clerk", '{"warehouse": 13}'),
        ],
    )
    rows = argument_columns(trace)
    assert [r[CONFLICTS] > 0 for r in rows] == [False, False, True, True]
    assert [r[FIRST_CONFLICT] for r in rows] == [0.0, 0.0, 1.0, 0.0]


def test_a_value_a_tool_result_or_the_step_itself_gave_is_supported() -> None:
    trace = Trace(
        id="t",
        task="Price the order.",
        steps=[
            call(0, "Pricer", '{"item": "bolt"}', result="bolt costs 37.50"),
            call(1, "Pricer", '{"amount": 37.5}'),
            call(2, "Pricer", '{"amount": 412}', text="The subtotal is 412."),
        ],
    )
    assert [r[UNSUPPORTED] for r in argument_columns(trace)] == [0.0, 0.0, 0.0]


def test_steps_without_tool_calls_get_zeros_whatever_their_text_says() -> None:
    trace = Trace(
        id="t",
        task="Find the total.",
        steps=[
            say(0, "Planner", "total 100"),
            say(1, "Solver", "total 250, from 9999 rows"),
        ],
    )
    assert argument_columns(trace) == [[0.0] * len(COLUMNS)] * 2


def test_the_group_is_shipped_and_its_columns_named() -> None:
    assert "arguments" in FeatureSpec().groups
    assert "arguments" in shipped_weights().groups
    assert feature_names(["arguments"]) == [f"arguments.{c}" for c in COLUMNS]
    trace = Trace(id="t", task="x", steps=[call(0, "A", '{"n": 555}')])
    assert trace_features(trace, ["arguments"]) == [[0.0, 0.0, 0.6931471805599453, 1.0]]
