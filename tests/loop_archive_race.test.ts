// Readers racing a delete that stages an archived session, takes it out of archive.json and then
// rolls back: the session is archived before, during and after, and every reader says so.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryFs } from "../adapters/memory.ts";
import { FsIoError } from "../src/port/errors.ts";
import { SessionStore, workspaceHash } from "../mod.ts";
import { conversation, user } from "./_fixtures.ts";
import { gate, hookedFs } from "./_hooks.ts";

const CWD = "/work/project";
const AGENT = "/home/user/.loop";
const COLLECTION = `${AGENT}/sessions/${workspaceHash(CWD)}`;

/**
 * A store whose deletes stage their sessions and write the new membership, then fail to create
 * the commit marker (and so roll back): `reached` opens there, and the failure waits for `hold`.
 */
function failingDeleter(
  fs: MemoryFs,
  reached: ReturnType<typeof gate>,
  hold: ReturnType<typeof gate>,
): SessionStore {
  return new SessionStore({
    fs: hookedFs(fs, {
      before: async (method, args) => {
        if (method === "open" && String(args[0]).includes("/.committed.")) {
          reached.open();
          await hold.wait;
          throw new FsIoError("EIO", "open", String(args[0]), "injected");
        }
      },
    }),
    agentDir: AGENT,
  });
}

for (const fast of [false, true]) {
  test(`listing (fast ${fast}) racing a rolled-back delete keeps archived: true`, async () => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const s = await store.create(CWD);
    await s.commit(conversation(1));
    await s.close();
    const keep = await store.create(CWD);
    await keep.commit([user("keep")]);
    await keep.close();
    await store.archive.set(CWD, [s.id], true);
    const before = await store.list(CWD);
    assert.equal(before.find((x) => x.id === s.id)?.archived, true);

    const listerRead = gate();
    const resume = gate();
    const committedReached = gate();
    let first = true;
    const lister = new SessionStore({
      fs: hookedFs(fs, {
        after: async (method, args) => {
          if (method === "readDir" && args[0] === COLLECTION && first) {
            first = false;
            listerRead.open();
            await resume.wait;
          }
        },
      }),
      agentDir: AGENT,
    });
    const listed = gate();
    const deleter = failingDeleter(fs, committedReached, listed);
    const listing = lister.listDetailed(CWD, undefined, { fast });
    await listerRead.wait; // the listing read the collection before the delete began
    const deleting = deleter.archive.delete(CWD, [s.id]).then(
      () => "resolved",
      (e) => `rejected ${e.name}`,
    );
    await committedReached.wait; // staged + membership written, marker not yet
    resume.open();
    const result = await listing;
    listed.open();
    assert.equal(await deleting, "rejected FsIoError");
    const after = await store.list(CWD);
    assert.equal(after.find((x) => x.id === s.id)?.archived, true, "after rollback: archived");
    assert.deepEqual(result.failures, []);
    const info = result.sessions.find((x) => x.id === s.id);
    assert.ok(info !== undefined, "listed");
    assert.equal(
      info.archived,
      true,
      "racing listing reported archived:false for an archived session whose delete never happened",
    );
  });
}

test("isArchived racing a delete that rolls back says archived", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const s = await store.create(CWD);
  await s.commit(conversation(1));
  await s.close();
  await store.archive.set(CWD, [s.id], true);
  const readMembership = gate();
  const rolledBack = gate();
  let first = true;
  const reader = new SessionStore({
    fs: hookedFs(fs, {
      after: async (method, args) => {
        if (
          (method === "readFile" || method === "readFileNoFollow") &&
          String(args[0]).endsWith("/archive.json") && first
        ) {
          first = false;
          readMembership.open();
          await rolledBack.wait;
        }
      },
    }),
    agentDir: AGENT,
  });
  const membershipWritten = gate();
  const deleter = failingDeleter(fs, membershipWritten, readMembership);
  const deleting = deleter.archive.delete(CWD, [s.id]).then(
    () => "resolved",
    (e) => `rejected ${e.name}`,
  );
  await membershipWritten.wait;
  const asking = reader.archive.isArchived(CWD, s.id);
  assert.equal(await deleting, "rejected FsIoError");
  rolledBack.open();
  const answer = await asking;
  assert.equal(await store.archive.isArchived(CWD, s.id), true);
  assert.equal(
    answer,
    true,
    "isArchived said false for a session archived before, during and after",
  );
});

