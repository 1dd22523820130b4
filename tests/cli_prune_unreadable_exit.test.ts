/**
 * The help says an entry "that could not be read or removed is listed with the error and makes the
 * exit code 1": a session whose state.json is damaged keeps its raw attempt directories unpruned, a
 * finding.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { runPruneRaw } from "../src/cli/layout.ts";
import { memoryIo } from "../tests/_cli_io.ts";
import { createAttemptArtifacts } from "../layout.ts";
import { newRepo, newRoot } from "../tests/layout_fixtures.ts";

test("prune-raw exits 1 when a session's state.json or session.json cannot be read", async () => {
  for (const damaged of ["state.json", "session.json"]) {
    const fs = await newRepo();
    const root = await newRoot(fs);
    for (const iteration of [1, 2]) {
      const attempt = { iteration, workflowId: "outer", attemptId: `a${iteration}` };
      await createAttemptArtifacts(fs, root.paths, attempt, { prompt: "p", pathsMap: {} });
    }
    await fs.writeFile(`${root.dir}/${damaged}`, new TextEncoder().encode("{ torn"));
    for (const json of [false, true]) {
      const { io, out } = memoryIo(fs, "/repo", Date.parse("2026-12-01T00:00:00Z"));
      const code = await runPruneRaw(io, json ? ["--json"] : []);
      assert.match(out(), /(state|manifest)_unreadable/, `${damaged}: ${out()}`);
      assert.equal(code, 1, `${damaged}: ${out()}`);
    }
  }
});
