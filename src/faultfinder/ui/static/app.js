// faultfinder ui: jump to a step, search a trace, load a step's inputs, start a run.
// Trace content only ever reaches the page as server-escaped HTML or via textContent.
"use strict";

function openStep(id) {
  const el = document.getElementById(id);
  if (el && el.tagName === "DETAILS") {
    el.open = true;
    el.scrollIntoView({ block: "start" });
  }
}

function loadInputs(details) {
  const url = details.dataset.inputs;
  const box = details.querySelector(".inputs");
  if (!url || !box || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  fetch(url).then((r) => r.json()).then((messages) => {
    box.replaceChildren();
    const title = document.createElement("p");
    title.className = "muted";
    title.textContent = messages.length + " input messages";
    box.appendChild(title);
    for (const m of messages) {
      const div = document.createElement("div");
      div.className = "msg";
      const role = document.createElement("span");
      role.className = "role";
      role.textContent = m.role + (m.name ? " (" + m.name + ")" : "");
      const pre = document.createElement("pre");
      pre.textContent = m.content;
      div.append(role, pre);
      box.appendChild(div);
    }
  }).catch(() => { box.textContent = "could not load the inputs"; });
}

function setupSteps() {
  const steps = document.getElementById("steps");
  if (!steps) return;
  steps.addEventListener("toggle", (e) => {
    if (e.target.open) loadInputs(e.target);
  }, true);
  const search = document.getElementById("step-search");
  const count = document.getElementById("search-count");
  search.addEventListener("input", () => {
    const q = search.value.trim().toLowerCase();
    let hits = 0;
    for (const d of steps.querySelectorAll("details.step")) {
      const hit = q !== "" && d.textContent.toLowerCase().includes(q);
      d.classList.toggle("hit", hit);
      d.classList.toggle("hidden", q !== "" && !hit);
      if (hit) hits += 1;
    }
    count.textContent = q ? hits + " matching steps" : "";
  });
  document.getElementById("jump").addEventListener("submit", (e) => {
    e.preventDefault();
    const n = document.getElementById("jump-to").value;
    if (n !== "") { location.hash = "step-" + n; openStep("step-" + n); }
  });
  window.addEventListener("hashchange", () => openStep(location.hash.slice(1)));
  if (location.hash.startsWith("#step-")) openStep(location.hash.slice(1));
}

function setupFilters() {
  const form = document.getElementById("filters");
  if (!form) return;
  for (const s of form.querySelectorAll("select[data-autosubmit]")) {
    s.addEventListener("change", () => form.submit());
  }
}

function setupRun() {
  const button = document.getElementById("run-attribution");
  if (!button) return;
  const status = document.getElementById("run-status");
  const token = document.querySelector('meta[name="ff-token"]').content;
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "starting…";
    const started = await fetch(button.dataset.url, {
      method: "POST", headers: { "X-Faultfinder-Token": token },
    });
    if (!started.ok) { status.textContent = "refused: " + started.status; button.disabled = false; return; }
    const { job } = await started.json();
    const poll = async () => {
      const r = await (await fetch("/jobs/" + job)).json();
      status.textContent = r.state + " · " + r.calls + " model calls · " + r.tokens + " tokens" +
        (r.message ? " · " + r.message : "");
      if (r.state === "done") { location.href = location.pathname + "?a=" + r.answer + "#answers"; return; }
      if (r.state === "failed") { button.disabled = false; return; }
      setTimeout(poll, 500);
    };
    poll();
  });
}

document.addEventListener("DOMContentLoaded", () => { setupSteps(); setupFilters(); setupRun(); });
