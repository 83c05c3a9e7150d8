// Light or dark? JupyterLab says so on <body>; elsewhere (marimo, VS Code, Colab, Notebook 7
// themes) the page's background behind the panel tells. The panel's CSS picks its colour pairs
// from data-nba-theme, so its text keeps 4.5:1 on either.

let canvas = null;
/** Any CSS colour (rgb(), color(srgb ...), oklch()...) as {r, g, b, a} with r, g, b 0-255:
 * the browser paints it on a 1x1 canvas and we read the pixel. */
function parseColour(text) {
  if (!text || text === "transparent") return null;
  const m = text.match(/^rgba?\(([^)]+)\)$/);
  if (m) {
    const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  }
  if (canvas === null) canvas = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
  if (!canvas) return null;
  canvas.clearRect(0, 0, 1, 1);
  canvas.fillStyle = "rgba(0, 0, 0, 0)";
  canvas.fillStyle = text;
  canvas.fillRect(0, 0, 1, 1);
  const [r, g, b, a] = canvas.getImageData(0, 0, 1, 1).data;
  return { r, g, b, a: a / 255 };
}

function luminance({ r, g, b }) {
  const f = (v) => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
}

function parentOf(el) {
  if (el.parentElement) return el.parentElement;
  const root = el.getRootNode && el.getRootNode();
  return root && root.host ? root.host : null; // out of a shadow root (marimo)
}

/** Whether the page around `el` is dark. */
export function isDark(el) {
  const light = document.body && document.body.dataset.jpThemeLight;
  if (light === "true" || light === "false") return light === "false";
  for (let e = el && parentOf(el); e; e = parentOf(e)) {
    const c = parseColour(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0.5) return luminance(c) < 0.2;
  }
  const html = parseColour(getComputedStyle(document.documentElement).backgroundColor);
  if (html && html.a > 0.5) return luminance(html) < 0.2;
  return !!(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);
}

/** Keep `root.dataset.nbaTheme` in line with the page; returns a function that stops. */
export function followTheme(root, el) {
  const apply = () => {
    const theme = isDark(el) ? "dark" : "light";
    if (root.dataset.nbaTheme !== theme) root.dataset.nbaTheme = theme;
  };
  apply();
  requestAnimationFrame(apply); // once the view is in the page (its parents known)
  const observer = new MutationObserver(apply);
  for (const target of [document.documentElement, document.body]) {
    if (target) observer.observe(target, { attributes: true, attributeFilter: ["class", "style", "data-theme", "data-jp-theme-light", "data-jp-theme-name"] });
  }
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (media && media.addEventListener) media.addEventListener("change", apply);
  return () => {
    observer.disconnect();
    if (media && media.removeEventListener) media.removeEventListener("change", apply);
  };
}
