/**
 * Internal helpers shared by the record validators: JSON paths, plain-object tests and the
 * conversion of the first valibot issue into a `SessionFormatError`.
 *
 * @module
 */
import * as v from "valibot";
import { SessionFormatError } from "../errors.ts";
import type { RecordLocation } from "./types.ts";

/** `JSON.isRawJSON`, where the runtime has it (not Node 20). */
const isRawJson: ((value: unknown) => boolean) | undefined =
  (JSON as { readonly isRawJSON?: (value: unknown) => boolean }).isRawJSON;

/**
 * A plain object that JSON writes as itself: its prototype is `Object.prototype` or `null`, and
 * it has no `toJSON` method (a `Date` has one). What is validated must be what is written, or a
 * save would make its session unopenable, so neither is a record: a boxed primitive
 * (`new Number(1)`, written as `1`), a class instance (whose fields may come from its prototype,
 * which JSON does not write) or a `JSON.rawJSON` value (written as its raw text). Objects that
 * `JSON.parse` and `structuredClone` make always are records, and so are plain objects made in
 * another realm (a `node:vm` context), whose prototype is that realm's `Object.prototype`.
 */
export function isRecord(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === Object.prototype || isForeignObjectPrototype(proto)) {
    return typeof (value as { readonly toJSON?: unknown }).toJSON !== "function";
  }
  return proto === null && typeof (value as { readonly toJSON?: unknown }).toJSON !== "function" &&
    (isRawJson === undefined || !isRawJson(value));
}

/**
 * True when `proto` is the `Object.prototype` of another realm: the end of its prototype chain,
 * with that realm's own `hasOwnProperty` and `toString` methods and no enumerable field (so an
 * object inheriting from it inherits nothing JSON would miss). Checked only off the fast path.
 */
function isForeignObjectPrototype(proto: unknown): boolean {
  if (typeof proto !== "object" || proto === null || Object.getPrototypeOf(proto) !== null) {
    return false;
  }
  const own = (name: string): boolean =>
    Object.prototype.hasOwnProperty.call(proto, name) &&
    typeof (proto as Record<string, unknown>)[name] === "function" &&
    !Object.prototype.propertyIsEnumerable.call(proto, name);
  return own("hasOwnProperty") && own("toString") && own("isPrototypeOf") &&
    Object.keys(proto).length === 0 && Object.prototype.toString.call(proto) === "[object Object]";
}

/**
 * For an error message: why `value`, an object `isRecord` refuses, is not a plain object (` (a
 * Number object: JSON writes it as a primitive)`); empty for anything else.
 */
export function notPlainReason(value: unknown): string {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return "";
  if (typeof (value as { readonly toJSON?: unknown }).toJSON === "function") {
    return " (it has a toJSON method: JSON writes what that returns)";
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === null) return isRecord(value) ? "" : " (a JSON.rawJSON value: JSON writes its text)";
  if (proto === Object.prototype || isForeignObjectPrototype(proto)) return "";
  const name = (proto as { readonly constructor?: { readonly name?: unknown } }).constructor?.name;
  if (typeof name === "string" && BOXED.has(name)) {
    return ` (a ${name} object: JSON writes it as a primitive)`;
  }
  const kind = typeof name === "string" && name !== "" && name !== "Object"
    ? `an instance of ${name}`
    : "its prototype is not Object.prototype";
  return ` (${kind}: JSON writes only its own enumerable fields, none it inherits)`;
}

const BOXED: ReadonlySet<string> = new Set(["Number", "String", "Boolean", "BigInt", "Symbol"]);

/**
 * An array that JSON writes as an array (no `toJSON` method of its own). JSON writes any array
 * (a subclass's too) element by element, reading each index as a validator does.
 */
export function isJsonArray(value: unknown): value is unknown[] {
  return Array.isArray(value) &&
    typeof (value as { readonly toJSON?: unknown }).toJSON !== "function";
}

