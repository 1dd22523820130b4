// Drives the peer, `@mariozechner/pi-coding-agent`'s SessionManager, in its own Node process.
// Usage: node bench/peer_child.mjs <session-manager.js> <command.json>
// Prints one JSON object: { samples: [ms...], facts: {...} }.
//
// Commands:
// - build:  { sources: [{ messages, file, cwd }] } writes each peer session file from one of our
//           messages.jsonl files (the same messages, wrapped in the peer's entry format).
// - open:   { file, warmup, iterations } times SessionManager.open(file).
// - append: { file, messages, warmup } opens the file, then times appendMessage() of each line.
// - list:   { dir, cwd, warmup, iterations } times SessionManager.list(cwd, dir).
import { Buffer } from "node:buffer";
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";
import process from "node:process";

const [modulePath, commandPath] = process.argv.slice(2);
const { SessionManager } = await import(pathToFileURL(modulePath).href);
const command = JSON.parse(readFileSync(commandPath, "utf8"));

function lines(path) {
  const text = readFileSync(path, "utf8");
  return text.split("\n").filter((line) => line.length > 0);
}

function hexId(n) {
  return n.toString(16).padStart(8, "0");
}

function build(source, index) {
  const base = Date.UTC(2025, 0, 1) + index * 1000;
  const header = {
    type: "session",
    version: 3,
    id: `0190a000-0000-7000-8000-${index.toString(16).padStart(12, "0")}`,
    timestamp: new Date(base).toISOString(),
    cwd: source.cwd,
  };
  const out = [JSON.stringify(header)];
  let parent = null;
  lines(source.messages).forEach((line, i) => {
    const id = hexId(i + 1);
    const timestamp = JSON.stringify(new Date(base + i).toISOString());
    out.push(
      `{"type":"message","id":"${id}","parentId":${
        JSON.stringify(parent)
      },"timestamp":${timestamp},"message":${line}}`,
    );
    parent = id;
  });
  const text = out.join("\n") + "\n";
  writeFileSync(source.file, text);
  return Buffer.byteLength(text);
}

async function time(warmup, iterations, run) {
  for (let i = 0; i < warmup; i++) await run();
  const samples = [];
  for (let i = 0; i < iterations; i++) {
    const started = performance.now();
    await run();
    samples.push(performance.now() - started);
  }
  return samples;
}

let result;
switch (command.op) {
  case "build": {
    let bytes = 0;
    command.sources.forEach((source, i) => {
      bytes += build(source, i);
    });
    result = { samples: [], facts: { bytes, files: command.sources.length } };
    break;
  }
  case "open": {
    let entries = 0;
    const samples = await time(command.warmup, command.iterations, () => {
      entries = SessionManager.open(command.file).getEntries().length;
    });
    result = { samples, facts: { entries } };
    break;
  }
  case "append": {
    const session = SessionManager.open(command.file);
    const messages = lines(command.messages).map((line) => JSON.parse(line));
    const samples = [];
    messages.forEach((message, i) => {
      const started = performance.now();
      session.appendMessage(message);
      if (i >= command.warmup) samples.push(performance.now() - started);
    });
    result = { samples, facts: { entries: session.getEntries().length } };
    break;
  }
  case "list": {
    let sessions = 0;
    const samples = await time(command.warmup, command.iterations, async () => {
      sessions = (await SessionManager.list(command.cwd, command.dir)).length;
    });
    result = { samples, facts: { sessions } };
    break;
  }
  default:
    throw new TypeError(`Unknown peer command: ${command.op}`);
}
process.stdout.write(JSON.stringify(result));
