// The step graph's SVG: parsed from Graphviz's output, cleaned, and merged into the drawing
// already on the page, so that a redraw keeps each node's elements (keyboard focus stays where
// it was, and CSS can fade a node from one status colour to the next).

const SVG_NS = "http://www.w3.org/2000/svg";

// Graphviz draws with these; anything else (script, foreignObject, image...) is dropped
const ALLOWED = new Set([
  "svg", "g", "title", "path", "polygon", "polyline", "ellipse", "circle", "rect", "line",
  "text", "tspan", "defs", "lineargradient", "radialgradient", "stop", "a",
]);
const TEXT_ELEMENTS = new Set(["text", "tspan", "title"]);

function unsafeAttribute(name, value) {
  const n = name.toLowerCase();
  if (n.startsWith("on") || n === "href" || n === "xlink:href" || n === "style") return true;
  const v = value.toLowerCase();
  return v.includes("javascript:") || (v.includes("url(") && !/^url\(#[\w-]+\)$/.test(v.trim()));
}

/** Remove what a drawing must never carry: elements other than shapes and text, event
 * handlers, links, styles and outside URLs, comments; ids (two panels on one page would
 * share them). Links are unwrapped (their contents stay). */
function clean(node) {
  for (const child of [...node.childNodes]) {
    if (child.nodeType === Node.TEXT_NODE) {
      if (!TEXT_ELEMENTS.has(node.localName.toLowerCase()) && !child.data.trim()) child.remove();
      continue;
    }
    if (child.nodeType !== Node.ELEMENT_NODE) {
      child.remove();
      continue;
    }
    const tag = child.localName.toLowerCase();
    if (!ALLOWED.has(tag) || child.namespaceURI !== SVG_NS) {
      child.remove();
      continue;
    }
    for (const attr of [...child.attributes]) {
      if (unsafeAttribute(attr.name, attr.value)) child.removeAttribute(attr.name);
    }
    if (tag === "g" || tag === "svg") child.removeAttribute("id");
    clean(child);
    if (tag === "a") child.replaceWith(...child.childNodes);
  }
}

/** Graphviz's SVG text -> a clean <svg> element of this document. Each node's and edge's
 * <title> (the DOT name, e.g. "s0") moves to data-name, so no tooltip shows it. */
export function parseSvg(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const root = doc.documentElement;
  if (!root || root.localName !== "svg" || doc.querySelector("parsererror")) {
    throw new Error("Graphviz returned something that is not SVG");
  }
  for (const attr of [...root.attributes]) {
    if (unsafeAttribute(attr.name, attr.value)) root.removeAttribute(attr.name);
  }
  clean(root);
  for (const title of [...root.querySelectorAll("title")]) {
    const g = title.parentElement;
    if (g && g.localName === "g" && g !== root) g.setAttribute("data-name", title.textContent || "");
    title.remove();
  }
  root.removeAttribute("id");
  return document.importNode(root, true);
}

function keyOf(el, counts) {
  const name = el.getAttribute("data-name");
  if (name !== null) return `${el.localName}:${name}`; // DOT names: unique among nodes, edges, clusters
  const tag = el.localName;
  const n = counts.get(tag) || 0;
  counts.set(tag, n + 1);
  return `${tag}#${n}`;
}

function syncAttributes(target, source, keep) {
  for (const attr of [...target.attributes]) {
    if (!source.hasAttribute(attr.name) && !keep(attr.name)) target.removeAttribute(attr.name);
  }
  for (const attr of source.attributes) {
    if (target.getAttribute(attr.name) !== attr.value) target.setAttribute(attr.name, attr.value);
  }
}

// attributes the panel adds to the drawing itself (roles, labels, focus); a merge keeps them
const OURS = (name) =>
  name === "role" || name === "tabindex" || name.startsWith("aria-") || name.startsWith("data-nba")
  || name.startsWith("data-lm-")
  || name === "class" || name === "focusable";

/** Make `target` (on the page) look like `source` (a fresh drawing), reusing every element
 * whose place in the tree matches: nodes and edges by their DOT name, other elements by tag
 * and position. Elements are only moved when the order changed. */
export function morph(target, source) {
  // the panel's own classes (nba-*) stay on an element, Graphviz's come from the new drawing
  const own = [...target.classList].filter((c) => c.startsWith("nba-"));
  syncAttributes(target, source, (name) => OURS(name) && name !== "class");
  if (own.length) target.setAttribute("class", [source.getAttribute("class") || "", ...own].join(" ").trim());
  const sourceKids = [...source.children];
  if (!sourceKids.length) {
    if (target.textContent !== source.textContent) target.textContent = source.textContent;
    return;
  }
  const counts = new Map();
  const old = new Map();
  for (const child of [...target.children]) old.set(keyOf(child, counts), child);
  for (const node of [...target.childNodes]) if (node.nodeType !== Node.ELEMENT_NODE) node.remove();
  counts.clear();
  let cursor = target.firstElementChild;
  for (const fresh of sourceKids) {
    const key = keyOf(fresh, counts);
    let kept = old.get(key);
    if (kept) {
      old.delete(key);
      morph(kept, fresh);
    } else {
      kept = fresh;
    }
    if (kept !== cursor) target.insertBefore(kept, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const gone of old.values()) gone.remove();
}