/** A safe integer that is zero or more. */
export function isSafeNonNegative(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** True when a string has at least one non-whitespace character. */
export function hasVisibleText(value: string): boolean {
  return value.trim() !== "";
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** Appends an object key or an array index to a JSON path: `a.b`, `a[3]`, `a["x-y"]`. */
export function childPath(base: string, key: string | number): string {
  if (typeof key === "number") return `${base}[${key}]`;
  if (key.length <= 80 && IDENTIFIER.test(key)) return base === "" ? key : `${base}.${key}`;
  // A key of any length (one of hundreds of megabytes included) is named by its first characters.
  return `${base}[${JSON.stringify(key.length > 80 ? `${key.slice(0, 77)}...` : key)}]`;
}

/**
 * How deeply a session header may nest objects and arrays (the header itself is level 1). Far
 * past any header Loop writes (its deepest fields sit at level 5), and far below what the
 * runtimes' structured clone and `JSON.stringify` can copy or write (about 1,900 levels of
 * objects in Node 20): a header that opened could otherwise fail every later copy or save with a
 * stack overflow instead of a typed error.
 */
export const MAX_HEADER_NESTING = 200;

/**
 * How deeply a message may nest objects and arrays (the message itself is level 1; a tool
 * result's `details` is level 2), on save and on load, the same on every runtime. Far past any
 * message a host writes, and well within what the runtimes' structured clone and
 * `JSON.stringify` can copy or write (about 1,900 and 4,100 levels in Node 20, 2,700 and no limit
 * in Deno): without it a message one runtime saves could be one another cannot open, or a save
 * could fail with a stack overflow instead of a typed error.
 */
export const MAX_MESSAGE_NESTING = 1000;

/**
 * True when `value`, written by `JSON.stringify` as `text`, nests objects and arrays deeper than
 * `limit` levels (`value` itself is level 1). Cheap, and iterative: a text shorter than
 * `2 * (limit + 1)` characters, or holding no more than `limit` `{` and `[`, cannot nest that
 * deep, and is not looked at further; otherwise the
 * objects of `value` are walked (a cost per object, not per character), and the text is scanned
 * only when they cannot tell what JSON writes (an object with a `toJSON` method, or one that is
 * not a plain object or an array).
 */
export function jsonNestsDeeper(value: unknown, text: string, limit: number): boolean {
  if (text.length < 2 * (limit + 1) || !opensMoreThan(text, limit)) return false;
  return objectsNestDeeper(value, limit) ?? textNestsDeeper(text, limit);
}

/**
 * Throws the `SessionFormatError` of a message (at `path`, `messages[N]`, of `file`) whose JSON
 * nests deeper than `MAX_MESSAGE_NESTING` levels: at the path of its first object or array past
 * the limit, found without recursion, or at the message itself when its objects do not show it (a
 * `toJSON` method returned something deeper than itself). Open, save, verify, salvage and the
 * legacy reader refuse a deep message with it.
 */
export function refuseDeepMessage(message: unknown, file: string, path: string): never {
  checkNesting(message, MAX_MESSAGE_NESTING, INVALID_MESSAGE, { file }, path);
  throw new SessionFormatError(
    `${INVALID_MESSAGE}: nested deeper than ${MAX_MESSAGE_NESTING} levels`,
    { file, path },
  );
}

/**
 * The error for a committed message line of `file` that is not valid JSON (`error` is what
 * `JSON.parse` threw): a `SessionFormatError` at `messages[<index>]`, as the open, the listings,
 * verify and compaction report it.
 */
export function invalidMessageJson(
  error: unknown,
  file: string,
  index: number,
): SessionFormatError {
  return new SessionFormatError(`Invalid JSON in message line: ${(error as Error).message}`, {
    file,
    path: `messages[${index}]`,
    cause: error,
  });
}

/** How a message the limits refuse is named in its error. */
export const INVALID_MESSAGE = "Invalid session message";

/**
 * True when the text holds more than `limit` `{` and `[` characters (in strings or not): a text
 * holding fewer cannot nest deeper than `limit` levels. Counted with `indexOf`, whose scan is the
 * engine's own, so a long line of prose costs a few calls rather than a walk of its objects.
 */
function opensMoreThan(text: string, limit: number): boolean {
  let count = 0;
  for (let at = text.indexOf("{"); at >= 0; at = text.indexOf("{", at + 1)) {
    if (++count > limit) return true;
  }
  for (let at = text.indexOf("["); at >= 0; at = text.indexOf("[", at + 1)) {
    if (++count > limit) return true;
  }
  return false;
}

/**
 * True when the plain objects and arrays of `value` nest deeper than `limit` levels; undefined
 * when one of them is written by JSON as something else than its own keys or items, so only
 * the text can tell.
 */
function objectsNestDeeper(value: unknown, limit: number): boolean | undefined {
  if (typeof value !== "object" || value === null) return false;
  const values: object[] = [value];
  const levels: number[] = [1];
  for (let node = values.pop(); node !== undefined; node = values.pop()) {
    const level = levels.pop() as number;
    if (level > limit) return true;
    if (typeof (node as { readonly toJSON?: unknown }).toJSON === "function") return undefined;
    if (Array.isArray(node)) {
      for (let index = 0; index < node.length; index++) {
        const item: unknown = node[index];
        if (typeof item === "object" && item !== null) {
          values.push(item);
          levels.push(level + 1);
        }
      }
      continue;
    }
    const proto: unknown = Object.getPrototypeOf(node);
    if (proto !== Object.prototype && proto !== null) return undefined;
    for (const key of Object.keys(node)) {
      const item: unknown = (node as Record<string, unknown>)[key];
      if (typeof item === "object" && item !== null) {
        values.push(item);
        levels.push(level + 1);
      }
    }
  }
  return false;
}

/** True when the JSON text `text` nests objects and arrays deeper than `limit` levels. */
function textNestsDeeper(text: string, limit: number): boolean {
  const length = text.length;
  let depth = 0;
  let at = 0;
  while (at < length) {
    const code = text.charCodeAt(at);
    if (code === 0x22) {
      // A string: its closing quote is the next one not escaped (after an even run of `\`).
      let end = text.indexOf('"', at + 1);
      for (;;) {
        if (end < 0) return false; // not JSON: not this function's to judge
        let slash = end - 1;
        while (text.charCodeAt(slash) === 0x5c) slash--;
        if ((end - 1 - slash) % 2 === 0) break;
        end = text.indexOf('"', end + 1);
      }
      at = end + 1;
      continue;
    }
    if (code === 0x7b || code === 0x5b) {
      if (++depth > limit) return true;
    } else if (code === 0x7d || code === 0x5d) depth--;
    at++;
  }
  return false;
}

/** One object or array met by `checkNesting`, with the way to it (built only on failure). */
interface NestingStep {
  readonly value: object;
  readonly level: number;
  readonly parent: NestingStep | undefined;
  readonly key: string | number;
}

/**
 * Throws a `SessionFormatError` for `what` at the path of the first object or array of `value`
 * (found at `path`, at nesting `level`) that lies deeper than `limit` levels. Iterative, so a
 * value of any depth is judged without a stack overflow.
 */
export function checkNesting(
  value: unknown,
  limit: number,
  what: string,
  location: RecordLocation,
  path: string,
  level = 1,
): void {
  walk(value, limit, what, location, path, level, false);
}

/**
 * `checkNesting`, and also refuses a value JSON cannot write: a BigInt (a primitive or a boxed
 * one), on which `JSON.stringify` throws. For metadata a caller gives a save (a structured clone
 * of it, so nothing else in it can make `JSON.stringify` throw): refused when it is taken, never
 * found by the write that would leave it pending. An object JSON writes as something else than
 * its own fields (what a clone keeps of a class: a Date, a Map, a Set, a boxed primitive) is
 * refused too, as in a message: the value held would not be the one a reopen reads.
 */
export function checkJsonData(
  value: unknown,
  limit: number,
  what: string,
  location: RecordLocation,
  path: string,
  level = 1,
): void {
  if (typeof value === "bigint") {
    throw new SessionFormatError(`${what}: a BigInt cannot be written as JSON`, {
      ...(location.file === undefined ? {} : { file: location.file }),
      path,
    });
  }
  walk(value, limit, what, location, path, level, true);
}

/** The path of `step` (below `path`), with `key` appended when given. */
function stepPath(step: NestingStep, path: string, key?: string | number): string {
  const keys: (string | number)[] = key === undefined ? [] : [key];
  for (let at: NestingStep | undefined = step; at?.parent !== undefined; at = at.parent) {
    keys.push(at.key);
  }
  return keys.reverse().reduce<string>((base, item) => childPath(base, item), path);
}

/** True for a boxed BigInt (`Object(1n)`), which `JSON.stringify` throws on. */
function isBoxedBigInt(value: object): boolean {
  try {
    BigInt.prototype.valueOf.call(value);
    return true;
  } catch {
    return false;
  }
}

function walk(
  value: unknown,
  limit: number,
  what: string,
  location: RecordLocation,
  path: string,
  level: number,
  bigints: boolean,
): void {
  if (typeof value !== "object" || value === null) return;
  const where = location.file === undefined ? {} : { file: location.file };
  const unwritable = (step: NestingStep, key?: string | number): never => {
    throw new SessionFormatError(`${what}: a BigInt cannot be written as JSON`, {
      ...where,
      path: stepPath(step, path, key),
    });
  };
  const stack: NestingStep[] = [{ value, level, parent: undefined, key: "" }];
  for (let step = stack.pop(); step !== undefined; step = stack.pop()) {
    if (step.level > limit) {
      throw new SessionFormatError(`${what}: nested deeper than ${limit} levels`, {
        ...where,
        path: stepPath(step, path),
      });
    }
    const node = step.value as Record<string, unknown>;
    if (Array.isArray(node)) {
      for (let index = 0; index < node.length; index++) {
        const item: unknown = node[index];
        if (typeof item === "object" && item !== null) {
          stack.push({ value: item, level: step.level + 1, parent: step, key: index });
        } else if (bigints && typeof item === "bigint") unwritable(step, index);
      }
      continue;
    }
    if (bigints) {
      // Only an object of another kind than a plain one can be a boxed BigInt.
      const proto: unknown = Object.getPrototypeOf(node);
      if (proto !== Object.prototype && proto !== null) {
        if (isBoxedBigInt(node)) unwritable(step);
        if (!isRecord(node)) {
          throw new SessionFormatError(`${what}: not plain data${notPlainReason(node)}`, {
            ...where,
            path: stepPath(step, path),
          });
        }
      }
    }
    for (const key of Object.keys(node)) {
      const item = node[key];
      if (typeof item === "object" && item !== null) {
        stack.push({ value: item, level: step.level + 1, parent: step, key });
      } else if (bigints && typeof item === "bigint") unwritable(step, key);
    }
  }
}

/** Throws a `SessionFormatError` for `what` (the record kind) at `path`, showing `value`. */
export function fail(
  what: string,
  detail: string,
  location: RecordLocation,
  path: string,
  value: unknown,
): never {
  throw new SessionFormatError(`${what}: ${detail}`, {
    ...(location.file === undefined ? {} : { file: location.file }),
    path,
    value,
  });
}

/** Throws a `SessionFormatError` for a required field that is absent. */
export function failMissing(what: string, location: RecordLocation, path: string): never {
  throw new SessionFormatError(`${what}: missing required field`, {
    ...(location.file === undefined ? {} : { file: location.file }),
    path,
  });
}

function issuePath(base: string, issue: v.BaseIssue<unknown>): string {
  let path = base;
  for (const item of issue.path ?? []) {
    const key = item.key;
    path = childPath(path, typeof key === "number" ? key : String(key));
  }
  return path;
}

function isMissingKey(issue: v.BaseIssue<unknown>): boolean {
  const last = issue.path?.[issue.path.length - 1];
  if (last === undefined || last.type !== "object" || issue.input !== undefined) return false;
  const parent = last.input;
  // Any object: valibot's object schemas accept class instances too (values in memory).
  return typeof parent === "object" && parent !== null && !(String(last.key) in parent);
}

/**
 * What a valibot issue says is wrong, for a `SessionFormatError` that shows the value itself
 * (short, see `preview`): as `checkSchema` words it, `expected <type>` for a wrong type, else the
 * issue's message without the value received that valibot's own messages end with (in full: a
 * 200,000-character string would be all of the message).
 */
export function issueDetail(issue: v.BaseIssue<unknown>): string {
  if (issue.kind === "schema") return `expected ${issue.expected ?? "a valid value"}`;
  for (const tail of [` but received ${issue.received}`, `: Received ${issue.received}`]) {
    if (issue.message.endsWith(tail)) return issue.message.slice(0, -tail.length);
  }
  return issue.message;
}

/**
 * Runs `schema` on `value` and turns the first issue into a `SessionFormatError` that names
 * the JSON path below `location.path` and the offending value.
 */
export function checkSchema(
  schema: v.GenericSchema<unknown, unknown>,
  value: unknown,
  what: string,
  location: RecordLocation,
): void {
  const result = v.safeParse(schema, value, { abortEarly: true });
  if (result.success) return;
  const issue = result.issues[0];
  const path = issuePath(location.path ?? "", issue);
  if (isMissingKey(issue)) failMissing(what, location, path);
  fail(what, issueDetail(issue), location, path, issue.input);
}

/** A field of a record that breaks a rule spanning several of its fields. */
export interface RuleViolation {
  /** The field to blame (its JSON path is reported). */
  readonly field: string;
  /** What is wrong, naming the fields involved. */
  readonly detail: string;
}

/**
 * A valibot action for a rule across fields of one record: runs `rule` on the already typed
 * record and reports its violation at the blamed field's path.
 */
export function recordRule<T extends object>(
  rule: (record: T) => RuleViolation | undefined,
): v.RawCheckAction<T> {
  return v.rawCheck<T>(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    const violation = rule(dataset.value);
    if (violation === undefined) return;
    const record = dataset.value as Record<string, unknown>;
    const value = record[violation.field];
    addIssue({
      message: violation.detail,
      input: value,
      path: [{ type: "object", origin: "value", input: record, key: violation.field, value }],
    });
  });
}

/** A number schema for a safe integer of `min` or more; `name` appears in messages. */
export function safeIntegerSchema(
  name: string,
  min = 0,
): v.SchemaWithPipe<
  readonly [
    v.NumberSchema<undefined>,
    v.SafeIntegerAction<number, string>,
    v.MinValueAction<number, number, string>,
  ]
> {
  return v.pipe(
    v.number(),
    v.safeInteger(`${name} must be a safe integer`),
    v.minValue(min, `${name} must be ${min} or more`),
  );
}
