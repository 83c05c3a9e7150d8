// The agent's control panel (AgentPanel). State comes down as small traitlets that only the
// kernel writes; a press goes up as a custom message {cmd, ...}. The protocol is described in
// nbagent/viz/panel/widget.py. Texts from the kernel go in with textContent only.

import { OWN, button, h, keepKeys, setEnabled, setOptions, textBox } from "./dom.js";
import { GraphView } from "./graph.js";
import { followTheme } from "./theme.js";

const PROTOCOL = 1;

// name, label, class, tooltip: the run buttons, in the ipywidgets panel's order
const RUN_BUTTONS = [
  ["step", "Run step", "nbagent-btn-step", "Run the next step"],
  ["run", "Run to end", "nbagent-btn-run", "Run steps until the task is done (in the background)"],
  ["stop", "Stop", "nbagent-btn-stop", "Stop after the running step"],
  ["undo", "Undo", "nbagent-btn-undo", "Take back the last step"],
  ["retry", "Retry", "nbagent-btn-retry", "Run the failed step again"],
  ["skip", "Skip", "nbagent-btn-skip", "Mark the failed step done without running it, and go on"],
  ["abandon", "Abandon", "nbagent-btn-abandon", "End the task without keeping what it did"],
  ["release", "Release", "nbagent-btn-release", "Let the held step(s) run (is_ready=True)"],
];
const TAKES_INPUT = new Set(["step", "run", "retry"]);

function heading(text) {
  return h("div", { class: "nbagent-h", role: "heading", "aria-level": "3", text });
}

function field(label, value, cls = "") {
  return h("div", { class: `nba-field ${cls}` }, h("span", { class: "nba-field-name", text: label }),
    h("div", { class: "nba-field-value", text: value }));
}

