// The live page: one tab id per browser tab (sessionStorage, so a reload keeps it and a new tab gets its own),
// an EventSource for everything that happens, and fetch() for what the presenter does. Text from the server is
// only ever put in with textContent: an answer or a tool result can say anything.
"use strict";

const TAB_KEY = "agent-loop-compare-tab";
let tab = sessionStorage.getItem(TAB_KEY);
let meta = null;
let source = null;
const panes = new Map(); // contender -> {el, streaming}

const $ = (id) => document.getElementById(id);

function notice(text, kind) {
  const el = $("notice");
  if (!text) { el.hidden = true; return; }
  el.textContent = text;
  el.className = "notice" + (kind === "info" ? " info" : "");
  el.hidden = false;
}

async function call(path, body) {
  notice("");  // cleared before, not after: an event this request causes may put up a notice of its own
  const response = await fetch(path, {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({tab, ...body}),
  });
  let data = {};
  try { data = await response.json(); } catch (e) { data = {error: `HTTP ${response.status}`}; }
  if (!response.ok) {
    notice(data.error || `HTTP ${response.status}`);
    const error = new Error(data.error);
    error.status = response.status;
    throw error;
  }
  return data;
}

// --- panes -------------------------------------------------------------------------------------------------

function paneFor(name) {
  return panes.get(name);
}

function addMessage(pane, role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  pane.el.querySelector(".chat").appendChild(div);
  div.scrollIntoView({block: "nearest"});
  return div;
}

function addTrace(pane, line) {
  const li = document.createElement("li");
  li.className = (line.is_model ? "model" : "tool") + (line.is_error ? " error" : "");
  const head = `[step ${line.step}] ${line.name} ${line.ms.toFixed(1)} ms `;
  li.appendChild(document.createTextNode(head + line.detail + (line.is_model ? ` [${line.tokens} tokens]` : "")));
  if (line.guard) {
    const guard = document.createElement("span");
    guard.className = "guard";
    guard.textContent = ` [${line.guard}]`;
    li.appendChild(guard);
  }
  const list = pane.el.querySelector(".trace");
  list.appendChild(li);
  list.scrollTop = list.scrollHeight;
  pane.lines.push(line);
  drawWaterfall(pane);
}

// --- the waterfall: the turn's model and tool calls on a time axis, from each trace line's own timings ----------

const SVG_NS = "http://www.w3.org/2000/svg";
const WATERFALL = {width: 600, label: 150, row: 16};

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

function msText(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms >= 10 ? 0 : 1)} ms`;
}

function drawWaterfall(pane) {
  const box = pane.el.querySelector(".waterfall");
  const lines = pane.lines;
  box.replaceChildren();
  // A line kept from before the page knew timings (an old session) has none: no picture rather than a wrong one.
  box.hidden = !lines.length || !lines.every((l) => typeof l.end_ms === "number");
  if (box.hidden) return;
  const {width, label, row} = WATERFALL;
  const axis = width - label - 10;
  const starts = lines.map((l) => l.end_ms - l.ms);
  const origin = Math.min(...starts);
  // A person's wait for an approval (a typed gap from the server, never guessed from a pause in the lines) is the
  // person's time, not the agent's: the axis leaves it out, and a marker says where it was and how long.
  const waits = (pane.waits || []).filter((w) => w.end > w.start);
  const waited = (t) => waits.reduce((sum, w) => sum + Math.max(0, Math.min(t, w.end) - w.start), 0);
  const end = Math.max(...lines.map((l) => l.end_ms));
  const total = Math.max(end - origin - (waited(end) - waited(origin)), 0.001);
  const x = (t) => label + ((t - origin - (waited(t) - waited(origin))) / total) * axis;
  const base = lines.length * row + 4;
  const svg = svgEl("svg", {viewBox: `0 0 ${width} ${base + 18}`, role: "img",
                            "aria-label": "the turn's model and tool calls on a time axis"});
  lines.forEach((l, i) => {
    const y = i * row + 2;
    const kind = l.is_model ? "model" : "tool";
    const g = svgEl("g", {class: `call ${kind}${l.is_error ? " error" : ""}${l.guard ? " guarded" : ""}`});
    if (l.guard) g.setAttribute("data-guard", l.guard);
    const name = `[step ${l.step}] ${l.name}`;
    g.appendChild(svgEl("title", {}, `${name}: ${msText(l.ms)}, from ${msText(starts[i] - origin)}` +
                                     (l.guard ? ` · ${l.guard}` : "")));
    g.appendChild(svgEl("text", {x: 2, y: y + 11}, name.length > 22 ? name.slice(0, 21) + "…" : name));
    const left = x(starts[i]);
    const barWidth = Math.max(x(l.end_ms) - left, 1.5);
    g.appendChild(svgEl("rect", {x: left.toFixed(1), y: y + 2, width: barWidth.toFixed(1), height: row - 5, rx: 2}));
    if (l.guard) {
      const after = left + barWidth + 4;
      const fits = after < width - 140;
      g.appendChild(svgEl("text", {class: "guard", x: (fits ? after : left - 4).toFixed(1), y: y + 11,
                                   "text-anchor": fits ? "start" : "end"}, `⚑ ${l.guard}`));
    }
    svg.appendChild(g);
  });
  for (const w of waits) {
    if (w.end < origin || w.start > end) continue;
    const at = x(w.start);
    const g = svgEl("g", {class: "wait", "data-wait-ms": (w.end - w.start).toFixed(0)});
    g.appendChild(svgEl("title", {}, `waiting for your answer: ${msText(w.end - w.start)} (not the agent's time)`));
    g.appendChild(svgEl("line", {x1: at.toFixed(1), y1: 0, x2: at.toFixed(1), y2: base}));
    g.appendChild(svgEl("text", {x: (at + 3).toFixed(1), y: base - 3}, `you: ${msText(w.end - w.start)}`));
    svg.appendChild(g);
  }
  svg.appendChild(svgEl("line", {x1: label, y1: base, x2: label + axis, y2: base}));
  for (let k = 0; k <= 4; k++) {
    const tx = label + (k / 4) * axis;
    svg.appendChild(svgEl("text", {x: tx.toFixed(1), y: base + 14,
                                   "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle"},
                          msText((total * k) / 4)));
  }
  box.appendChild(svg);
}

