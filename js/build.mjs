// Builds the panel's ES module: js/src/panel.js and @hpcc-js/wasm-graphviz (Graphviz compiled to
// WebAssembly, the binary inlined in its JavaScript) bundled by esbuild into one file that
// ships in the Python package, so nothing is fetched at run time.
//
//   npm ci && node build.mjs          writes ../nbagent/viz/static/panel.js (+ its notices)
//   node build.mjs --check            fails if the committed file differs from a fresh build
//   ... --static DIR                  the folder to write or check (default: the package's)
//
// The output is committed: pip install (a wheel, an sdist, -e, a JupyterLite wheel) then
// needs no Node. The build is deterministic for the pinned versions in package-lock.json.

import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const staticAt = process.argv.indexOf("--static"); // another package folder to write or check
const staticDir = staticAt > 0 ? process.argv[staticAt + 1] : join(here, "..", "nbagent", "viz", "static");
const outFile = join(staticDir, "panel.js");
const noticeFile = join(staticDir, "panel.js.LICENSES.txt");

function packageOf(name) {
  const dir = join(here, "node_modules", ...name.split("/"));
  return { dir, meta: JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) };
}

function notices() {
  const gv = packageOf("@hpcc-js/wasm-graphviz");
  return [
    "Third-party code bundled in panel.js (built by js/build.mjs from js/package-lock.json)",
    "",
    `${gv.meta.name} ${gv.meta.version}: ${gv.meta.license}, ${gv.meta.repository?.url ?? ""}`,
    "It contains Graphviz compiled to WebAssembly (Eclipse Public License 1.0; source code:",
    "the Graphviz project, graphviz.org) and the libraries Graphviz is built with there (expat: MIT).",
    "",
    `----- ${gv.meta.name} LICENSE -----`,
    readFileSync(join(gv.dir, "LICENSE"), "utf8").trim(),
    "",
  ].join("\n");
}

async function bundle() {
  const result = await build({
    entryPoints: [join(here, "src", "panel.js")],
    bundle: true,
    format: "esm",
    target: ["es2020"],
    minify: true,
    legalComments: "none", // the licences are in panel.js.LICENSES.txt
    write: false,
    logLevel: "warning",
    banner: { js: "/* nbagent control panel; built by js/build.mjs. Third-party licences: panel.js.LICENSES.txt */" },
  });
  return result.outputFiles[0].text;
}

const code = await bundle();
const text = notices();
if (process.argv.includes("--check")) {
  const stale = [];
  if (readFileSync(outFile, "utf8") !== code) stale.push(outFile);
  if (readFileSync(noticeFile, "utf8") !== text) stale.push(noticeFile);
  if (stale.length) {
    console.error(`out of date (run: cd js && npm ci && node build.mjs): ${stale.join(", ")}`);
    process.exit(1);
  }
  console.log(`panel.js is up to date (${code.length} bytes)`);
} else {
  writeFileSync(outFile, code);
  writeFileSync(noticeFile, text);
  console.log(`wrote ${outFile} (${code.length} bytes) and ${noticeFile}`);
}