export function renderAgent({ model, el }) {
  const send = (cmd, args = {}) => model.send({ cmd, ...args });
  const stops = [];
  const on = (name, fn) => {
    model.on(`change:${name}`, fn);
    stops.push(() => model.off(`change:${name}`, fn));
  };

  const root = h("div", { class: "nbagent-panel nbagent-aw", "data-nba-theme": "light" });
  stops.push(followTheme(root, el));
  keepKeys(root);

  // ----- task row: picker, new-task box and button
  const taskPicker = h("select", { class: "nba-select nbagent-task-picker", "aria-label": "Task", [OWN]: "true" });
  taskPicker.addEventListener("change", () => send("select_task", { task: taskPicker.value }));
  const newTask = () => {
    const text = newTaskBox.value;
    newTaskBox.value = "";
    send("new_task", { text });
  };
  const newTaskBox = textBox("nbagent-new-task-text", "New task: what should the agent do?", "New task input", newTask);
  const newButton = button("New task", "nbagent-btn-new", "Create a task with this input", newTask);
  const taskRow = h("div", { class: "nba-row" },
    h("label", { class: "nba-label" }, "Task ", taskPicker), newTaskBox, newButton);

  // ----- run buttons and the box whose text the next step gets as input
  const injectBox = textBox("nbagent-inject", "Input for the next step (optional)", "Input for the next step");
  const buttons = { new: newButton };
  for (const [name, label, cls, tip] of RUN_BUTTONS) {
    buttons[name] = button(label, cls, tip, () => {
      if (TAKES_INPUT.has(name)) {
        const input = injectBox.value;
        injectBox.value = ""; // the step takes it; the kernel puts it back if the step fails
        send(name, { input });
      } else {
        send(name);
      }
    });
  }
  const runRow = h("div", { class: "nba-row", role: "group", "aria-label": "Run controls" },
    ...RUN_BUTTONS.map(([name]) => buttons[name]), injectBox);

  // ----- status line (a live region), approvals, graph, side column
  const status = h("div", { class: "nbagent-status nba-status", role: "status", "aria-live": "polite" });
  const approvals = h("div", { class: "nbagent-approvals" });
  const graphBox = h("div", { class: "nbagent-livegraph nba-graph" });
  const graph = new GraphView(graphBox, (step) => send("inspect", { step }));
  const tokensNote = h("div", { class: "nba-note" });
  const tokensText = document.createTextNode("");
  const tokens = h("div", { class: "nbagent-tokens" },
    tokensNote, h("div", { class: "nba-tail" }, h("pre", { class: "nba-pre" }, tokensText)));
  const stepPicker = h("select", { class: "nba-select nbagent-step-picker", "aria-label": "Step to inspect", [OWN]: "true" });
  stepPicker.addEventListener("change", () => send("inspect", { step: stepPicker.value }));
  const inspector = h("div", { class: "nbagent-inspector", "aria-label": "Step inspector", role: "region" });
  const transcript = h("div", { class: "nbagent-transcript", role: "region", "aria-label": "Transcript" });
  const side = h("div", { class: "nba-side" },
    heading("Streaming"), tokens, heading("Inspect step"), stepPicker, inspector,
    heading("Transcript"), transcript);
  root.append(taskRow, runRow, status, approvals,
    h("div", { class: "nba-main" }, h("div", { class: "nbagent-graphbox" }, graphBox), side));
  el.append(root);

  if (model.get("protocol") !== PROTOCOL) {
    status.textContent = `this front end speaks panel protocol ${PROTOCOL}, the kernel ${model.get("protocol")}: reinstall nbagent`;
  }

  // ----- drawing each piece from its traitlet
  const drawButtons = () => {
    const flags = model.get("buttons") || {};
    for (const [name, b] of Object.entries(buttons)) setEnabled(b, !!flags[name]);
    taskPicker.disabled = flags.task_picker === false;
  };

  const drawTasks = () => {
    const tasks = model.get("tasks") || [];
    setOptions(taskPicker, tasks.map((t) => [t.id, t.label]), model.get("task") || "");
  };

  const drawStatus = () => {
    const s = model.get("status") || {};
    const parts = [];
    if (s.state) parts.push(h("span", { class: `nba-badge nba-s-${s.colour || "none"}`, text: s.state }));
    if (s.task) parts.push(h("span", {}, "task ", h("code", { text: s.task })));
    for (const p of s.parts || []) parts.push(h("span", { class: s.state === "no task" ? "nba-note" : "", text: p }));
    if (s.error) parts.push(h("span", { class: "nba-err", text: s.error }));
    if (s.answer) parts.push(h("span", {}, "answer: ", h("b", { text: s.answer })));
    if (s.notice) parts.push(h("span", { class: s.notice_error ? "nba-err" : "nba-note", text: s.notice }));
    const line = [];
    parts.forEach((p, i) => line.push(...(i ? [" · ", p] : [p])));
    status.replaceChildren(...line);
  };

  const drawApprovals = () => {
    const calls = model.get("approvals") || [];
    approvals.replaceChildren(...calls.map((c) => approvalRow(c, send)));
  };

  const drawTokens = () => {
    const text = model.get("tokens") || "";
    const shown = tokensText.data;
    if (text.startsWith(shown)) tokensText.appendData(text.slice(shown.length)); // the usual case
    else tokensText.data = text;
    tokensNote.textContent = model.get("tokens_note") || "";
  };

  const drawGraph = () => graph.draw(model.get("dot") || "");
  const drawNodes = () => {
    const nodes = model.get("nodes") || [];
    graph.update(nodes, model.get("selected"));
    const steps = nodes.filter((n) => n.name.startsWith("s"));
    setOptions(stepPicker, steps.map((n) => [n.step, `${n.head}${n.text ? ` · ${n.text}` : ""}`]), model.get("selected") || "");
  };

  const drawInspector = () => {
    // keep the keyboard focus on the same control across a redraw
    const focus = root.getRootNode().activeElement; // the document's, or marimo's shadow root's
    const active = focus && inspector.contains(focus) ? focus.className : null;
    inspector.replaceChildren(...inspectorParts(model.get("inspector") || {}, model.get("approvals") || [], send));
    if (active) {
      const again = inspector.getElementsByClassName(active.split(" ").pop())[0];
      if (again) again.focus();
    }
  };

  const drawTranscript = () => transcript.replaceChildren(...transcriptParts(model.get("transcript") || {}));
  const drawInject = () => {
    const text = model.get("inject_text") || "";
    if (injectBox.value !== text && root.getRootNode().activeElement !== injectBox) injectBox.value = text;
  };

  on("buttons", drawButtons);
  on("tasks", drawTasks);
  on("task", drawTasks);
  on("status", drawStatus);
  on("approvals", () => { drawApprovals(); drawInspector(); });
  on("tokens", drawTokens);
  on("tokens_note", drawTokens);
  on("dot", drawGraph);
  on("nodes", drawNodes);
  on("selected", drawNodes);
  on("inspector", drawInspector);
  on("transcript", drawTranscript);
  on("inject_text", drawInject);
  drawButtons(); drawTasks(); drawStatus(); drawApprovals(); drawTokens(); drawNodes();
  drawInspector(); drawTranscript(); drawInject(); drawGraph();

  return () => {
    for (const stop of stops) stop();
  };
}