function setMeter(pane, tokens) {
  pane.el.querySelector(".meter").textContent = `${tokens.toLocaleString()} tokens`;
}

function setStop(pane, text, kind) {
  const badge = pane.el.querySelector(".stop");
  badge.hidden = !text;
  badge.textContent = text || "";
  badge.className = "badge stop " + (kind || "");
}

function setCartBadge(pane, report) {
  const badge = pane.el.querySelector(".cart");
  const check = report && report.cart_check;
  if (!check || check === "no figure") { badge.hidden = true; badge.dataset.check = ""; return; }
  badge.hidden = false;
  badge.dataset.check = check;
  badge.className = "badge cart " + check;
  const said = (report.answer_amounts || []).join(", ");
  badge.textContent = check === "stale"
    ? `stale: the answer says ${said}, the store has ${report.cart_total}`
    : `store agrees: ${report.cart_total}`;
}

// One box per waiting request, each answering only the request it shows (a pause may list several).
function showApproval(pane, request) {
  const list = pane.el.querySelector(".approvals");
  if ([...list.children].some((box) => box.dataset.request === request.id)) return;
  const box = $("approval-template").content.firstElementChild.cloneNode(true);
  box.dataset.request = request.id;
  box.querySelector(".reason").textContent =
    `Approve ${request.tool}(${JSON.stringify(request.args)})? ${request.reason}`;
  box.querySelector(".yes").addEventListener("click", () => answer(pane, request.id, true));
  box.querySelector(".no").addEventListener("click", () => answer(pane, request.id, false));
  list.appendChild(box);
  setStop(pane, "awaiting approval", "waiting");
}

function hideApproval(pane, id) {
  for (const box of [...pane.el.querySelector(".approvals").children]) {
    if (!id || box.dataset.request === id) box.remove();
  }
}

function renderPane(state) {
  const el = $("pane-template").content.firstElementChild.cloneNode(true);
  el.dataset.pane = state.contender;
  el.querySelector(".name").textContent = state.contender;
  el.querySelector(".desc").textContent = state.description;
  const note = el.querySelector(".note");
  const warn = state.error || state.note;
  note.hidden = !warn;
  note.textContent = warn || "";
  const pane = {el, streaming: null, name: state.contender, lines: [], waits: [], pausedAt: null};
  panes.set(state.contender, pane);
  for (const m of state.transcript) addMessage(pane, m.role, m.text);
  for (const line of state.trace) addTrace(pane, line);
  setMeter(pane, state.tokens);
  if (state.busy) setStop(pane, "running", "running");
  else if (state.last) finished(pane, state.last, false);
  for (const request of state.pending) showApproval(pane, request);
  el.querySelector(".rewind").addEventListener("click", () => rewind(pane));
  return el;
}

function finished(pane, report, live) {
  if (report.error) setStop(pane, "error: " + report.error, "stopped");
  else if (report.stop_reason === "awaiting approval") setStop(pane, report.stop_reason, "waiting");
  else setStop(pane, report.stop_reason, report.done ? "done" : "stopped");
  setCartBadge(pane, report);
  if (live) {
    if (pane.streaming) { pane.streaming.remove(); pane.streaming = null; }
    if (report.answer) addMessage(pane, "assistant", report.answer);
    setMeter(pane, report.tokens || 0);
  }
}

