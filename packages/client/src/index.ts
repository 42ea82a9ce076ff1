import type {
  ApiErrorBody,
  ApiKey,
  CreateApiKeyBody,
  CreateDestinationBody,
  CreatedApiKey,
  CreatedDestination,
  DestinationCheck,
  CreateRoutingRuleBody,
  Destination,
  Entitlements,
  RoutingRule,
  SyncHealthRowBody,
  Usage,
} from '@fleet/protocol';

export interface FleetClientOptions {
  /** e.g. https://fleet.example.com (no /v1). */
  baseUrl: string;
  apiKey: string;
  /** Defaults to the global fetch. */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  /** Sent as Idempotency-Key: a retry with the same key replays the stored response. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** A non-2xx answer from /v1: branch on `code`, not on `message`. */
export class FleetApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Record<string, unknown> | undefined,
    readonly requestId: string | null,
  ) {
    super(message);
    this.name = 'FleetApiError';
  }
}

/** Typed client for the /v1 API. */
export class FleetClient {
  private readonly baseUrl: string;
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: FleetClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? fetch;
  }

  readonly apiKeys = {
    create: (body: CreateApiKeyBody, opts?: RequestOptions) => this.request<CreatedApiKey>('POST', '/v1/api-keys', body, opts),
    list: (opts?: RequestOptions) => this.request<{ api_keys: ApiKey[] }>('GET', '/v1/api-keys', undefined, opts),
    revoke: (id: string, opts?: RequestOptions) => this.request<void>('DELETE', `/v1/api-keys/${encodeURIComponent(id)}`, undefined, opts),
  };

  /** Grant providers; the `dsec_` secret is only in the creation answer. */
  readonly destinations = {
    create: (body: CreateDestinationBody, opts?: RequestOptions) => this.request<CreatedDestination>('POST', '/v1/destinations', body, opts),
    list: (opts?: RequestOptions) => this.request<{ destinations: Destination[] }>('GET', '/v1/destinations', undefined, opts),
    revoke: (id: string, opts?: RequestOptions) => this.request<void>('DELETE', `/v1/destinations/${encodeURIComponent(id)}`, undefined, opts),
    /** A synthetic signed grant request to the provider; `pass` for a grant or a deferral. */
    check: (id: string, opts?: RequestOptions) => this.request<DestinationCheck>('POST', `/v1/destinations/${encodeURIComponent(id)}/check`, undefined, opts),
  };

  /** Which episodes sync where; the first matching rule wins. */
  readonly routingRules = {
    create: (body: CreateRoutingRuleBody, opts?: RequestOptions) => this.request<RoutingRule>('POST', '/v1/routing-rules', body, opts),
    list: (opts?: RequestOptions) => this.request<{ routing_rules: RoutingRule[] }>('GET', '/v1/routing-rules', undefined, opts),
    delete: (id: string, opts?: RequestOptions) => this.request<void>('DELETE', `/v1/routing-rules/${encodeURIComponent(id)}`, undefined, opts),
    /** `ruleIds`: every rule, each once, in the new order. */
    setOrder: (ruleIds: string[], opts?: RequestOptions) =>
      this.request<{ routing_rules: RoutingRule[] }>('PUT', '/v1/routing-rules/order', { rule_ids: ruleIds }, opts),
  };

  /** Per robot: what has not been verified at a destination yet. */
  syncHealth(opts?: RequestOptions): Promise<{ robots: SyncHealthRowBody[] }> {
    return this.request('GET', '/v1/sync-health/robots', undefined, opts);
  }

  entitlements(opts?: RequestOptions): Promise<Entitlements> {
    return this.request('GET', '/v1/entitlements', undefined, opts);
  }

  usage(range: { from?: string; to?: string } = {}, opts?: RequestOptions): Promise<Usage> {
    const q = new URLSearchParams(Object.entries(range).filter((e): e is [string, string] => e[1] !== undefined));
    return this.request('GET', `/v1/usage${q.size ? `?${q.toString()}` : ''}`, undefined, opts);
  }

  /** Any /v1 call; resolves with the parsed JSON body (undefined for 204). */
  async request<T>(method: string, path: string, body?: unknown, opts: RequestOptions = {}): Promise<T> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.apiKey}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (opts.idempotencyKey) headers['idempotency-key'] = opts.idempotencyKey;
    const res = await this.fetchImpl(`${this.baseUrl}${path}`, {
      method,
      headers,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
      redirect: 'error',
    });
    const text = await res.text();
    if (!res.ok) {
      let parsed: Partial<ApiErrorBody> = {};
      try {
        parsed = JSON.parse(text) as ApiErrorBody;
      } catch {
        // A proxy's HTML error page: keep the status, say what came back.
      }
      throw new FleetApiError(
        res.status,
        parsed.error?.code ?? 'http_error',
        parsed.error?.message ?? `HTTP ${res.status}`,
        parsed.error?.details,
        res.headers.get('x-request-id'),
      );
    }
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }
}
