"""AG2 / AutoGen (0.2 line) runtime logs → canonical traces, one per logging session.

``autogen.runtime_logging.start()`` writes either a SQLite database (default logger; tables
``chat_completions``, ``agents``, ``events``, ``function_calls``...) or, with
``logger_type="file"``, JSON lines (one record per line; the kind of record is told by its
keys). Every chat completion becomes an LLM step by its ``source_name`` agent, in start-time
order; every function call is attached to the step that asked for it (by call id where the
log shows it), and a call that raised, for which AG2 logs no function call, gets its
error result from the chat events (``_ag2_tools.py``); the final
answer is the chat's result as AG2 gives it by default, its last message
(:func:`chat_result`). What the trace takes from the log is
scrubbed of credentials as the span readers' traces are. The database is opened read-only;
nothing in it is executed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.redact import Redactor
from faultfinder.traces.importers._ag2_logs import (
    Session,
    event_time,
    read_file_log,
    read_sqlite,
    tables_of,
)
from faultfinder.traces.importers._ag2_tools import attach_tool_runs
from faultfinder.traces.importers._common import (
    check_options,
    make_trace,
    scrubbed,
    scrubbed_agent,
    text_of,
    without_credentials,
)
from faultfinder.traces.importers._openai import read_completion, split_request
from faultfinder.traces.importers._spans import keep_raw, maybe_json, parse_time
from faultfinder.traces.importers.otlp import sniff, stem_of
from faultfinder.traces.io import SQLITE_MAGIC
from faultfinder.traces.schema import Agent, SourceInfo, Step, Trace


def _step(row: dict[str, Any], index: int, path: Path, where: str) -> Step:
    request = row.get("request")
    if isinstance(request, str):
        request = maybe_json(request)
    messages, params = split_request(request, path=path, where=f"{where}.request")
    response = row.get("response")
    if isinstance(response, str):
        decoded = maybe_json(response)
        response = (
            decoded.get("response", decoded)
            if isinstance(decoded, dict) and set(decoded) == {"response"}
            else decoded
        )
    parts = read_completion(response, path=path, where=f"{where}.response")
    metadata: dict[str, Any] = {**parts.metadata, "invocation_id": row.get("invocation_id")}
    metadata["source"] = keep_raw(row)  # the record as logged
    if row.get("is_cached"):
        metadata["is_cached"] = True
    if row.get("cost") is not None:
        metadata["cost"] = row["cost"]
    agent = str(row.get("source_name") or "assistant")
    return Step(
        index=index,
        agent=agent,
        role="assistant",
        kind="llm",
        content=parts.content,
        input_messages=messages,
        request=params,
        tool_calls=parts.tool_calls,
        model=parts.model or (params or {}).get("model"),
        usage=parts.usage,
        started_at=parse_time(row.get("start_time"), path=path, where=f"{where}.start_time"),
        ended_at=parse_time(row.get("end_time"), path=path, where=f"{where}.end_time"),
        source_id=str(row.get("id") or row.get("invocation_id") or index),
        metadata=metadata,
    )


def _agent(name: str, info: dict[str, Any]) -> Agent:
    raw = maybe_json(info.get("init_args"))
    args: dict[str, Any] = without_credentials(raw) if isinstance(raw, dict) else {}
    llm: dict[str, Any] = args["llm_config"] if isinstance(args.get("llm_config"), dict) else {}
    model = llm.get("model")
    if model is None and isinstance(llm.get("config_list"), list) and llm["config_list"]:
        first = llm["config_list"][0]
        model = first.get("model") if isinstance(first, dict) else None
    system = args.get("system_message")
    return Agent(
        name=name,
        description=args.get("description") if isinstance(args.get("description"), str) else None,
        system_prompt=system if isinstance(system, str) else None,
        model=model if isinstance(model, str) else None,
        config={
            "class": info.get("class"),
            **{k: v for k, v in args.items() if k not in ("system_message", "description", "name")},
        },
    )


def _message_text(message: Any) -> str | None:
    """A logged chat message's text as AG2's ``last_msg`` summary reads it (a string, a
    message's ``content`` string, or the text parts of a content list); None for a
    message asking for a tool or with no text."""
    if isinstance(message, str):
        return message
    if not isinstance(message, dict) or message.get("tool_calls") or message.get("function_call"):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return None


def chat_result(session: Session, steps: list[Step], path: Path) -> tuple[str | None, str]:
    """The chat's result as AG2 gives it by default (``ChatResult.summary`` with
    ``summary_method="last_msg"``: the last message of the chat, every "TERMINATE"
    removed), and where it was read; None when the log does not show it.

    The last message is the last valid ``received_message`` event. It is taken only when
    the log shows the chat ended on it: an agent's reply function decided, after it, to
    send no reply (``reply_func_executed`` with ``final`` true and no reply: a
    termination message, a group chat's last round, the last auto-reply), or the message
    says "TERMINATE" (the convention ``is_termination_msg`` checks). Never when a model
    was called after it (a ``reflection_with_llm`` summary, or a log cut off), when it
    asks for a tool, or when nothing is left once "TERMINATE" is removed."""
    events = sorted(session.chat_events, key=lambda e: str(e.get("timestamp") or ""))
    last: int | None = None
    for n, event in enumerate(events):
        state = maybe_json(event.get("json_state"))
        if (
            event.get("event_name") == "received_message"
            and isinstance(state, dict)
            and "message" in state
            and state.get("valid") is not False
        ):
            last = n
    if last is None:
        return None, ""
    event = events[last]
    state = maybe_json(event.get("json_state"))
    moment = event_time(event, path)
    if moment is None or any(
        s.started_at is not None and s.started_at > moment for s in steps if s.kind == "llm"
    ):
        return None, ""
    message = state["message"]
    text = _message_text(message)
    if text is None:
        return None, ""
    declined = next(
        (
            e
            for e in events[last + 1 :]
            if e.get("event_name") == "reply_func_executed"
            and isinstance(later := maybe_json(e.get("json_state")), dict)
            and later.get("final") is True
            and later.get("reply") is None
        ),
        None,
    )
    if declined is None and "TERMINATE" not in text:
        return None, ""
    answer = text.replace("TERMINATE", "").strip()
    if not answer:
        return None, ""
    speaker = message.get("name") if isinstance(message, dict) else None
    speaker = speaker if isinstance(speaker, str) else state.get("sender")
    if declined is not None:
        state_of = maybe_json(declined.get("json_state"))
        func = state_of.get("reply_func_name") if isinstance(state_of, dict) else None
        ended = f"'{declined.get('source_name')}' then sent no reply ({func})"
    else:
        ended = "it says TERMINATE"
    return answer, (
        f"last message of the chat, from '{speaker}' (received_message event at "
        f"{event.get('timestamp')}), 'TERMINATE' removed, as AG2's default chat summary "
        f"(summary_method 'last_msg'); the chat ended there: {ended}"
    )


def sessions_to_traces(sessions: dict[str, Session], path: Path, fmt: str) -> list[Trace]:
    traces = []
    for sid, s in sessions.items():
        rows = sorted(
            s.completions, key=lambda r: (str(r.get("start_time") or ""), r.get("id") or 0)
        )
        steps = [_step(r, i, path, f"chat_completions[{i}]") for i, r in enumerate(rows)]
        attach_tool_runs(s, steps, path)
        steps = [st.model_copy(update={"index": i}) for i, st in enumerate(steps)]
        roster = [_agent(n, info) for n, info in s.agents.items()]
        for st in steps:
            if not any(a.name == st.agent for a in roster):
                roster.append(Agent(name=st.agent, model=st.model))
        first_user = next(
            (
                m.get("content")
                for st in steps
                for m in st.input_messages or []
                if m.get("role") == "user" and m.get("content")
            ),
            "",
        )
        final, final_from = chat_result(s, steps, path)
        # Each record kept in the trace was scrubbed alone (keep_raw); what the steps, the
        # roster, the task and the final answer took from the log is scrubbed here, as the
        # span readers scrub theirs, with every secret any record of the session reveals
        # (a client's configuration, an agent's llm_config, a request's headers).
        redactor = Redactor()
        redactor.learn_data(
            [s.completions, list(s.agents.values()), s.calls, s.chat_events, s.others, s.config]
        )
        metadata = {
            "session_id": sid,
            "events": s.events,
            "function_calls": len(s.calls),
            **({"final_answer_from": final_from} if final_from else {}),
            **({"other_records": keep_raw(s.others)} if s.others else {}),
        }
        task = text_of(first_user)
        traces.append(
            make_trace(
                path,
                id=f"{stem_of(path)}/{sid}",
                task=redactor.text(task) if task else task,
                final_answer=redactor.text(final) if final else final,
                system="ag2",
                agents=[scrubbed_agent(a, redactor) for a in roster],
                steps=[scrubbed(st, redactor) for st in steps],
                source=SourceInfo(format=fmt, path=str(path)),
                metadata=redactor.data(metadata),
            )
        )
    return traces


def _is_file_log(head: bytes) -> bool:
    text = head.decode("utf-8", errors="replace")
    return text.startswith("Started new session with Session ID:") or (
        '"invocation_id"' in text and '"source_name"' in text and '"wrapper_id"' in text
    )


class Ag2Importer:
    name: ClassVar[str] = "ag2"
    summary: ClassVar[str] = (
        "AG2/AutoGen runtime logs: the SQLite database or the file logger's JSON lines"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if head.startswith(SQLITE_MAGIC):
            try:
                con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
                try:
                    return "chat_completions" in tables_of(con)
                finally:
                    con.close()
            except sqlite3.Error:
                return False
        return _is_file_log(head)

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        if sniff(path).startswith(SQLITE_MAGIC):
            sessions = read_sqlite(path)
        else:
            sessions = read_file_log(path)
        return sessions_to_traces(sessions, path, self.name)