function render(state) {
  panes.clear();
  const box = $("panes");
  box.replaceChildren(...state.panes.map(renderPane));
  $("model").textContent = state.model;
  const s = state.settings;
  for (const input of document.querySelectorAll("#contenders input")) input.checked = s.contenders.includes(input.value);
  $("persona").value = s.persona;
  $("persona").disabled = !state.scripted;
  $("max_steps").value = s.max_steps;
  $("max_tokens").value = s.max_tokens ?? "";
  $("max_duration").value = s.max_duration ?? "";
  $("approval_gate").checked = s.approval_gate;
  $("pending").hidden = true;  // what is shown is what is applied
  $("apply").classList.remove("on");
  setInjected(state.injected);
  if (state.reports.length) showReport(state.reports.includes("scenario") ? "scenario" : state.reports[0]);
}

function setInjected(on) {
  const button = $("inject");
  button.classList.toggle("on", on);
  button.textContent = on ? "Remove the prompt injection" : "Plant a prompt injection";
  button.dataset.on = on ? "1" : "";
}

function showReport(kind) {
  const frame = $("report");
  frame.src = `/api/report/${kind}?tab=${encodeURIComponent(tab)}`;
  frame.hidden = false;
}

// --- events --------------------------------------------------------------------------------------------------

const handlers = {
  hello: (e) => render(e.state),
  state: (e) => render(e.state),
  turn_start: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    if (e.question) addMessage(pane, "user", e.question);
    if (e.what === "resume") {
      // The turn its pause cut goes on: kept whole, the person's wait marked as a gap of its own.
      if (typeof pane.pausedAt === "number" && typeof e.at_ms === "number") {
        pane.waits.push({start: pane.pausedAt, end: e.at_ms});
      }
    } else {
      pane.el.querySelector(".trace").replaceChildren();
      pane.lines = [];
      pane.waits = [];
    }
    pane.pausedAt = null;
    drawWaterfall(pane);
    hideApproval(pane);
    setMeter(pane, 0);
    setStop(pane, "running", "running");
    setCartBadge(pane, null);
  },
  trace: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    addTrace(pane, e.event);
    setMeter(pane, e.tokens);
  },
  token: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    // Each model call streams a reply of its own: only the last one's text is the answer.
    if (pane.streaming && pane.streaming.dataset.step !== String(e.step)) { pane.streaming.remove(); pane.streaming = null; }
    if (!pane.streaming) {
      pane.streaming = addMessage(pane, "assistant streaming", "");
      pane.streaming.dataset.step = String(e.step);
    }
    if (e.kind === "plan") {
      let plan = pane.streaming.querySelector(".plan");
      if (!plan) { plan = document.createElement("span"); plan.className = "plan"; pane.streaming.prepend(plan); }
      plan.textContent += e.text;
    } else {
      pane.streaming.appendChild(document.createTextNode(e.text));
    }
  },
  approval: (e) => { const pane = paneFor(e.pane); if (pane) showApproval(pane, e.request); },
  approval_done: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    hideApproval(pane, e.id);
    if (typeof e.asked_ms === "number" && typeof e.answered_ms === "number") {
      pane.waits.push({start: e.asked_ms, end: e.answered_ms});
    }
    // A pause of several requests goes on only once each has its answer.
    if (pane.el.querySelector(".approvals").children.length) setStop(pane, "awaiting approval", "waiting");
    else setStop(pane, "running", "running");
  },
  finished_earlier: (e) => {
    // The last turn was cut short (an outage, a cancel, a restart): it was finished before this one was asked.
    const pane = paneFor(e.pane);
    if (!pane || !e.answer) return;
    const said = addMessage(pane, "assistant", e.answer);
    const asked = [...pane.el.querySelectorAll(".chat .msg.user")].pop();
    if (asked) asked.before(said);  // it answers the question before the one just sent
  },
  turn_end: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    if (e.report.stop_reason === "awaiting approval") pane.pausedAt = e.at_ms;  // the wait starts here
    finished(pane, e.report, true);
  },
  changed: (e) => {
    const said = e.changed.map((c) => `${c.pane}: removed ${c.title}, cart now ${c.cart_total}`).join("; ");
    notice(`Changed behind the agents' backs: ${said}. Now ask "What is my cart total now?"`, "info");
  },
  injection: (e) => setInjected(e.injected),
  rewound: (e) => {
    const pane = paneFor(e.pane);
    if (!pane) return;
    const chat = pane.el.querySelector(".chat");
    chat.replaceChildren();
    for (const m of e.transcript) addMessage(pane, m.role, m.text);
    setStop(pane, "rewound", "");
    setCartBadge(pane, null);
  },
  job: (e) => {
    $("job").textContent = e.status === "running" ? `${e.kind} running…`
      : e.status === "failed" ? `${e.kind} failed: ${e.error}` : `${e.kind} done`;
    if (e.status === "done") showReport(e.kind);
  },
};

