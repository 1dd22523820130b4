/**
 * A small argument parser for the command line: positionals, `--flag`, `--name value` and
 * `--name=value`. Unknown flags, and a value flag given twice, are usage errors.
 *
 * @module
 */

/** A usage error: the command line does not fit the command (exit code 2). */
export class UsageError extends Error {
  /** Creates a usage error. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** How a command's flags are declared: `true` for a boolean flag, `"value"` for a flag taking a value. */
export type FlagSpec = Readonly<Record<string, "boolean" | "value" | "values">>;

/** Parsed arguments. */
export interface ParsedArgs {
  /** Positional arguments in order. */
  readonly positionals: string[];
  /** Boolean flags that were given. */
  readonly flags: ReadonlySet<string>;
  /** Value flags (each given at most once), and repeated ones (`"values"`) in `lists`. */
  readonly values: ReadonlyMap<string, string>;
  /** Every value of a `"values"` flag. */
  readonly lists: ReadonlyMap<string, string[]>;
}

/** Parses `args` against `spec`; `--help`/`-h` is always accepted as a boolean flag `help`. */
export function parseArgs(args: readonly string[], spec: FlagSpec): ParsedArgs {
  const positionals: string[] = [];
  const flags = new Set<string>();
  const values = new Map<string, string>();
  const lists = new Map<string, string[]>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") {
      // One push per argument: a spread of a long argument list would overflow the stack.
      for (const rest of args.slice(i + 1)) positionals.push(rest);
      break;
    }
    if (arg === "-h" || arg === "--help") {
      flags.add("help");
      continue;
    }
    if (!arg.startsWith("--") || arg === "-") {
      if (arg.startsWith("-") && arg !== "-" && !/^-\d/.test(arg)) {
        throw new UsageError(`unknown option '${arg}'`);
      }
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    // Own keys only: `--constructor` or `--toString` is no flag of any command.
    const kind = Object.hasOwn(spec, name) ? spec[name] : undefined;
    if (kind === undefined) throw new UsageError(`unknown option '--${name}'`);
    if (kind === "boolean") {
      if (eq >= 0) throw new UsageError(`option '--${name}' takes no value`);
      flags.add(name);
      continue;
    }
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else {
      value = args[i + 1];
      // An option in its place is not this one's value (`--to --json`): a value that starts
      // with a dash is given as `--name=value`.
      if (value !== undefined && value.startsWith("-") && !/^-\d/.test(value)) value = undefined;
      i++;
    }
    if (value === undefined || value === "") {
      throw new UsageError(`option '--${name}' needs a value`);
    }
    // A second value would silently replace the first (`--session A --session B`).
    if (kind === "value" && values.has(name)) {
      throw new UsageError(`option '--${name}' given more than once`);
    }
    values.set(name, value);
    if (kind === "values") lists.set(name, [...(lists.get(name) ?? []), value]);
  }
  return { positionals, flags, values, lists };
}

/**
 * Parses a non-negative number option: decimal digits when `integer`, otherwise a decimal float
 * as Python's `float()` reads one (`2`, `0.5`, `.5`, `2.`, `1e-3`), for the engine's float
 * options; never hexadecimal, blank or signed.
 */
export function numberOption(
  parsed: ParsedArgs,
  name: string,
  integer: boolean,
): number | undefined {
  const raw = parsed.values.get(name);
  if (raw === undefined) return undefined;
  // Checked before `Number`, which would also take `0x1`, ` 2 ` or `Infinity`.
  const value = Number(raw);
  if (
    !(integer ? /^\d+$/ : /^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/).test(raw) ||
    !Number.isFinite(value) ||
    (integer && !Number.isSafeInteger(value))
  ) {
    throw new UsageError(
      `--${name} must be a non-negative ${integer ? "integer" : "number"}, got '${raw}'`,
    );
  }
  return value;
}
