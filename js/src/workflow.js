// The workflow panel (WorkflowPanel): start a step-wise run, Step, Run to end, Stop; the
// question a step asks and a box to answer it; what the last step produced; the run graph,
// redrawn as the run's events arrive. State comes down as traitlets (protocol in
// nbagent/viz/workflow_panel.py); a press goes up as {cmd, ...}. Texts go in as text only.

import { button, h, keepKeys, setEnabled, textBox } from "./dom.js";
import { GraphView } from "./graph.js";
import { followTheme } from "./theme.js";

export function renderWorkflow({ model, el }) {
  const send = (cmd, args = {}) => model.send({ cmd, ...args });
  const stops = [];
  const on = (name, fn) => {
    model.on(`change:${name}`, fn);
    stops.push(() => model.off(`change:${name}`, fn));
  };

  const root = h("div", { class: "nbagent-wfpanel nbagent-aw", "data-nba-theme": "light" });
  stops.push(followTheme(root, el));
  keepKeys(root);

  const start = () => {
    const text = message.value;
    message.value = "";
    send("start", { text });
  };
  const message = textBox("nbagent-wf-message", "Your message to the agents", "Message to the agents", start);
  const answer = () => {
    const text = answerBox.value;
    answerBox.value = "";
    send("answer", { text });
  };
  const answerBox = textBox("nbagent-wf-answer", "Your answer", "Your answer to the question", answer);
  const buttons = {
    start: button("Start", "nbagent-btn-start", "Start a run, one step at a time", start),
    step: button("Step", "nbagent-btn-step", "Run one step of the run", () => send("step")),
    run: button("Run to end", "nbagent-btn-run", "Run steps until the run ends (a question waits for its answer)",
      () => send("run")),
    stop: button("Stop", "nbagent-btn-stop", "Stop the run (its context can resume it)", () => send("stop")),
    send: button("Send", "nbagent-btn-send", "Answer the question with the text in the box", answer),
  };
  const status = h("div", { class: "nbagent-status-line nba-status", role: "status", "aria-live": "polite" });
  const question = h("div", { class: "nbagent-q", role: "alert" });
  const events = h("div", { class: "nbagent-wf-events" });
  const graphBox = h("div", { class: "nbagent-livegraph nba-graph" });
  const graph = new GraphView(graphBox, null);
  root.append(
    h("div", { class: "nba-row" }, message, buttons.start),
    h("div", { class: "nba-row", role: "group", "aria-label": "Run controls" }, buttons.step, buttons.run, buttons.stop),
    status, question,
    h("div", { class: "nba-row", role: "group", "aria-label": "Answer" }, answerBox, buttons.send),
    events,
    h("div", { class: "nbagent-graphbox" }, graphBox),
  );
  el.append(root);

  const drawStatus = () => {
    const s = model.get("status") || {};
    status.replaceChildren(s.text || "",
      ...[s.error, s.notice].filter(Boolean).map((t) => h("span", { class: "nba-err", text: ` ${t}` })));
  };
  const drawQuestion = () => {
    const q = model.get("question") || "";
    question.textContent = q ? `Question: ${q}` : "";
    question.hidden = !q;
  };
  const drawButtons = () => {
    const flags = model.get("buttons") || {};
    for (const [name, b] of Object.entries(buttons)) setEnabled(b, !!flags[name]);
    message.disabled = !flags.start;
    answerBox.disabled = !flags.send; // a stopped run takes no answers: the box must not look live
  };
  const drawEvents = () => {
    const list = model.get("events") || [];
    events.replaceChildren(...(list.length ? ["Last step produced:", h("ol", {},
      ...list.map((e) => h("li", {}, h("b", { text: e.name }), e.about ? ` ${e.about}` : "")))] : []));
  };
  const drawGraph = () => graph.draw(model.get("dot") || "");

  on("status", drawStatus);
  on("question", drawQuestion);
  on("buttons", drawButtons);
  on("events", drawEvents);
  on("dot", drawGraph);
  drawStatus(); drawQuestion(); drawButtons(); drawEvents(); drawGraph();

  return () => {
    for (const stop of stops) stop();
  };
}
