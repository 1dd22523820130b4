/**
 * The README's main job: a tour of the whole library on a fresh temporary directory on the real
 * disk. Runs on Deno (`deno task demo`) and on Node (`node --import tsx examples/quickstart.ts`).
 *
 * @module
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Message, SessionStore } from "../mod.ts";
import { nodeFs, nodeProcessProbe, nodeSha256 } from "../adapters/node.ts";
import {
  createAttemptArtifacts,
  createRootSession,
  LogicalReferenceResolver,
  processNextChildRequest,
  pruneRaw,
  publishChildRequest,
} from "../layout.ts";

const say = (text: string): void => console.log(text);
const base = mkdtempSync(join(tmpdir(), "loop-sessions-demo-"));
const fs = nodeFs();
let clock = Date.parse("2026-11-30T12:00:00.000Z");
const now = (): number => (clock += 1000);

// One async function rather than top-level await, so a copy of this file also runs in a Node
// project that loads `.ts` files as CommonJS (one without `"type": "module"`).
async function main(): Promise<void> {
  // ---------------------------------------------------------------------------------------------
  // The Loop session store
  const agentDir = join(base, "agent");
  const api = await fs.realPath(mkdir(join(base, "work", "api")));
  const web = await fs.realPath(mkdir(join(base, "work", "web")));
  const store = new SessionStore({
    fs,
    agentDir,
    sha256: nodeSha256,
    process: nodeProcessProbe(),
    now,
  });
  say(`store: ${agentDir}`);

  const session = await store.create(api);
  const history: Message[] = [
    { role: "user", content: "Why does the login test fail?", timestamp: now() },
    {
      role: "assistant",
      content: [
        { type: "text", text: "Let me read it." },
        { type: "toolCall", id: "call-1", name: "read", arguments: { path: "login.test.ts" } },
      ],
      api: "demo",
      provider: "demo",
      model: "demo-model",
      usage: { input: 120, output: 30, cacheRead: 0, cacheWrite: 0, totalTokens: 150 },
      stopReason: "toolUse",
      timestamp: now(),
    },
    {
      role: "toolResult",
      toolCallId: "call-1",
      toolName: "read",
      content: [{ type: "text", text: "expect(await login()).toBe(true) // races the clock" }],
      isError: false,
      timestamp: now(),
    },
    {
      role: "assistant",
      content: [{ type: "text", text: "It races the clock; freeze time in the test." }],
      api: "demo",
      provider: "demo",
      model: "demo-model",
      usage: { input: 200, output: 40, cacheRead: 0, cacheWrite: 0, totalTokens: 240 },
      stopReason: "stop",
      timestamp: now(),
    },
  ];
  await session.commit(history);
  const info = session.getStorageInfo();
  say(`committed ${history.length} messages to ${session.getSessionPath()}`);
  say(
    `  generation ${info?.generation.slice(0, 16)}…, bytes ${info?.start}..${
      (info?.start ?? 0) + (info?.bytes ?? 0)
    }, unread ${session.unread}`,
  );
  for (let round = 2; round <= 4; round++) {
    history.push({ role: "user", content: `Follow-up question ${round}`, timestamp: now() });
    await session.commit(history); // appends only the new line
  }
  const page = await session.readHistory();
  const earlier = await session.readHistory(page.start, page.revision);
  say(
    `history: latest page ${page.start}..${page.end} of ${page.total}, earlier page ${earlier.start}..${earlier.end}`,
  );
  const pinnedAt = await session.setPinned(true);
  const read = await session.markRead(history.length);
  say(`pinned at ${pinnedAt}; markRead(${history.length}) -> ${read}, unread ${session.unread}`);
  await session.close();

  // A crash after appending but before publishing meta.json leaves an ignored tail.
  const log = join(session.getSessionPath(), "messages.jsonl");
  writeFileSync(log, '{"role":"user","content":"torn wri', { flag: "a" });
  const recovered = await store.open(session.getSessionFile());
  say(
    `crash tail: reopened with ${recovered.messages.length} messages (the torn line is past the committed range)`,
  );
  history.push({ role: "user", content: "After the crash", timestamp: now() });
  await recovered.commit(history);
  say(`  the next save truncated the tail and appended: ${recovered.messages.length} messages`);
  await recovered.close();

  // A legacy version-2 single-file session migrates on explicit open; the file stays as a backup.
  const webSession = await store.create(web);
  await webSession.commit([{ role: "user", content: "Start the web app", timestamp: now() }]);
  await webSession.close();
  const legacyId = "0f0e0d0c-0b0a-4908-8706-050403020100";
  const legacyFile = join(webSession.getSessionDir(), `${legacyId}.jsonl`);
  const legacyHeader = {
    format: "loop-session",
    version: 2,
    id: legacyId,
    cwd: web,
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
    permissionPreset: "read-only",
  };
  writeFileSync(
    legacyFile,
    [legacyHeader, { role: "user", content: "An old question", timestamp: 1 }].map((l) =>
      JSON.stringify(l)
    ).join("\n") + "\n",
  );
  const migrated = await store.open(legacyFile);
  say(`migrated ${legacyId}.jsonl -> ${migrated.getSessionPath()} (backup kept)`);
  await migrated.close();

  const listed = await store.list(web, undefined, { fast: true, pinnedFirst: true });
  const all = [...(await store.list(api, undefined, { fast: true })), ...listed];
  say(
    `list (fast): ${
      all.map((s) => `${s.id.slice(0, 8)} "${s.title?.text ?? ""}" ${s.messageCount} msgs`).join(
        "; ",
      )
    }`,
  );
  await store.archive.set(web, [legacyId], true);
  await store.archive.delete(web, [legacyId]);
  say(
    `archived and deleted ${legacyId.slice(0, 8)}; ${
      (await store.list(web)).length
    } session(s) left in web`,
  );

  // ---------------------------------------------------------------------------------------------
  // The folded session layout
  const repo = mkdir(join(base, "repo"));
  const root = await createRootSession(fs, {
    repoRoot: repo,
    goal: "Ship the ultimate memory program",
    workflowSet: "main",
    workflowContract: {
      orchestration: { completion_role: "outer" },
      terminal_blocker_reporting_roles: ["outer"],
    },
    workflowRoster: { roles: [{ id: "outer", cadence: "every" }] },
    harnessCapabilityRoster: { coordinator: "default", families: ["standard"] },
  });
  say(`folded session: .loopy_loop/sessions/${root.sessionId}`);
  const attempt = await createAttemptArtifacts(fs, root.paths, {
    iteration: 1,
    workflowId: "outer",
    attemptId: "a1b2c3d4e5f6",
  }, {
    prompt: "Plan the first phase\n",
    pathsMap: { session_dir: root.dir },
  });
  writeFileSync(join(attempt.paths.rawDir, "harness", "run.json"), JSON.stringify({ run: 1 }));
  await publishChildRequest(fs, root.paths, {
    schema_version: 3,
    request_id: "phase-0-foundations",
    goal: "Lay the foundations",
    origin: { parent_attempt_id: "a1b2c3d4e5f6" },
  });
  const child = await processNextChildRequest(fs, {
    repoRoot: repo,
    parentSessionId: root.sessionId,
  });
  say(`child request ${child?.kind}: ${child?.kind === "accepted" ? child.childSessionId : ""}`);
  const resolver = await LogicalReferenceResolver.forSession(fs, {
    repoRoot: repo,
    sessionId: root.sessionId,
  });
  const plan = await resolver.resolve("session:/project_state/plan.md");
  const raw = await resolver.resolve("session:/raw/0001_outer");
  say(`resolve session:/project_state/plan.md -> ${plan.path.slice(repo.length + 1)}`);
  const report = await pruneRaw(fs, join(repo, ".loopy_loop"), {});
  const after = await resolver.resolve("session:/raw/0001_outer");
  say(
    `prune-raw removed ${report.count} raw attempt dir(s); session:/raw/0001_outer was ${raw.status}, now ${after.status}`,
  );
  say("done");
}

// A failure rejects unhandled, which ends the process with a non-zero code on Deno and Node.
main().finally(() => rmSync(base, { recursive: true, force: true }));

function mkdir(path: string): string {
  mkdirSync(path, { recursive: true });
  return path;
}
