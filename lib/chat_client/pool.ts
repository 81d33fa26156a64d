/**
 * Several servers of one model behind one client: a concurrency limit, retries with
 * exponential backoff on 429, 5xx, time-outs and lost connections, least-loaded endpoint
 * choice, health checks that take a failing server out and bring it back, and the numbers
 * a rollout loop reports (requests in flight, tokens per second).
 */
import { errorMessageOf, PolicyRequestError } from './openai.js';
import { checkInteger, checkNonEmptyString, checkObject, typeError } from '../check.js';

/** Options of {@link EndpointPool}. */
export interface EndpointPoolOptions {
  /** Base URLs of the servers (e.g. one per GPU node), without a trailing path: `http://10.0.0.5:8000`. */
  endpoints: readonly string[];
  /** Requests in flight at once, over all endpoints (default 64). */
  maxConcurrency?: number;
  /** Retries of a failed attempt that may succeed later: 429, 5xx, time-out, network (default 4). */
  maxRetries?: number;
  /** First backoff in milliseconds, doubled each retry, with jitter in [0.5, 1); a `Retry-After` header wins (default 200). */
  retryBaseMs?: number;
  /** Longest backoff (default 10000). */
  retryMaxMs?: number;
  /** Limit of one attempt in milliseconds (default 120000). */
  timeoutMs?: number;
  /** Path probed by health checks (default `/health`, which vLLM and SGLang both serve). */
  healthPath?: string;
  /** How long an endpoint that failed stays out before it is probed again, in milliseconds (default 5000). */
  unhealthyMs?: number;
  /** Extra headers for every request (e.g. authorization). */
  headers?: Record<string, string>;
  /** Called after each request with the pool's numbers. */
  onProgress?: (stats: PoolStats) => void;
}

/** The numbers of one endpoint. */
export interface EndpointStats {
  url: string;
  healthy: boolean;
  inFlight: number;
  requests: number;
  failures: number;
}

/** The pool's numbers since it was made. */
export interface PoolStats {
  /** Requests answered, failed for good, and being served now. */
  completed: number;
  failed: number;
  inFlight: number;
  /** Requests waiting for a concurrency slot. */
  queued: number;
  /** Attempts that were retried. */
  retries: number;
  /** Tokens read and generated in answered requests. */
  promptTokens: number;
  completionTokens: number;
  /** Milliseconds since the first request. */
  elapsedMs: number;
  /** completionTokens per second over `elapsedMs`. */
  tokensPerSecond: number;
  endpoints: EndpointStats[];
}

/** One answered attempt: the parsed JSON body and the endpoint that served it. */
export interface PoolResponse {
  body: unknown;
  endpoint: string;
}

interface Endpoint extends EndpointStats {
  downUntil: number;
}

const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve, reject) => {
  if (signal?.aborted) { reject(signal.reason); return; }
  const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
  const onAbort = () => { clearTimeout(timer); reject(signal!.reason); };
  signal?.addEventListener('abort', onAbort, { once: true });
});

/** Whether a failed attempt may succeed if tried again. */
function retryable(error: PolicyRequestError): boolean {
  if (error.kind === 'timeout' || error.kind === 'network') return true;
  return error.kind === 'http' && error.status !== undefined && (error.status === 429 || error.status >= 500);
}

/** A pool of endpoints serving one model. */
export class EndpointPool {
  readonly #endpoints: Endpoint[];
  readonly #maxConcurrency: number;
  readonly #maxRetries: number;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;
  readonly #timeoutMs: number;
  readonly #healthPath: string;
  readonly #unhealthyMs: number;
  readonly #headers: Record<string, string>;
  readonly #onProgress: ((stats: PoolStats) => void) | undefined;
  readonly #waiting: Array<() => void> = [];
  #active = 0;
  #next = 0;
  #completed = 0;
  #failed = 0;
  #retries = 0;
  #promptTokens = 0;
  #completionTokens = 0;
  #startedAt: number | undefined;

