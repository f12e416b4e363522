// faultfinder ui: change a step and replay it, watch the job (only with --allow-replay).
// Everything read from a trace reaches the page through .value or .textContent, never HTML.
"use strict";

function pageToken() {
  return document.querySelector('meta[name="ff-token"]').content;
}

async function postJSON(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "X-Faultfinder-Token": pageToken(), "Content-Type": "application/json" },
    body: body === undefined ? "{}" : JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch (e) { data = { error: "HTTP " + response.status }; }
  return { ok: response.ok, status: response.status, data };
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function setupEditPanel() {
  const panel = document.getElementById("edit-panel");
  if (!panel) return;
  const form = document.getElementById("edit-form");
  const status = document.getElementById("edit-status");
  const field = (id) => document.getElementById(id);
  let recorded = null;
  let kept = [];  // the tool calls an edit of the output serves with its text

  function callText(c) {
    const args = typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments);
    const text = c.name + "(" + args + ")";
    return text.length > 300 ? text.slice(0, 300) + "…" : text;
  }

  function fillKept(calls, source) {
    kept = calls.map((c) => ({ id: c.id === undefined ? null : c.id, name: c.name, arguments: c.arguments }));
    field("edit-keep").hidden = kept.length === 0;
    field("edit-keep-calls").checked = kept.length > 0;
    field("edit-keep-source").textContent = source;
    field("edit-kept-calls").replaceChildren(...calls.map((c) => el("li", c.label || callText(c))));
  }

  function showKind(kind) {
    for (const box of panel.querySelectorAll("[data-kind]")) box.hidden = box.dataset.kind !== kind;
    const radio = form.querySelector('input[name="kind"][value="' + kind + '"]');
    if (radio) radio.checked = true;
  }

  function fillCalls() {
    const calls = recorded.tool_calls;
    const select = field("edit-call-index");
    select.replaceChildren();
    calls.forEach((c) => select.appendChild(new Option(c.index + ": " + c.label, String(c.index))));
    const pick = () => {
      const c = calls[Number(select.value)] || { name: "", arguments: "" };
      field("edit-call-name").value = c.name;
      field("edit-call-args").value = c.arguments;
    };
    select.onchange = pick;
    pick();
    const results = recorded.tool_results;
    const rselect = field("edit-result-index");
    rselect.replaceChildren();
    results.forEach((r, i) => rselect.appendChild(new Option(r.index + ": " + r.label, String(i))));
    const rpick = () => { const r = results[Number(rselect.value)]; field("edit-result").value = r ? r.content : ""; };
    rselect.onchange = rpick;
    rpick();
    for (const [kind, has] of [["tool_call", calls.length], ["tool_result", results.length]]) {
      const radio = form.querySelector('input[name="kind"][value="' + kind + '"]');
      radio.disabled = !has;
      radio.parentElement.title = has ? "" : "this step has none";
    }
  }

  async function open(step, preset) {
    status.textContent = "loading step " + step + "…";
    panel.hidden = false;
    const response = await fetch(panel.dataset.steps + step + "/edit");
    if (!response.ok) { status.textContent = "could not load step " + step; return; }
    recorded = await response.json();
    field("edit-step").textContent = String(step);
    field("edit-agent").textContent = recorded.agent;
    field("edit-output").value = recorded.output;
    field("edit-input").value = recorded.instruction;
    fillCalls();
    showKind("message");
    if (preset && preset.kind === "message") field("edit-output").value = preset.text;
    // An intervention's own calls when it has them, else the recorded ones: an edit of a
    // handoff step's text keeps the handoff unless the box is unticked.
    const given = preset && preset.tool_calls && preset.tool_calls.length ? preset.tool_calls : null;
    fillKept(given || recorded.tool_calls, given ? "the intervention's" : "the recorded");
    status.textContent = preset ? preset.note : "";
    field("edit-output").focus();
  }

  function edit() {
    const kind = form.querySelector('input[name="kind"]:checked').value;
    if (kind === "message") {
      const text = field("edit-output").value;
      if (kept.length && field("edit-keep-calls").checked) return { kind: "reply", content: text, tool_calls: kept };
      return { kind, text };
    }
    if (kind === "input") return { kind, text: field("edit-input").value, mode: field("edit-input-mode").value };
    if (kind === "tool_result") {
      const r = recorded.tool_results[Number(field("edit-result-index").value)];
      return { kind, index: r ? r.index : 0, content: field("edit-result").value };
    }
    const text = field("edit-call-args").value;
    let args = text;
    try { const parsed = JSON.parse(text); if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) args = parsed; } catch (e) { args = text; }
    return { kind, index: Number(field("edit-call-index").value), name: field("edit-call-name").value, arguments: args };
  }

  async function start(verdict) {
    const repeats = verdict ? Number(field("edit-repeats").value) : 1;
    status.textContent = "starting…";
    const body = { trace: panel.dataset.trace, at: recorded.step, edit: edit(), repeats, verdict };
    const r = await postJSON("/replay-jobs", body);
    if (!r.ok) { status.textContent = "refused (" + r.status + "): " + (r.data.error || ""); return; }
    location.href = r.data.url;
  }

  for (const radio of form.querySelectorAll('input[name="kind"]')) {
    radio.addEventListener("change", () => showKind(radio.value));
  }
  form.addEventListener("submit", (e) => { e.preventDefault(); start(false); });
  field("edit-verify").addEventListener("click", () => start(true));
  field("edit-close").addEventListener("click", () => { panel.hidden = true; });
  document.addEventListener("click", (e) => {
    const button = e.target.closest ? e.target.closest("button.change-step") : null;
    if (!button) return;
    e.preventDefault();
    let calls = [];
    try { calls = JSON.parse(button.dataset.calls || "[]"); } catch (err) { calls = []; }
    let text = null;  // the intervention's own text, as JSON (never the escaped form shown)
    try { text = button.dataset.text === undefined ? null : JSON.parse(button.dataset.text); } catch (err) { text = null; }
    const preset = typeof text === "string"
      ? { kind: "message", text, tool_calls: Array.isArray(calls) ? calls : [], note: button.dataset.note || "" }
      : null;
    open(Number(button.dataset.step), preset);
  });
}

