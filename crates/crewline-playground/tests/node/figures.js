// Runs the page's script (sentence.js, playground.js) in Node with a stand-in DOM, loads the
// JSONL call on stdin the way the page's "load a call" does, lets the page render it (a
// render that throws fails the run), and prints the page's figures() as JSON.
// Usage: node figures.js ASSETS_DIR [DOWNLOAD_CAP] < call.jsonl
// With DOWNLOAD_CAP (characters) it prints {"figures", "jsonl"}: the download at that cap too.
"use strict";
const fs = require("fs");
const vm = require("vm");

const dir = process.argv[2];
// Any element, property or call: the page only writes to the DOM on this path.
const stub = () =>
  new Proxy(function () {}, {
    get: (_, key) => (key === Symbol.toPrimitive ? () => "" : key === "tBodies" ? [stub()] : stub()),
    apply: () => stub(),
    set: () => true,
  });
const document = new Proxy(
  { readyState: "loading", addEventListener() {} },
  { get: (target, key) => (key in target ? target[key] : stub()) },
);
const context = { document, console, performance, setTimeout, clearTimeout };
context.window = context;
vm.createContext(context);
for (const file of ["sentence.js", "playground.js"]) {
  vm.runInContext(fs.readFileSync(`${dir}/${file}`, "utf8"), context, { filename: file });
}
const page = context.window.crewlinePlayground;
page.loadJsonl(fs.readFileSync(0, "utf8"), "test");
// After the render the load scheduled.
const cap = process.argv[3] ? Number(process.argv[3]) : null;
setTimeout(() => {
  const figures = page.figures();
  process.stdout.write(JSON.stringify(cap ? { figures, jsonl: page.jsonl(cap) } : figures));
}, 5);
