// Building the panel's elements. Text always goes in as text nodes (textContent), never as
// HTML: everything the kernel sends may hold what a model, a tool or a person wrote.

/**
 * An element with attributes and children. `text` sets textContent; `on<event>` adds a
 * listener; `false`/`null` attributes are left out; string children become text nodes.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child); // a string is appended as a text node
  }
  return el;
}

/** On a focusable control: JupyterLab's and Notebook 7's shortcuts leave its keys alone
 * (their matcher stops at an element with this attribute, the focused one included). */
export const OWN = "data-lm-suppress-shortcuts";

/** A button that stays focusable when it cannot be pressed (aria-disabled, not disabled):
 * pressing it with Enter must not throw the keyboard focus back to the page's top. */
export function button(label, cls, title, onPress) {
  const b = h("button", { type: "button", class: `nba-btn ${cls}`, title, [OWN]: "true" });
  b.textContent = label;
  b.addEventListener("click", (event) => {
    if (b.getAttribute("aria-disabled") === "true") {
      event.preventDefault();
      return;
    }
    onPress(event);
  });
  return b;
}

export function setEnabled(b, enabled) {
  b.setAttribute("aria-disabled", enabled ? "false" : "true");
}

/** A labelled text box; Enter in it calls `onEnter` (if given). */
export function textBox(cls, placeholder, label, onEnter) {
  const input = h("input", { type: "text", class: `nba-input ${cls}`, placeholder, "aria-label": label, [OWN]: "true" });
  if (onEnter) {
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.isComposing) {
        event.preventDefault();
        onEnter();
      }
    });
  }
  return input;
}

/** Replace a <select>'s options (value, label pairs) only when they changed. */
export function setOptions(select, options, value) {
  const key = JSON.stringify(options);
  if (select.dataset.options !== key) {
    select.replaceChildren(...options.map(([v, label]) => h("option", { value: v, text: label })));
    select.dataset.options = key;
  }
  select.value = value;
}

// keys a control of the panel handles itself: the notebook's shortcuts must not take them
const OWN_KEYS = new Set(["Enter", " ", "ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End"]);

/** Keys pressed on the panel's controls are theirs, not the notebook's: each focusable control
 * carries data-lm-suppress-shortcuts (JupyterLab and Notebook 7 then skip their shortcuts,
 * e.g. Enter or the arrows in command mode), and `root` stops them bubbling further. */
export function keepKeys(root) {
  root.addEventListener("keydown", (event) => {
    const t = event.target;
    if (OWN_KEYS.has(event.key) && t !== root && t.closest && t.closest("button, input, select, g.node, summary")) {
      event.stopPropagation();
    }
  });
}
