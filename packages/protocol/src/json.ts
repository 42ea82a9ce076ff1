/**
 * Bounds on every JSON document that enters the system: HTTP bodies, robot MQTT payloads and the
 * answers of grant providers and webhook receivers. JSON.parse itself is iterative in V8, but
 * JSON.stringify, canonical-JSON fingerprints and most tree walks recurse, so a value nested a few
 * thousand levels deep (8 KB of `[`) would blow the stack wherever it is read next. A document
 * beyond these bounds is refused where it arrives and never stored.
 */
export const JSON_LIMITS = {
  /** Nested objects and arrays; the top-level value is depth 1. */
  maxDepth: 32,
  /** Keys of one object. */
  maxObjectKeys: 1_000,
  /** Items of one array (a manifest lists at most 10,000 files). */
  maxArrayLength: 10_000,
} as const;

export type JsonLimits = { readonly [K in keyof typeof JSON_LIMITS]: number };

export interface JsonBoundsViolation {
  /** Which bound: `depth`, `keys` or `array_length`. */
  limit: 'depth' | 'keys' | 'array_length';
  max: number;
  /** JSON Pointer of the offending container (segments capped for quoting). */
  path: string;
  message: string;
}

const MAX_SEGMENT_CHARS = 64;

function pointer(segments: readonly (string | number)[]): string {
  if (segments.length === 0) return '';
  return segments
    .map((s) => {
      const text = String(s).replace(/~/g, '~0').replace(/\//g, '~1');
      return `/${text.length > MAX_SEGMENT_CHARS ? `${text.slice(0, MAX_SEGMENT_CHARS)}…` : text}`;
    })
    .join('');
}

/** A container still to visit: its parent's frame and its key there make its path, built only on a violation. */
interface BoundsFrame {
  node: object;
  depth: number;
  parent: BoundsFrame | null;
  key: string | number;
}

function framePath(frame: BoundsFrame): string {
  const segments: (string | number)[] = [];
  for (let f: BoundsFrame | null = frame; f && f.parent; f = f.parent) segments.push(f.key);
  return pointer(segments.reverse());
}

/**
 * The first bound `value` breaks, or null. Walks the tree with an explicit stack (no recursion),
 * so it is safe on any value, however deep. It runs on every robot message and request body: a
 * container costs one small frame, and a path is put together only for a violation.
 */
export function findJsonBoundsViolation(value: unknown, limits: JsonLimits = JSON_LIMITS): JsonBoundsViolation | null {
  if (value === null || typeof value !== 'object') return null;
  const stack: BoundsFrame[] = [{ node: value, depth: 1, parent: null, key: '' }];
  while (stack.length > 0) {
    const frame = stack.pop()!;
    const { node, depth } = frame;
    if (depth > limits.maxDepth) {
      return { limit: 'depth', max: limits.maxDepth, path: framePath(frame), message: `JSON nested deeper than ${limits.maxDepth} levels` };
    }
    if (Array.isArray(node)) {
      if (node.length > limits.maxArrayLength) {
        return { limit: 'array_length', max: limits.maxArrayLength, path: framePath(frame), message: `JSON array longer than ${limits.maxArrayLength} items` };
      }
      for (let i = node.length - 1; i >= 0; i--) {
        const child: unknown = node[i];
        if (child !== null && typeof child === 'object') stack.push({ node: child, depth: depth + 1, parent: frame, key: i });
      }
    } else {
      const keys = Object.keys(node);
      if (keys.length > limits.maxObjectKeys) {
        return { limit: 'keys', max: limits.maxObjectKeys, path: framePath(frame), message: `JSON object with more than ${limits.maxObjectKeys} keys` };
      }
      for (let i = keys.length - 1; i >= 0; i--) {
        const child: unknown = (node as Record<string, unknown>)[keys[i]!];
        if (child !== null && typeof child === 'object') stack.push({ node: child, depth: depth + 1, parent: frame, key: keys[i]! });
      }
    }
  }
  return null;
}

export type BoundedJsonResult =
  | { ok: true; value: unknown }
  | { ok: false; reason: 'invalid_json'; message: string }
  /** `value` is the parsed document, for reading an id to refuse it by; never store it. */
  | { ok: false; reason: 'bounds'; message: string; violation: JsonBoundsViolation; value: unknown };

/**
 * JSON.parse, then the bounds. The message never quotes the input (it may be hostile or huge);
 * keys named `__proto__` are refused, as they would be by the HTTP body parser.
 */
export function parseBoundedJson(text: string, limits: JsonLimits = JSON_LIMITS): BoundedJsonResult {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    const at = /position (\d+)/.exec((err as Error).message)?.[1];
    return { ok: false, reason: 'invalid_json', message: `not valid JSON${at ? ` (at position ${at})` : ''}` };
  }
  const violation = findJsonBoundsViolation(value, limits);
  if (violation) return { ok: false, reason: 'bounds', message: violation.message, violation, value };
  return { ok: true, value };
}

