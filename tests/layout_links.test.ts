// RELIABILITY.md case 13 for the folded layout: a symlink planted anywhere inside a session tree
// (agents write parts of it) is refused by every writer and reader; nothing outside is read,
// written, moved or removed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { AlreadyExists, NotFound } from "../src/port/errors.ts";
import { confined } from "../src/layout/no_links.ts";
import {
  createAttemptArtifacts,
  createChildSession,
  createRootSession,
  LayoutError,
  LayoutRecordError,
  observeHandoff,
  processNextChildRequest,
  publishChildRequest,
  readChildOutcome,
  readControl,
  SessionIdError,
  sha256Ref,
  TopologyError,
  writeGitReceipt,
} from "../layout.ts";
import { childRequest, CONTRACTS, deterministic } from "./layout_fixtures.ts";
import { hookedFs } from "./_hooks.ts";

const encoder = new TextEncoder();

async function setup() {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  await fs.mkdir("/outside");
  const root = await createRootSession(fs, {
    repoRoot: "/repo",
    goal: "alpha",
    ...CONTRACTS,
    ...deterministic(),
  });
  return { fs, root };
}

/** Replaces the directory `dir` by a link to `/outside`. */
async function plant(fs: MemoryFs, dir: string): Promise<void> {
  await fs.remove(dir, { recursive: true });
  await fs.symlink("/outside", dir);
}

async function outside(fs: MemoryFs): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const entry of await fs.readDir("/outside")) {
    out[entry.name] = new TextDecoder().decode(await fs.readFile(`/outside/${entry.name}`));
  }
  return out;
}

test("processing child requests never moves or removes files through a linked pending/", async () => {
  for (const content of ['{"name":"precious"}', JSON.stringify(childRequest("r"))]) {
    const { fs, root } = await setup();
    await fs.writeFile("/outside/r.json", encoder.encode(content));
    await plant(fs, root.paths.childRequestsPendingDir);
    const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
    await assert.rejects(processNextChildRequest(fs, options), TopologyError);
    assert.deepEqual(await outside(fs), { "r.json": content });
  }
});

test("a linked accepted/ or rejected/ is refused before anything is written through it", async () => {
  for (const which of ["accepted", "rejected"] as const) {
    const { fs, root } = await setup();
    if (which === "accepted") await publishChildRequest(fs, root.paths, childRequest("r"));
    else await fs.writeFile(root.paths.pendingRequest("bad"), encoder.encode("{torn"));
    await plant(
      fs,
      which === "accepted"
        ? root.paths.childRequestsAcceptedDir
        : root.paths.childRequestsRejectedDir,
    );
    const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
    await assert.rejects(processNextChildRequest(fs, options), TopologyError);
    assert.deepEqual(await outside(fs), {}, which);
  }
});

test("publishing, attempt artifacts and git receipts refuse a linked directory", async () => {
  const attempt = { iteration: 1, workflowId: "outer", attemptId: "a1" };
  const cases = [
    {
      dir: (p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) => p.childRequestsPendingDir,
      run: (fs: MemoryFs, p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) =>
        publishChildRequest(fs, p, childRequest("r")),
    },
    {
      dir: (p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) => p.rawDir,
      run: (fs: MemoryFs, p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) =>
        createAttemptArtifacts(fs, p, attempt, { prompt: "p", pathsMap: {} }),
    },
    {
      dir: (p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) => p.gitReceiptsDir,
      run: (fs: MemoryFs, p: Awaited<ReturnType<typeof setup>>["root"]["paths"]) =>
        writeGitReceipt(fs, p, "001_alpha", attempt, "after", {
          head: null,
          branch: null,
          dirty: null,
        }),
    },
  ];
  for (const [i, { dir, run }] of cases.entries()) {
    const { fs, root } = await setup();
    await plant(fs, dir(root.paths));
    // Refused as a link (or, by the private-directory check, as something that is not one).
    await assert.rejects(
      run(fs, root.paths),
      (error) => error instanceof TopologyError || error instanceof AlreadyExists,
      `case ${i}`,
    );
    assert.deepEqual(await outside(fs), {}, `case ${i}`);
  }
});

test("agent-written control.json and handoff.json planted as links are never read through", async () => {
  const { fs, root } = await setup();
  await fs.writeFile("/outside/secret.json", encoder.encode('{"state":"SECRET-TOKEN"}'));
  await fs.remove(root.paths.controlJson);
  await fs.symlink("/outside/secret.json", root.paths.controlJson);
  await assert.rejects(readControl(fs, root.paths), TopologyError);
  await fs.remove(root.paths.handoffJson);
  await fs.symlink("/outside/secret.json", root.paths.handoffJson);
  const observed = await observeHandoff(fs, root.paths, {
    sessionId: root.sessionId,
    goalSha256: "sha256:x",
    storedRevision: 0,
    storedSha256: null,
  });
  assert.equal(observed.status, "invalid");
  assert.equal(observed.sha256, null);
  assert.ok(!(observed.diagnosis ?? "").includes("SECRET"));
});