function connect() {
  if (source) source.close();
  source = new EventSource(`/api/events?tab=${encodeURIComponent(tab)}`);
  source.onopen = () => { $("conn").textContent = "live"; $("conn").className = "conn live"; };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    const handle = handlers[event.type];
    if (handle) handle(event);
  };
  source.onerror = async () => {
    $("conn").textContent = "reconnecting…";
    $("conn").className = "conn down";
    // A tab id the server refuses (another data folder, a damaged one) will never connect: start a new tab.
    const response = await fetch(`/api/state?tab=${encodeURIComponent(tab)}`).catch(() => null);
    if (response && (response.status === 400 || response.status === 403)) {
      source.close();
      await newTab();
      connect();
    }
  };
}

async function newTab() {
  const response = await fetch("/api/tabs", {method: "POST", headers: {"Content-Type": "application/json"}});
  const data = await response.json();
  tab = data.tab;
  sessionStorage.setItem(TAB_KEY, tab);
}

// --- actions -------------------------------------------------------------------------------------------------

async function send(text) {
  if (!text.trim()) { notice("Type a question first."); return; }
  try {
    await call("/api/turn", {text});
    $("text").value = "";
  } catch (e) { /* said in the notice */ }
}

async function answer(pane, id, approved) {
  try { await call("/api/approve", {pane: pane.name, id, approved}); } catch (e) { /* said */ }
}

async function rewind(pane) {
  try { await call("/api/rewind", {pane: pane.name}); } catch (e) { /* said */ }
}

function number(id) {
  const value = $(id).value.trim();
  return value === "" ? null : Number(value);
}

async function apply() {
  const contenders = [...document.querySelectorAll("#contenders input:checked")].map((i) => i.value);
  const settings = {
    contenders, max_steps: number("max_steps"), max_tokens: number("max_tokens"),
    max_duration: number("max_duration"), approval_gate: $("approval_gate").checked,
  };
  if (meta.scripted) settings.persona = $("persona").value;
  try { await call("/api/settings", settings); } catch (e) { /* said */ }
}

async function boot() {
  meta = await (await fetch("/api/meta")).json();
  for (const [name, description] of Object.entries(meta.contenders)) {
    const label = document.createElement("label");
    label.title = description;
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = name;
    label.append(input, " " + name);
    $("contenders").appendChild(label);
  }
  for (const [name, description] of Object.entries(meta.personas)) {
    const option = new Option(name, name);
    option.title = description;
    $("persona").appendChild(option);
  }
  for (const s of meta.scenarios) {
    const option = new Option(`${s.name}: ${s.description}`, s.name);
    $("scenario").appendChild(option);
  }
  $("text").placeholder = meta.scripted
    ? "Ask every pane (the scripted model knows: " + meta.known_goals.join(" | ") + ")"
    : "Ask every pane the same question";
  $("ask").addEventListener("submit", (e) => { e.preventDefault(); send($("text").value); });
  for (const button of document.querySelectorAll("button.goal")) {
    button.addEventListener("click", () => send(button.dataset.goal === "seed" ? meta.seed_goal : button.dataset.goal));
  }
  $("apply").addEventListener("click", apply);
  // A choice waits for Apply (the panes are closed and rebuilt then): the page says so as soon as one is made.
  document.querySelector(".controls").addEventListener("change", (e) => {
    if (e.target.closest("fieldset") && !e.target.closest("fieldset").querySelector("#stale")) {
      $("pending").hidden = false;
      $("apply").classList.add("on");
    }
  });
  $("stale").addEventListener("click", () => call("/api/stale", {}).catch(() => {}));
  $("inject").addEventListener("click", () => call("/api/injection", {on: !$("inject").dataset.on}).catch(() => {}));
  $("stop").addEventListener("click", () => call("/api/cancel", {}).catch(() => {}));
  $("run-scenario").addEventListener("click", () => call("/api/scenario", {scenarios: [$("scenario").value]}).catch(() => {}));
  $("run-eval").addEventListener("click", () =>
    call("/api/eval", {scenarios: [$("scenario").value], runs: Number($("eval-runs").value)}).catch(() => {}));
  if (!tab) await newTab();
  connect();
}

boot();