/**
 * JSON.stringify that cannot overflow the stack: the native one first, and on a RangeError an
 * iterative serializer with the same output for JSON-shaped values (plain objects, arrays,
 * strings, finite numbers, booleans, null; `toJSON` honoured; undefined and functions dropped
 * from objects and written as null in arrays). It serves values already stored before the bounds
 * existed, so that no stored value can make a read fail.
 */
export function safeJsonStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? 'null';
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    return iterativeStringify(value);
  }
}

type Frame =
  | { kind: 'array'; items: unknown[]; i: number; out: string[] }
  | { kind: 'object'; obj: Record<string, unknown>; keys: string[]; i: number; out: string[]; pendingKey: string | null };

function prepare(value: unknown, key: string): unknown {
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return (value as { toJSON(k: string): unknown }).toJSON(key);
  }
  return value;
}

function scalar(value: unknown): string | undefined {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      return Number.isFinite(value) ? String(value) : 'null';
    case 'bigint':
      throw new TypeError('Do not know how to serialize a BigInt');
    default:
      return undefined;
  }
}

function iterativeStringify(root: unknown): string {
  const seen = new Set<object>();
  const stack: Frame[] = [];
  let result: string | undefined;

  // Hands a finished child's text to its parent frame (or sets the result at the top).
  const emit = (text: string | undefined): void => {
    const top = stack[stack.length - 1];
    if (!top) {
      result = text ?? 'null';
      return;
    }
    if (top.kind === 'array') top.out.push(text ?? 'null');
    else if (text !== undefined) top.out.push(`${JSON.stringify(top.pendingKey)}:${text}`);
  };
  const open = (value: unknown): void => {
    if (value !== null && typeof value === 'object') {
      if (seen.has(value)) throw new TypeError('Converting circular structure to JSON');
      seen.add(value);
      if (Array.isArray(value)) stack.push({ kind: 'array', items: value, i: 0, out: [] });
      else stack.push({ kind: 'object', obj: value as Record<string, unknown>, keys: Object.keys(value), i: 0, out: [], pendingKey: null });
      return;
    }
    emit(typeof value === 'function' || typeof value === 'symbol' ? undefined : scalar(value));
  };

  open(prepare(root, ''));
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.kind === 'array') {
      if (top.i < top.items.length) {
        const i = top.i++;
        open(prepare(top.items[i], String(i)));
        continue;
      }
      stack.pop();
      seen.delete(top.items);
      emit(`[${top.out.join(',')}]`);
    } else {
      if (top.i < top.keys.length) {
        const key = top.keys[top.i++]!;
        top.pendingKey = key;
        open(prepare(top.obj[key], key));
        continue;
      }
      stack.pop();
      seen.delete(top.obj);
      emit(`{${top.out.join(',')}}`);
    }
  }
  return result ?? 'null';
}