function approvalRow(call, send, where = "row") {
  const args = textBox("nbagent-approval-args", "arguments (JSON)", `Arguments for ${call.tool}`);
  args.value = call.args;
  const reason = textBox("nbagent-approval-reason", "reason (for Reject)", `Reason to reject ${call.tool}`);
  const approve = button("Approve", "nbagent-btn-approve", "Run this call as the model asked",
    () => send("approve", { call: call.call }));
  const edit = button("Edit", "nbagent-btn-edit", "Run it with the arguments in the box",
    () => send("edit", { call: call.call, arguments: args.value }));
  const reject = button("Reject", "nbagent-btn-reject", "Do not run it; the model gets the reason",
    () => send("reject", { call: call.call, reason: reason.value }));
  return h("div", { class: `nbagent-approval-row nba-approval-${where}`, role: "group", "aria-label": `Approve ${call.label}?` },
    h("span", { class: "nba-approval-call" }, h("b", { text: "approve? " }), h("code", { text: call.label })),
    h("span", { class: "nba-group" }, args, approve, edit),
    h("span", { class: "nba-group" }, reason, reject));
}

function inspectorParts(step, calls, send) {
  if (!step.step) return [h("div", { class: "nba-note", text: "no step to inspect" })];
  const parts = [h("div", { class: "nba-note" }, "step ", h("b", { text: step.head }), " ", h("code", { text: step.short }))];
  if (step.input) parts.push(field("input", step.input));
  if (step.thought) parts.push(field("thought", step.thought));
  for (const t of step.tools || []) {
    parts.push(field(`tool ${t.name}(${t.args})`, t.result, t.error ? "nba-err-box" : ""));
  }
  if (step.output) parts.push(field("output", step.output));
  if (step.error) {
    parts.push(h("div", { class: "nba-err", text: step.error }));
    parts.push(h("details", {}, h("summary", { text: "traceback", [OWN]: "true" }), h("pre", { class: "nba-pre", text: step.traceback })));
  }
  const actions = [];
  if (step.can_goto) {
    actions.push(button("Undo back to here", "nbagent-btn-goto",
      "Take back every step after this one (they stay drawn, dashed)", () => send("goto", { step: step.step })));
  }
  if (step.can_fork) {
    const forkInput = textBox("nbagent-fork-input", "input for the new step (optional)", "Input for the forked step");
    actions.push(h("span", { class: "nba-group" }, forkInput, button("Fork from here", "nbagent-btn-fork",
      "Go back to just before this step and queue a new one in its place", () => send("fork", { step: step.step, input: forkInput.value }))));
  }
  if (step.can_edit) {
    const editInput = textBox("nbagent-edit-input", "the step's input", "New input for this step");
    editInput.value = step.input || "";
    actions.push(h("span", { class: "nba-group" }, editInput, button("Save input", "nbagent-btn-edit-input",
      "Give this queued step this input", () => send("edit_input", { step: step.step, input: editInput.value }))));
  }
  if (actions.length) parts.push(h("div", { class: "nba-row nba-actions", role: "group", "aria-label": "Step actions" }, ...actions));
  const mine = new Set(step.calls || []);
  for (const call of calls) if (mine.has(call.call)) parts.push(approvalRow(call, send, "inspector"));
  return parts;
}

function transcriptParts(data) {
  const messages = data.messages || [];
  const total = data.total || 0;
  const parts = [h("div", { class: "nba-note", text: `Chat · ${total} message${total === 1 ? "" : "s"}` })];
  if (data.earlier) parts.push(h("div", { class: "nba-note", text: `${data.earlier} earlier not shown` }));
  for (const m of messages) {
    const role = ["user", "assistant", "system", "tool"].includes(m.role) ? m.role : "tool";
    parts.push(h("div", { class: `nba-msg nba-m-${role}` },
      h("div", {}, h("span", { class: `nba-badge nba-r-${role}`, text: m.role }), m.name ? h("code", { text: ` ${m.name}` }) : null),
      m.text ? h("div", { class: "nba-msg-text", text: m.text }) : null,
      ...(m.calls || []).map((c) => h("div", {}, h("span", { class: "nba-note", text: "calls " }), h("code", { text: c })))));
  }
  return parts;
}

