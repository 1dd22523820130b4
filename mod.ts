/**
 * `@loop/sessions`: stores coding-agent sessions on any filesystem through a small port.
 *
 * @module
 */
export * from "./src/port/mod.ts";
export * from "./src/loop/errors.ts";