  /** @throws TypeError or RangeError naming a bad option. */
  constructor(options: EndpointPoolOptions) {
    const checked = checkObject('options', options);
    const endpoints = checked.endpoints;
    if (!Array.isArray(endpoints) || endpoints.length === 0) {
      throw typeError('options.endpoints', 'a non-empty array of URLs', endpoints);
    }
    this.#endpoints = endpoints.map((value, i) => {
      const url = checkNonEmptyString(`options.endpoints[${i}]`, value);
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw typeError(`options.endpoints[${i}]`, 'an http(s) URL', url);
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw typeError(`options.endpoints[${i}]`, 'an http(s) URL', url);
      return { url: url.replace(/\/+$/, ''), healthy: true, inFlight: 0, requests: 0, failures: 0, downUntil: 0 };
    });
    this.#maxConcurrency = checkInteger('options.maxConcurrency', checked.maxConcurrency, 64, 1, 1 << 20);
    this.#maxRetries = checkInteger('options.maxRetries', checked.maxRetries, 4, 0, 100);
    this.#retryBaseMs = checkInteger('options.retryBaseMs', checked.retryBaseMs, 200, 0, 3_600_000);
    this.#retryMaxMs = checkInteger('options.retryMaxMs', checked.retryMaxMs, 10_000, 0, 3_600_000);
    this.#timeoutMs = checkInteger('options.timeoutMs', checked.timeoutMs, 120_000, 1, 86_400_000);
    this.#unhealthyMs = checkInteger('options.unhealthyMs', checked.unhealthyMs, 5_000, 0, 86_400_000);
    this.#healthPath = checked.healthPath === undefined ? '/health' : checkNonEmptyString('options.healthPath', checked.healthPath);
    this.#headers = { 'content-type': 'application/json', accept: 'application/json' };
    if (checked.headers !== undefined) {
      for (const [name, value] of Object.entries(checkObject('options.headers', checked.headers))) {
        if (typeof value !== 'string') throw typeError(`options.headers.${name}`, 'a string', value);
        this.#headers[name.toLowerCase()] = value;
      }
    }
    if (checked.onProgress !== undefined && typeof checked.onProgress !== 'function') {
      throw typeError('options.onProgress', 'a function', checked.onProgress);
    }
    this.#onProgress = checked.onProgress as ((stats: PoolStats) => void) | undefined;
  }

  /** The pool's numbers now. */
  stats(): PoolStats {
    const elapsedMs = this.#startedAt === undefined ? 0 : Date.now() - this.#startedAt;
    return {
      completed: this.#completed,
      failed: this.#failed,
      inFlight: this.#active,
      queued: this.#waiting.length,
      retries: this.#retries,
      promptTokens: this.#promptTokens,
      completionTokens: this.#completionTokens,
      elapsedMs,
      tokensPerSecond: elapsedMs > 0 ? this.#completionTokens / (elapsedMs / 1000) : 0,
      endpoints: this.#endpoints.map(({ url, healthy, inFlight, requests, failures }) => ({ url, healthy, inFlight, requests, failures })),
    };
  }

  /**
   * Probes every endpoint's health path (GET, 2xx is healthy) and marks each; resolves with
   * the endpoints' numbers. An unhealthy endpoint gets no requests until a probe or its
   * `unhealthyMs` pause brings it back.
   */
  async checkHealth(timeoutMs = 5_000): Promise<EndpointStats[]> {
    await Promise.all(this.#endpoints.map(async (endpoint) => {
      try {
        const response = await fetch(endpoint.url + this.#healthPath, { headers: this.#headers, signal: AbortSignal.timeout(timeoutMs) });
        await response.arrayBuffer();
        this.#mark(endpoint, response.ok);
      } catch {
        this.#mark(endpoint, false);
      }
    }));
    return this.stats().endpoints;
  }

  /**
   * POSTs `body` as JSON to `path` on an endpoint, retrying what may succeed later on the
   * next endpoint. `usage` reads the token counts from an answer for the throughput numbers.
   * Rejects with a {@link PolicyRequestError} when every attempt failed or the answer is not JSON.
   */
  async post(path: string, body: unknown, options: { signal?: AbortSignal; timeoutMs?: number; usage?: (answer: unknown) => { prompt: number; completion: number } } = {}): Promise<PoolResponse> {
    this.#startedAt ??= Date.now();
    await this.#acquire(options.signal);
    try {
      for (let attempt = 0; ; attempt++) {
        const endpoint = this.#choose();
        try {
          const answer = await this.#attempt(endpoint, path, body, options.timeoutMs ?? this.#timeoutMs, options.signal);
          this.#completed++;
          if (options.usage !== undefined) {
            const { prompt, completion } = options.usage(answer);
            this.#promptTokens += prompt;
            this.#completionTokens += completion;
          }
          return { body: answer, endpoint: endpoint.url };
        } catch (error) {
          const failure = error as PolicyRequestError;
          if (!(failure instanceof PolicyRequestError) || !retryable(failure) || attempt >= this.#maxRetries) {
            this.#failed++;
            throw error;
          }
          this.#retries++;
          await sleep(this.#backoff(attempt, failure), options.signal).catch((cause: unknown) => {
            throw new PolicyRequestError('aborted', 'The request was aborted while waiting to retry', { cause });
          });
        }
      }
    } finally {
      this.#release();
      this.#onProgress?.(this.stats());
    }
  }

  async #attempt(endpoint: Endpoint, path: string, body: unknown, timeoutMs: number, signal: AbortSignal | undefined): Promise<unknown> {
    const url = endpoint.url + path;
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal === undefined ? timeout : AbortSignal.any([timeout, signal]);
    endpoint.inFlight++;
    endpoint.requests++;
    try {
      let response: Response;
      let text: string;
      try {
        response = await fetch(url, { method: 'POST', headers: this.#headers, body: JSON.stringify(body), signal: combined });
        text = await response.text();
      } catch (error) {
        if (signal?.aborted) throw new PolicyRequestError('aborted', 'The request was aborted', { cause: error });
        if (timeout.aborted) throw new PolicyRequestError('timeout', `No complete answer from ${url} within ${timeoutMs} ms`, { cause: error });
        const detail = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error);
        throw new PolicyRequestError('network', `Could not reach ${url}: ${detail}`, { cause: error });
      }
      if (!response.ok) {
        const failure = new PolicyRequestError('http', `${url} answered ${response.status}: ${errorMessageOf(text)}`, { status: response.status, body: text });
        (failure as PolicyRequestError & { retryAfterMs?: number }).retryAfterMs = retryAfterMs(response.headers.get('retry-after'));
        throw failure;
      }
      try {
        return JSON.parse(text);
      } catch {
        throw new PolicyRequestError('protocol', `${url} answered with something that is not JSON: ${text.slice(0, 200)}`, { body: text });
      }
    } catch (error) {
      endpoint.failures++;
      // A refused connection means the server is down; a 5xx or a time-out may pass, so it stays in.
      if (error instanceof PolicyRequestError && error.kind === 'network') this.#mark(endpoint, false);
      throw error;
    } finally {
      endpoint.inFlight--;
    }
  }

  #backoff(attempt: number, failure: PolicyRequestError): number {
    const after = (failure as PolicyRequestError & { retryAfterMs?: number }).retryAfterMs;
    if (after !== undefined) return Math.min(after, this.#retryMaxMs);
    const base = Math.min(this.#retryBaseMs * 2 ** attempt, this.#retryMaxMs);
    return base * (0.5 + Math.random() / 2);
  }

  /** The healthy endpoint with the fewest requests in flight, round robin among equals; all when none is healthy. */
  #choose(): Endpoint {
    const now = Date.now();
    for (const endpoint of this.#endpoints) if (!endpoint.healthy && now >= endpoint.downUntil) endpoint.healthy = true;
    const healthy = this.#endpoints.filter((endpoint) => endpoint.healthy);
    const candidates = healthy.length > 0 ? healthy : this.#endpoints;
    let best: Endpoint | undefined;
    for (let k = 0; k < candidates.length; k++) {
      const endpoint = candidates[(this.#next + k) % candidates.length]!;
      if (best === undefined || endpoint.inFlight < best.inFlight) best = endpoint;
    }
    this.#next = (this.#next + 1) % candidates.length;
    return best!;
  }

  #mark(endpoint: Endpoint, healthy: boolean): void {
    endpoint.healthy = healthy;
    endpoint.downUntil = healthy ? 0 : Date.now() + this.#unhealthyMs;
  }

  async #acquire(signal: AbortSignal | undefined): Promise<void> {
    if (this.#active < this.#maxConcurrency) { this.#active++; return; }
    await new Promise<void>((resolve, reject) => {
      const grant = () => { signal?.removeEventListener('abort', onAbort); resolve(); };
      const onAbort = () => {
        const at = this.#waiting.indexOf(grant);
        if (at >= 0) this.#waiting.splice(at, 1);
        reject(new PolicyRequestError('aborted', 'The request was aborted while waiting for a slot'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(grant);
    });
  }

  #release(): void {
    const next = this.#waiting.shift();
    // A waiting request takes the slot over, so the count stays.
    if (next !== undefined) next();
    else this.#active--;
  }
}

/** `Retry-After` in seconds or as an HTTP date, in milliseconds; undefined when absent or unreadable. */
function retryAfterMs(header: string | null): number | undefined {
  if (header === null) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}