for (const fast of [false, true]) {
  test(`listing (fast ${fast}) that read archive.json during a delete later rolled back keeps archived: true`, async () => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const s = await store.create(CWD);
    await s.commit(conversation(1));
    await s.close();
    await store.archive.set(CWD, [s.id], true);

    const collectionRead = gate();
    const resumeListing = gate();
    const membershipRead = gate();
    const rolledBack = gate();
    let firstDir = true;
    let firstMembership = true;
    const lister = new SessionStore({
      fs: hookedFs(fs, {
        after: async (method, args) => {
          if (method === "readDir" && args[0] === COLLECTION && firstDir) {
            firstDir = false;
            collectionRead.open();
            await resumeListing.wait;
          }
          if (
            (method === "readFile" || method === "readFileNoFollow") &&
            String(args[0]).endsWith("/archive.json") && firstMembership
          ) {
            firstMembership = false;
            membershipRead.open();
            await rolledBack.wait;
          }
        },
      }),
      agentDir: AGENT,
    });
    const markerReached = gate();
    const failMarker = gate();
    const deleter = failingDeleter(fs, markerReached, failMarker);
    const listing = lister.listDetailed(CWD, undefined, { fast });
    await collectionRead.wait; // the session directory in place, no delete staging yet
    const deleting = deleter.archive.delete(CWD, [s.id]).then(
      () => "resolved",
      (e) => `rejected ${e.name}`,
    );
    await markerReached.wait; // staged, and taken out of archive.json
    resumeListing.open();
    await membershipRead.wait; // the listing read archive.json without the id
    failMarker.open();
    assert.equal(await deleting, "rejected FsIoError"); // moved back, membership restored
    rolledBack.open(); // the listing reads the session in place
    const result = await listing;
    assert.deepEqual(result.failures, []);
    assert.equal(await store.archive.isArchived(CWD, s.id), true);
    const info = result.sessions.find((x) => x.id === s.id);
    assert.ok(info !== undefined, "listed");
    assert.equal(
      info.archived,
      true,
      "racing listing reported archived:false for an archived session whose delete never happened",
    );
  });
}

test("a whole listing looks at archive membership a second time once, not once per session", async () => {
  const fs = new MemoryFs();
  await fs.mkdir(CWD, { recursive: true });
  const store = new SessionStore({ fs, agentDir: AGENT });
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) {
    const s = await store.create(CWD);
    await s.commit([user(`hello ${i}`)]);
    await s.close();
    ids.push(s.id);
  }
  await store.archive.set(CWD, [ids[0] as string], true);
  const count = async (only: number) => {
    const calls = { total: 0, collection: 0, membership: 0 };
    const lister = new SessionStore({
      fs: hookedFs(fs, {
        before: (method, args) => {
          calls.total++;
          if (method === "readDir" && args[0] === COLLECTION) calls.collection++;
          if (String(args[0]).endsWith("/archive.json")) calls.membership++;
        },
      }),
      agentDir: AGENT,
    });
    const result = await lister.listDetailed(CWD, undefined, { fast: true });
    assert.equal(result.sessions.length, only);
    return calls;
  };
  const six = await count(6);
  // Two more sessions cost their meta.json and index.json reads, and nothing else.
  for (let i = 0; i < 2; i++) {
    const s = await store.create(CWD);
    await s.commit([user(`more ${i}`)]);
    await s.close();
  }
  const eight = await count(8);
  assert.equal(eight.total - six.total, 4);
  assert.deepEqual([eight.collection, eight.membership], [2, 2]);
  // With every listed session archived by the first read, there is no second look.
  await store.archive.set(CWD, (await store.list(CWD)).map((x) => x.id), true);
  const archived = await count(8);
  assert.deepEqual([archived.collection, archived.membership], [1, 1]);
  assert.equal(archived.total, eight.total - 2);
});

for (const readOnly of [true, false]) {
  test(`open (readOnly ${readOnly}) racing a delete that rolls back opens the session in place`, async () => {
    const fs = new MemoryFs();
    await fs.mkdir(CWD, { recursive: true });
    const store = new SessionStore({ fs, agentDir: AGENT });
    const s = await store.create(CWD);
    await s.commit(conversation(2));
    await s.close();
    await store.archive.set(CWD, [s.id], true);
    const path = `${COLLECTION}/${s.id}`;

    const markerReached = gate();
    const failMarker = gate();
    const deleter = failingDeleter(fs, markerReached, failMarker);
    const lookingForCopy = gate();
    const rolledBack = gate();
    let first = true;
    const reader = new SessionStore({
      fs: hookedFs(fs, {
        before: async (method, args) => {
          if (method === "readDir" && args[0] === COLLECTION && first) {
            first = false;
            lookingForCopy.open();
            await rolledBack.wait;
          }
        },
      }),
      agentDir: AGENT,
    });
    const deleting = deleter.archive.delete(CWD, [s.id]).then(
      () => "resolved",
      (e) => `rejected ${e.name}`,
    );
    await markerReached.wait; // the directory is staged, the delete not committed
    const opening = reader.open(path, { readOnly }).then(
      async (session) => {
        const count = session.messages.length;
        await session.close();
        return `opened ${count}`;
      },
      (e) => `rejected ${e.name}`,
    );
    await lookingForCopy.wait; // no directory in place: about to look in the staging directories
    failMarker.open();
    assert.equal(await deleting, "rejected FsIoError"); // the directory is back, staging gone
    rolledBack.open();
    assert.equal(
      await opening,
      `opened ${conversation(2).length}`,
      "an open racing a delete that never happened said the session does not exist",
    );
    assert.equal(await store.archive.isArchived(CWD, s.id), true);
  });
}