test("ids given to the API never name a path outside their directory", async () => {
  const { fs, root } = await setup();
  const request = childRequest("r");
  const bytes = encoder.encode(JSON.stringify(request));
  await assert.rejects(
    createChildSession(fs, {
      parentDir: root.dir,
      parentSessionId: root.sessionId,
      rootSessionId: root.sessionId,
      parentDepth: 0,
      sessionId: "../../../../../../../outside/evil",
      request,
      requestBytes: bytes,
      inputs: [],
      harnessCapabilityRosterSha256: sha256Ref(bytes),
      ...CONTRACTS,
    }),
    SessionIdError,
  );
  assert.deepEqual(await outside(fs), {});
  fs.resetCounter();
  for (const bad of ["../../../../../outside/x", "", ".", "..", "a/b", "/abs"]) {
    await assert.rejects(readChildOutcome(fs, root.paths, bad), LayoutError, JSON.stringify(bad));
    assert.throws(() => root.paths.pendingRequest(bad), LayoutError);
    assert.throws(() => root.paths.childDir(bad), LayoutError);
  }
  assert.deepEqual(fs.operationLog, [], "refused before any filesystem call");
});

test("root sessions created at once in one repository get distinct ordinals", async () => {
  const fs = new MemoryFs();
  await fs.mkdir("/repo");
  const created = await Promise.all(
    ["alpha", "beta", "alpha"].map((goal) =>
      createRootSession(fs, { repoRoot: "/repo", goal, ...CONTRACTS })
    ),
  );
  const ordinals = created.map((c) => c.sessionId.split("_")[0]);
  assert.equal(new Set(ordinals).size, 3, ordinals.join(" "));
});

test("two publications of one request id at once: one is published, the other refused", async () => {
  const { fs, root } = await setup();
  const first = { ...childRequest("r"), goal: "first body" };
  const second = { ...childRequest("r"), goal: "second body" };
  const results = await Promise.allSettled([
    publishChildRequest(fs, root.paths, first),
    publishChildRequest(fs, root.paths, second),
  ]);
  assert.deepEqual(results.map((r) => r.status), ["fulfilled", "rejected"]);
  const onDisk = JSON.parse(
    new TextDecoder().decode(await fs.readFile(root.paths.pendingRequest("r"))),
  );
  assert.equal(onDisk.goal, "first body");
});

test("a link at events.jsonl leaves the event out; an acceptance that committed still returns", async () => {
  const { fs, root } = await setup();
  await publishChildRequest(fs, root.paths, childRequest("r"));
  await fs.remove(root.paths.eventsJsonl);
  await fs.symlink("/outside/events.jsonl", root.paths.eventsJsonl);
  const options = { repoRoot: "/repo", parentSessionId: root.sessionId, ...deterministic() };
  const result = await processNextChildRequest(fs, options);
  assert.equal(result?.kind, "accepted");
  assert.deepEqual(await outside(fs), {});
  assert.equal(await processNextChildRequest(fs, options), undefined);
});

test("a request with an unsafe id is refused as a record error naming request_id", async () => {
  const { fs, root } = await setup();
  for (const bad of ["../x", "a/b", ""]) {
    await assert.rejects(
      publishChildRequest(fs, root.paths, { ...childRequest("r"), request_id: bad }),
      (error) => error instanceof LayoutRecordError && error.path === "request_id",
      JSON.stringify(bad),
    );
  }
});

test("a path below a planted link spelled with .. or a trailing slash is checked as it is used", async () => {
  const { fs, root } = await setup();
  await fs.writeFile("/outside/secret.json", encoder.encode('{"secret":true}'));
  await fs.mkdir("/outside/sub");
  await fs.writeFile("/outside/victim", encoder.encode("keep"));
  await fs.symlink("/outside/sub", `${root.dir}/L`);
  const view = confined(fs, root.dir);
  // What `..` names is the checked, normalized path inside the tree, never the link's parent.
  await assert.rejects(view.readFile(`${root.dir}/L/../secret.json`), NotFound);
  await assert.rejects(view.remove(`${root.dir}/L/../victim`, { recursive: true }), NotFound);
  assert.equal(new TextDecoder().decode(await fs.readFile("/outside/victim")), "keep");
  // A trailing slash does not make the link followed: it is inspected as a link.
  assert.equal((await view.lstat(`${root.dir}/L/`)).kind, "symlink");
  await assert.rejects(view.readDir(`${root.dir}/L/`), TopologyError);
});

test("a directory swapped for a link while a declared child input is read refuses the input", async () => {
  for (const ref of ["repo:/docs/spec.md", "session:/project_state/tasks/spec.md"]) {
    const { fs, root } = await setup();
    const dir = ref.startsWith("repo:") ? "/repo/docs" : `${root.dir}/project_state/tasks`;
    await fs.mkdir(dir, { recursive: true });
    await fs.writeFile(`${dir}/spec.md`, encoder.encode("the spec\n"));
    await fs.writeFile("/outside/spec.md", encoder.encode("SECRET outside the repository\n"));
    await publishChildRequest(fs, root.paths, childRequest("r", { input_refs: [ref] }));
    // Once the reference was checked, the directory on its way becomes a link for the read.
    let swapped = false;
    const racing = hookedFs(fs, {
      async before(method, args) {
        if (swapped || method === "lstat" || args[0] !== `${dir}/spec.md`) return;
        swapped = true;
        await fs.rename(dir, `${dir}.old`);
        await fs.symlink("/outside", dir);
      },
    });
    const result = await processNextChildRequest(racing, {
      repoRoot: "/repo",
      parentSessionId: root.sessionId,
      ...deterministic(),
    });
    assert.ok(swapped, ref);
    assert.equal(result?.kind, "rejected", ref);
    if (result?.kind === "rejected") assert.equal(result.receipt.field, "input_refs[0]");
    const tree = Object.values(fs.snapshotTree("/repo/.loopy_loop")).join("\n");
    assert.equal(tree.includes("SECRET"), false, `${ref}: the outside bytes were frozen`);
  }
});
