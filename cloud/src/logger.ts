import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, FastifyChildLoggerFactory } from 'fastify/types/logger.js';
import { pino, type DestinationStream, type Level, type Logger } from 'pino';

/**
 * The prefixes of every secret the service issues: API keys, webhook signing secrets,
 * destination secrets, robot MQTT passwords, enrollment tokens.
 */
export const SECRET_PREFIXES = ['ak', 'whsec', 'dsec', 'rsec', 'ret'] as const;

/**
 * A secret as issued (`newSecret`: prefix + 43 base64url characters). Ids share some prefixes
 * (`ret_` + 26 base32 characters for an enrollment token id) and are not secrets; 32 characters
 * and more is longer than any id and shorter than any secret.
 */
const SECRET_TOKEN = new RegExp(`\\b(${SECRET_PREFIXES.join('|')})_[A-Za-z0-9_-]{32,}`, 'g');
/** A value that starts like a secret, however long: a query value is dropped whole. */
const SECRET_VALUE = new RegExp(`^(${SECRET_PREFIXES.join('|')})_`);
/** Query parameters whose value is a credential whatever it looks like. */
const SECRET_NAME = /key|token|secret|passw|pwd|auth|credential|signature|sig$/i;

export const REDACTED = '[redacted]';

/** Replaces every secret-shaped token in free text (log messages, error messages, URLs). */
export function scrubSecrets(text: string): string {
  return text.includes('_') ? text.replace(SECRET_TOKEN, (_m, prefix: string) => `${prefix}_${REDACTED}`) : text;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return s;
  }
}

/**
 * The URL as it may be logged: the value of any query parameter named like a credential
 * (`api_key`, `token`, `secret`, `password`, …) or starting like one of our secrets is replaced,
 * and a secret-shaped token anywhere else (the path) is too.
 */
export function redactUrl(url: string): string {
  const q = url.indexOf('?');
  const path = scrubSecrets(q === -1 ? url : url.slice(0, q));
  if (q === -1) return path;
  const query = url
    .slice(q + 1)
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      if (eq === -1) return SECRET_VALUE.test(safeDecode(pair)) ? REDACTED : scrubSecrets(pair);
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (SECRET_NAME.test(safeDecode(name)) || SECRET_VALUE.test(safeDecode(value))) return `${name}=${REDACTED}`;
      return scrubSecrets(pair);
    })
    .join('&');
  return `${path}?${query}`;
}

interface LoggableRequest {
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/** What is logged of a request (Fastify's own serializer, with the URL redacted; no headers). */
export function serializeRequest(req: LoggableRequest): Record<string, unknown> {
  return {
    method: req.method,
    url: typeof req.url === 'string' ? redactUrl(req.url) : req.url,
    host: req.host,
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}

function serializeError(err: unknown): unknown {
  const out = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  if (out && typeof out === 'object') {
    if (typeof out.message === 'string') out.message = scrubSecrets(out.message);
    if (typeof out.stack === 'string') out.stack = scrubSecrets(out.stack);
  }
  return out;
}

/**
 * The cloud's logger: JSON on `destination` (stderr for `serve`). Never logs a credential:
 * the Authorization header and fields named key/secret/password are censored, request URLs
 * go through `redactUrl`, and message strings and error messages are scrubbed of anything
 * shaped like a secret we issue.
 */
export function createLogger(level: Level | 'silent', destination: DestinationStream = pino.destination(2)): Logger {
  return pino(
    {
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'headers.authorization',
          'authorization',
          '*.authorization',
          'key',
          'secret',
          'password',
          'token',
          '*.key',
          '*.secret',
          '*.password',
          '*.token',
        ],
        censor: REDACTED,
      },
      serializers: { req: serializeRequest, err: serializeError },
      hooks: {
        logMethod(args, method) {
          for (let i = 0; i < args.length; i++) {
            const a: unknown = args[i];
            if (typeof a === 'string') (args as unknown[])[i] = scrubSecrets(a);
          }
          method.apply(this, args);
        },
      },
    },
    destination,
  );
}

type LevelName = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** What the lazy request logger needs of its parent: a pino logger. */
interface LevelAwareLogger extends FastifyBaseLogger {
  isLevelEnabled(level: string): boolean;
}

/**
 * A request's logger that becomes `parent.child(bindings)` when something is logged at an
 * enabled level, and costs one small object otherwise. Fastify makes a child logger for every
 * request (with its request id) and calls it on every request ('incoming request', 'request
 * completed' at info); at warn and above those calls do nothing, and pino's child, with its
 * bindings serialized and redacted, was about 2 % of an authenticated read's CPU. What is
 * written is the child's own output, byte for byte.
 */
class LazyChildLogger {
  private real: LevelAwareLogger | null = null;

  constructor(
    private readonly parent: LevelAwareLogger,
    private readonly bindings: Bindings,
  ) {}

  private get logger(): LevelAwareLogger {
    // A pino logger's child is a pino logger.
    return (this.real ??= this.parent.child(this.bindings) as LevelAwareLogger);
  }

  private write(level: LevelName, args: unknown[]): void {
    // Once built, the child decides (its level may have been set on it).
    if (!(this.real ?? this.parent).isLevelEnabled(level)) return;
    const logger = this.logger;
    Reflect.apply(logger[level], logger, args);
  }

  get level(): string {
    return (this.real ?? this.parent).level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }
  error(...args: unknown[]): void {
    this.write('error', args);
  }
  warn(...args: unknown[]): void {
    this.write('warn', args);
  }
  info(...args: unknown[]): void {
    this.write('info', args);
  }
  debug(...args: unknown[]): void {
    this.write('debug', args);
  }
  trace(...args: unknown[]): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }

  /** Whether the child was built (tests). */
  get built(): boolean {
    return this.real !== null;
  }
}

/**
 * Fastify's childLoggerFactory for a pino logger: request loggers built only when they write
 * (see LazyChildLogger). With options (a route's own log level or serializers) or a parent that
 * is not pino, the child is made at once, as Fastify's default does.
 */
export const lazyChildLoggerFactory: FastifyChildLoggerFactory = function (logger, bindings, opts) {
  const pinoLike = typeof (logger as Partial<LevelAwareLogger>).isLevelEnabled === 'function';
  if (!pinoLike || opts.level !== undefined || opts.serializers !== undefined) return logger.child(bindings, opts);
  return new LazyChildLogger(logger as LevelAwareLogger, bindings);
};
