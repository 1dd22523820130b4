import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  assertSessionId,
  createSessionId,
  formatSessionId,
  isSessionId,
  nextOrdinal,
  SessionIdError,
  sessionIdForm,
  slugify,
} from "../layout.ts";
import { newRepo } from "./layout_fixtures.ts";
import { runsOf } from "./_soak.ts";

const SESSIONS = "/repo/.loopy_loop/sessions";

test("slugify keeps every word of the seed's examples", () => {
  assert.equal(slugify("Ship the ultimate memory program"), "ship-the-ultimate-memory-program");
  assert.equal(slugify("Ship the landing page"), "ship-the-landing-page");
  assert.equal(slugify("phase-0-foundations"), "phase-0-foundations");
  assert.equal(slugify("second_milestone"), "second-milestone");
});

test("slugify lowercases and treats punctuation, underscores and non-ASCII letters as separators", () => {
  assert.equal(slugify("  Fix: the BUG #42 (again)!  "), "fix-the-bug-42-again");
  assert.equal(slugify("Café au lait"), "caf-au-lait");
  assert.equal(slugify("naïve_approach--v2"), "na-ve-approach-v2");
});

test("slugify cuts at a word boundary within 40 characters", () => {
  const slug = slugify("implement the complete distributed storage engine with replication today");
  assert.equal(slug, "implement-the-complete-distributed");
  assert.ok(slug.length <= 40);
  // The next word would have made it 42 characters.
  assert.ok(`${slug}-storage`.length > 40);
});

test("slugify keeps a first word longer than 40 characters, cut to 40", () => {
  const long = "a".repeat(55);
  assert.equal(slugify(`${long} tail`), "a".repeat(40));
});

test("slugify returns session when nothing is left", () => {
  assert.equal(slugify(""), "session");
  assert.equal(slugify("¿¡ — …"), "session");
});

test("slugify always yields a lowercase hyphenated slug of at most 40 characters", () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 200 }), (text) => {
      const slug = slugify(text);
      assert.match(slug, /^[a-z0-9]+(?:-[a-z0-9]+)*$/);
      assert.ok(slug.length <= 40);
      assert.equal(slugify(text), slug);
    }),
    { numRuns: runsOf(300) },
  );
});

test("createSessionId numbers root sessions from 001 within the repository", async () => {
  const fs = await newRepo();
  const id = await createSessionId(fs, { repoRoot: "/repo", goal: "Ship the landing page" });
  assert.equal(id, "001_ship-the-landing-page");
  await fs.mkdir(SESSIONS, { recursive: true });
  await fs.mkdir(`${SESSIONS}/${id}`);
  assert.equal(
    await createSessionId(fs, { repoRoot: "/repo", goal: "" }),
    "002_session",
  );
});

test("createSessionId never reuses a gap and counts files, not only directories", async () => {
  const fs = await newRepo();
  await fs.mkdir(SESSIONS, { recursive: true });
  await fs.mkdir(`${SESSIONS}/001_a`);
  await fs.writeFile(`${SESSIONS}/007_notes.json`, new Uint8Array());
  assert.equal(await createSessionId(fs, { repoRoot: "/repo", goal: "b" }), "008_b");
});

test("createSessionId ignores staging leftovers, hidden entries and legacy timestamp ids", async () => {
  const fs = await newRepo();
  await fs.mkdir(SESSIONS, { recursive: true });
  await fs.mkdir(`${SESSIONS}/.staging-005_x-0000abcd`);
  await fs.mkdir(`${SESSIONS}/20260419_143022_71393ee22450_ab12cd34`);
  await fs.mkdir(`${SESSIONS}/002_real`);
  assert.equal(await createSessionId(fs, { repoRoot: "/repo", goal: "next" }), "003_next");
});

test("root ordinals stay unique and monotonic past 999", async () => {
  const fs = await newRepo();
  await fs.mkdir(SESSIONS, { recursive: true });
  await fs.mkdir(`${SESSIONS}/999_last-three-digit`);
  const first = await createSessionId(fs, { repoRoot: "/repo", goal: "over" });
  assert.equal(first, "1000_over");
  await fs.mkdir(`${SESSIONS}/${first}`);
  assert.equal(await createSessionId(fs, { repoRoot: "/repo", goal: "again" }), "1001_again");
});

test("child ids number within the parent's children and stay unique past 99", async () => {
  const fs = await newRepo();
  const parent = `${SESSIONS}/001_parent`;
  assert.equal(
    await createSessionId(fs, { parentSessionDir: parent, requestId: "phase-0-foundations" }),
    "01_phase-0-foundations",
  );
  await fs.mkdir(`${parent}/children/99_x`, { recursive: true });
  const hundredth = await createSessionId(fs, { parentSessionDir: parent, requestId: "y" });
  assert.equal(hundredth, "100_y");
  await fs.mkdir(`${parent}/children/${hundredth}`);
  assert.equal(
    await createSessionId(fs, { parentSessionDir: parent, requestId: undefined }),
    "101_session",
  );
});

test("child ids skip ordinals already promised in the ledger", async () => {
  const fs = await newRepo();
  const id = await createSessionId(fs, {
    parentSessionDir: `${SESSIONS}/001_parent`,
    requestId: "retry",
    reservedIds: ["01_failed-dispatch", "03_another"],
  });
  assert.equal(id, "04_retry");
});

test("nextOrdinal of a missing scope is 1", async () => {
  const fs = await newRepo();
  assert.equal(await nextOrdinal(fs, "/repo/nowhere"), 1);
});

test("session id validation accepts the readable and the legacy forms only", () => {
  assert.equal(sessionIdForm("001_ship-the-ultimate-memory-program"), "readable");
  assert.equal(sessionIdForm("01_phase-0-foundations"), "readable");
  assert.equal(sessionIdForm("1000_over"), "readable");
  assert.equal(sessionIdForm("20260419_143022_71393ee22450_ab12cd34"), "legacy");
  for (
    const bad of [
      "",
      "1_short-ordinal",
      "001_",
      "001_Upper",
      "001_trailing-",
      "001_double--hyphen",
      "../001_x",
      "001_x/y",
      `001_${"a".repeat(41)}`,
      "20260419_143022_71393EE22450_ab12cd34",
      "session",
    ]
  ) {
    assert.equal(isSessionId(bad), false, bad);
    assert.throws(() => assertSessionId(bad), SessionIdError);
  }
});

test("formatSessionId pads to a minimum width and refuses non-positive ordinals", () => {
  assert.equal(formatSessionId(7, 3, "x"), "007_x");
  assert.equal(formatSessionId(12345, 2, "x"), "12345_x");
  assert.throws(() => formatSessionId(0, 3, "x"), SessionIdError);
  assert.throws(() => formatSessionId(1.5, 3, "x"), SessionIdError);
});