function liveTokens(tokens, unreported) {
  // A live reply that reports no usage is unknown, not 0 tokens: the count says so.
  if (!unreported) return tokens + " tokens (live)";
  const calls = unreported === 1 ? "1 live call" : unreported + " live calls";
  return tokens + " tokens (live; " + calls + " did not report usage)";
}

function renderAttempt(a) {
  const box = el("section", null, "attempt state-" + a.state);
  box.id = "attempt-" + a.number;
  const head = el("h3", "replay " + (a.number + 1) + " · branch " + a.branch + " · " + a.state);
  box.appendChild(head);
  const c = a.counts;
  const line = el("p", c.replayed + " replayed · " + c.edited + " edited · " + c.live + " live · " +
    liveTokens(a.tokens, a.unreported), "counts");
  box.appendChild(line);
  const calls = el("ol", null, "calls");
  for (const call of a.calls) {
    const origin = call.origin === "cached" ? "replayed" : call.origin;
    const item = el("li", origin + " · " + call.agent + (call.replay_of !== null && call.replay_of !== undefined ? " · recorded step " + call.replay_of : "") +
      (call.tokens === null ? " · tokens not reported" : call.tokens ? " · " + call.tokens + " tokens" : ""),
      "call origin-" + call.origin);
    calls.appendChild(item);
  }
  box.appendChild(calls);
  if (a.answer !== null || a.success !== null) {
    const verdict = a.success === null ? "" : (a.success ? " — matches the reference" : " — does not match the reference");
    box.appendChild(el("p", "answer: " + (a.answer === null ? "-" : a.answer) + verdict,
      "answer " + (a.success === true ? "outcome-success" : a.success === false ? "outcome-failure" : "")));
  }
  if (a.program_failed) box.appendChild(el("p", "the program failed (exit status " + a.exit_code + "): see its output below", "error"));
  if (a.error) box.appendChild(el("p", a.error, "error"));
  if (a.replay) {
    const link = el("a", "open the branch beside the original", "branch-link");
    link.href = a.replay;
    box.appendChild(link);
  }
  const out = el("details", null, "output");
  out.open = a.state === "running";
  out.appendChild(el("summary", "program output"));
  out.appendChild(el("pre", a.stdout + (a.stderr ? "\n[stderr]\n" + a.stderr : ""), "stdout"));
  box.appendChild(out);
  const cmd = el("details", null, "command");
  cmd.appendChild(el("summary", "the same from the command line"));
  cmd.appendChild(el("pre", a.command));
  box.appendChild(cmd);
  return box;
}

function setupJobPage() {
  const root = document.getElementById("job");
  if (!root) return;
  const state = document.getElementById("job-state");
  const list = document.getElementById("attempts");
  const verdict = document.getElementById("job-verdict");
  const cancel = document.getElementById("job-cancel");
  const openStates = {};
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    await postJSON(root.dataset.url + "/cancel");
  });
  const poll = async () => {
    let r;
    try { r = await (await fetch(root.dataset.url + "/status")).json(); } catch (e) { setTimeout(poll, 1000); return; }
    state.textContent = r.state + (r.message ? " — " + r.message : "");
    root.dataset.state = r.state;
    for (const d of list.querySelectorAll("details.output")) openStates[d.parentElement.id] = d.open;
    list.replaceChildren(...r.attempts.map(renderAttempt));
    for (const d of list.querySelectorAll("details.output")) {
      if (d.parentElement.id in openStates && r.state === "running") d.open = openStates[d.parentElement.id];
    }
    if (r.verdict) {
      verdict.hidden = false;
      verdict.replaceChildren();
      const rate = r.flip_rate === null ? "-" : Math.round(100 * r.flip_rate) + "%";
      const ci = r.flip_rate_ci ? " (95% CI " + Math.round(100 * r.flip_rate_ci[0]) + "–" + Math.round(100 * r.flip_rate_ci[1]) + "%)" : "";
      verdict.appendChild(el("p", "verdict: " + r.verdict, "verdict verdict-" + r.verdict));
      verdict.appendChild(el("p", "flip rate " + rate + ci + " · " + r.verdict_reason));
      if (r.dover) { const a = el("a", "DoVer row"); a.href = r.dover; verdict.appendChild(a); }
      if (r.verdict_command) verdict.appendChild(el("pre", r.verdict_command));
    }
    if (r.state === "queued" || r.state === "running") { setTimeout(poll, 400); return; }
    cancel.disabled = true;
  };
  poll();
}

document.addEventListener("DOMContentLoaded", () => { setupEditPanel(); setupJobPage(); });
