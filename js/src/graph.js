// The live step graph: DOT from the kernel, laid out by Graphviz compiled to WebAssembly (in
// this bundle: nothing is fetched), drawn as SVG that a mouse and a keyboard can use.
// Each step node is a button with an aria-label ("Step 2, done: in: ..."); one of them is in
// the Tab order at a time (roving tabindex); arrow keys move between them, Enter or Space
// selects the step in the inspector.

import { Graphviz } from "@hpcc-js/wasm-graphviz";
import { OWN, h } from "./dom.js";
import { morph, parseSvg } from "./svg.js";

let loading = null;
/** One Graphviz per page, loaded on first use. */
export function graphviz() {
  if (loading === null) loading = Graphviz.load();
  return loading;
}

function nodeLabel(info, g) {
  if (!info) return [...g.querySelectorAll("text")].map((t) => t.textContent.trim()).join(" ");
  if (info.label) return info.label;
  const text = info.text ? `: ${info.text}` : "";
  return `Step ${info.number}, ${info.status}${text}`;
}

const KEYS = new Set(["ArrowRight", "ArrowDown", "ArrowLeft", "ArrowUp", "Home", "End", "Enter", " "]);

export class GraphView {
  /** `box` receives the drawing; `onSelect(stepId)` is called when a step node is picked
   * (null: a drawing to read, whose nodes are not controls). */
  constructor(box, onSelect) {
    this.box = box;
    this.onSelect = onSelect;
    this.svg = null;
    this.drawn = null;
    this.wanted = "";
    this.busy = false;
    this.nodes = new Map();
    this.selected = "";
    this.message = h("div", { class: "nba-graph-note", role: "note" });
    this.message.hidden = true;
    box.append(this.message);
    if (!onSelect) return;
    box.addEventListener("click", (event) => {
      const g = event.target.closest && event.target.closest("g.node[data-nba-step]");
      if (!g || !box.contains(g)) return;
      this.focusNode(g);
      this.pick(g);
    });
    box.addEventListener("keydown", (event) => this.onKey(event));
  }

  /** Draw `dot` (the newest call wins; layouts never overlap). */
  async draw(dot) {
    this.wanted = dot;
    if (this.busy) return;
    this.busy = true;
    try {
      while (this.drawn !== this.wanted) {
        const source = this.wanted;
        let gv;
        try {
          gv = await graphviz();
        } catch (err) {
          this.fail("Graphviz (WebAssembly) could not start here", err, source);
          this.drawn = source;
          break;
        }
        try {
          const fresh = parseSvg(gv.layout(source, "svg", "dot"));
          if (this.svg === null) {
            this.svg = fresh;
            this.box.append(fresh);
          } else {
            morph(this.svg, fresh);
          }
          this.message.hidden = true;
        } catch (err) {
          this.fail("this graph could not be laid out", err, source);
        }
        this.drawn = source;
        this.decorate();
      }
    } finally {
      this.busy = false;
    }
  }

  fail(what, err, source) {
    // the DOT text itself, as text: the steps are still readable
    this.message.replaceChildren(
      h("div", { text: `${what}: ${err && err.message ? err.message : err}` }),
      h("pre", { class: "nba-dot-text", text: source }),
    );
    this.message.hidden = false;
  }

  /** Step info from the kernel: name -> {step, number, status, head, text}; and the
   * selected step id. */
  update(nodes, selected) {
    this.nodes = new Map(nodes.map((n) => [n.name, n]));
    this.selected = selected || "";
    this.decorate();
  }

  nodeElements() {
    return this.svg ? [...this.svg.querySelectorAll("g.node")] : [];
  }

  decorate() {
    if (!this.svg) return;
    this.svg.setAttribute("role", "group");
    for (const g of this.svg.querySelectorAll("g.edge, g.graph > text, g.graph > polygon")) {
      g.setAttribute("aria-hidden", "true");
    }
    const elements = this.nodeElements();
    if (!this.onSelect) {
      // a drawing to read: each node is read out as its text, and takes no focus
      this.svg.setAttribute("aria-label", "Run graph");
      for (const g of elements) {
        g.setAttribute("role", "img");
        g.setAttribute("aria-label", nodeLabel(null, g));
        for (const child of g.children) child.setAttribute("aria-hidden", "true");
      }
      return;
    }
    this.svg.setAttribute("aria-label", "Step graph: Tab to a step, arrow keys to move, Enter to inspect it");
    let current = null;
    let chosen = null;
    for (const g of elements) {
      const name = g.getAttribute("data-name") || "";
      const info = this.nodes.get(name);
      g.setAttribute("role", "button");
      g.setAttribute(OWN, "true");
      g.setAttribute("aria-label", nodeLabel(info, g));
      if (info) g.setAttribute("data-nba-step", info.step);
      else g.removeAttribute("data-nba-step");
      for (const child of g.children) child.setAttribute("aria-hidden", "true");
      const isSelected = !!info && info.step === this.selected && (chosen === null || name.startsWith("s"));
      if (isSelected) chosen = g;
      if (g.getAttribute("tabindex") === "0") current = g;
      g.setAttribute("tabindex", "-1");
    }
    for (const g of elements) {
      const on = g === chosen;
      g.classList.toggle("nba-selected", on);
      if (on) g.setAttribute("aria-current", "true");
      else g.removeAttribute("aria-current");
    }
    // the node that keeps focus: the one focused (or last focused), else the selected one
    const focused = elements.find((g) => g === document.activeElement || g.contains(document.activeElement)
      || (g.getRootNode().activeElement === g));
    const keep = focused || (current && elements.includes(current) ? current : null) || chosen || elements[elements.length - 1];
    if (keep) keep.setAttribute("tabindex", "0");
  }

  focusNode(g) {
    for (const other of this.nodeElements()) other.setAttribute("tabindex", other === g ? "0" : "-1");
    g.focus();
  }

  pick(g) {
    const step = g.getAttribute("data-nba-step");
    if (step) this.onSelect(step);
  }

  onKey(event) {
    const g = event.target.closest && event.target.closest("g.node");
    if (!g || !KEYS.has(event.key)) return;
    event.preventDefault();
    event.stopPropagation(); // not the notebook's own shortcuts (arrows, Enter)
    if (event.key === "Enter" || event.key === " ") {
      this.pick(g);
      return;
    }
    const all = this.nodeElements();
    const i = all.indexOf(g);
    const next = {
      ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: all.length - 1,
    }[event.key];
    if (next >= 0 && next < all.length) this.focusNode(all[next]);
  }
}
