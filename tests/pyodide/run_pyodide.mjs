// Runs a Python scenario in Pyodide under Node, offline, and writes what happened as JSON.
//
//   node run_pyodide.mjs <config.json>
//
// config: {pyodide: dir of npm's pyodide, wheels: dir with pyodide-lock.json + wheels,
//          scenario: a .py file defining `async def main() -> dict`, out: result file,
//          only: optional name the scenario reads as globalThis.scenarioOnly,
//          allow: optional list of loopback origins fetch may reach (a test's own server),
//          params: optional JSON value the scenario reads as globalThis.scenarioParams}
//
// Every way out of this process to the network is blocked before Pyodide starts (fetch,
// http/https requests, sockets, TLS, DNS) and each attempt is recorded. Two probes, one from
// JavaScript and one from Python, then try the network on purpose: they must be refused and
// recorded, which shows the block works; the Python test asserts that nothing else was tried.
// Packages are installed with micropip from file: URLs only: every requirement is pinned to a
// local wheel by a constraint, so anything missing would go to PyPI and be refused.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(import.meta.url);
const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const attempts = [];
const result = { attempts, timings_ms: {}, probes: {}, error: null, value: null };
const t0 = performance.now();
const mark = (name) => { result.timings_ms[name] = Math.round(performance.now() - t0); };

function refuse(kind, target) {
  attempts.push(`${kind} ${target}`);
  const err = new Error(`network blocked in this test: ${kind} ${target}`);
  err.code = "ENETUNREACH";
  return err;
}

const allowed = (config.allow || []).map((origin) => {
  const url = new URL(origin);
  if (url.hostname !== "127.0.0.1") throw new Error(`only loopback may be allowed, not ${origin}`);
  return url.origin + "/";
});
result.allowed = [];

function blockNetwork() {
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const target = String(input && input.url ? input.url : input);
    if (allowed.some((origin) => target.startsWith(origin))) {
      result.allowed.push(`${(init && init.method) || (input && input.method) || "GET"} ${target}`);
      try {
        return await realFetch(input, init);
      } catch (err) { // undici says "fetch failed": keep what it failed on
        result.allowed.push(`failed: ${err.cause ? err.cause.message || err.cause : err}`);
        throw err;
      }
    }
    throw refuse("fetch", target);
  };
  for (const name of ["http", "https"]) {
    const mod = require(name);
    mod.request = (target) => { throw refuse(`${name}.request`, String(target && target.href ? target.href : target && target.host ? target.host : target)); };
    mod.get = mod.request;
  }
  const net = require("net");
  // the allowed origins' sockets only (fetch opens them through net.Socket.connect)
  const ports = new Set(allowed.map((origin) => String(new URL(origin).port)));
  const toAllowed = (args) => {
    const first = Array.isArray(args[0]) ? args[0][0] : args[0]; // Node passes normalised args on
    const opts = first && typeof first === "object" ? first : { port: first, host: args[1] };
    return opts.host === "127.0.0.1" && ports.has(String(opts.port));
  };
  const realConnect = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function (...args) {
    if (toAllowed(args)) return realConnect.apply(this, args);
    throw refuse("net.connect", JSON.stringify(args[0]));
  };
  const realNetConnect = net.connect;
  net.connect = net.createConnection = (...args) => {
    if (toAllowed(args)) return realNetConnect(...args);
    throw refuse("net.connect", JSON.stringify(args[0]));
  };
  const tls = require("tls");
  tls.connect = (...args) => { throw refuse("tls.connect", JSON.stringify(args[0])); };
  const dns = require("dns");
  dns.lookup = (host) => { throw refuse("dns.lookup", host); };
  dns.promises.lookup = async (host) => { throw refuse("dns.lookup", host); };
  if (globalThis.WebSocket) {
    globalThis.WebSocket = function (url) { throw refuse("WebSocket", String(url)); };
  }
}

let written = false;
function write() {
  mark("total");
  fs.writeFileSync(config.out, JSON.stringify(result, null, 2));
  written = true;
}
// Node exits when nothing is left to wait for, even while a promise is pending (a Python
// await that nothing will ever resolve): say so instead of leaving no result.
process.on("exit", () => {
  if (!written) {
    result.error = `Node's event loop ran empty while a step was pending (last mark: ${Object.keys(result.timings_ms).pop() || "start"})`;
    // what the scenario reported so far (it may set globalThis.scenarioPartial to a JSON text)
    result.partial = globalThis.scenarioPartial ? JSON.parse(globalThis.scenarioPartial) : null;
    write();
  }
});

blockNetwork();
try {
  try {
    await fetch("https://pypi.org/simple/micropip/");
    result.probes.js = "fetch went through";
  } catch (err) {
    result.probes.js = String(err.message);
  }

  const { loadPyodide } = await import(pathToFileURL(path.join(config.pyodide, "pyodide.mjs")).href);
  const logs = [];
  const py = await loadPyodide({
    indexURL: config.pyodide + path.sep,
    lockFileURL: path.join(config.wheels, "pyodide-lock.json"),
    stdout: (line) => logs.push(line),
    stderr: (line) => logs.push(line),
  });
  result.logs = logs;
  mark("pyodide_loaded");
  await py.loadPackage("micropip", { messageCallback: () => {}, errorCallback: (m) => logs.push(m) });
  mark("micropip_loaded");

  const wheels = fs.readdirSync(config.wheels).filter((f) => f.endsWith(".whl")).sort();
  py.globals.set("WHEEL_URLS", py.toPy(wheels.map((f) => pathToFileURL(path.join(config.wheels, f)).href)));
  result.probes.python = await py.runPythonAsync(`
from pyodide.http import pyfetch
try:
    await pyfetch("https://pypi.org/simple/nbagent/")
    probe = "pyfetch went through"
except Exception as error:
    probe = f"{type(error).__name__}: {error}"
probe
`);
  const installed = await py.runPythonAsync(`
import re
import micropip

def _name(url):
    return re.sub(r"[-_.]+", "-", url.rsplit("/", 1)[1].split("-")[0]).lower()

_constraints = [f"{_name(u)} @ {u}" for u in WHEEL_URLS if _name(u) != "micropip"]
await micropip.install("nbagent", constraints=_constraints)
import json
json.dumps({name: pkg.version for name, pkg in micropip.list().items()})
`);
  result.installed = JSON.parse(installed);
  mark("installed");

  py.globals.set("SCENARIO_FILE", config.scenario);
  globalThis.scenarioOnly = config.only || null; // a scenario may run one named part only
  globalThis.scenarioParams = JSON.stringify(config.params === undefined ? null : config.params);
  const value = await py.runPythonAsync(
    fs.readFileSync(config.scenario, "utf8") + `

import json as _json
_json.dumps(await main())
`,
    { filename: config.scenario },
  );
  result.value = JSON.parse(value);
  mark("scenario_done");
} catch (err) {
  result.error = String(err && err.message ? err.message : err);
}
write();
// done: open keep-alive sockets to a test's server must not hold the process for their timeout
process.exit(0);
