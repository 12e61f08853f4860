// The one guarantee every adapter runs, written once.
//
// In the caller's transaction: webhook_receive verifies, deduplicates and
// claims (complete_on_commit: the commit that saves the work completes the
// event, a rollback undoes both). The work runs in a savepoint, so a
// failure undoes the work, not the claim, and is recorded with
// webhook_fail: the next delivery is a `retry`. The answer is handed back
// for sending only once the transaction has committed.
//
// While the database is away (a restart, a failover, a pool with no
// connection to give) the whole delivery is tried again for up to
// retrySeconds (8: GitHub gives up after 10 s and never redelivers), then
// answered 503 with Retry-After. Trying again is safe: what the broken
// attempt wrote was rolled back with it, and one that did commit is
// answered as a duplicate the second time. Never a 500 for a delivery not
// stored. Only a database that is away is tried again: anything else it
// answers would be answered the same.
//
// A body over maxBody (10 MiB), or over the database's
// webhook.max_payload_size, is answered 413. A database error never
// reaches the response: it is logged (console.error) and answered 500.

import {
  Answer,
  Delivery,
  answerFor,
  deliveryFrom,
  failed,
  refusedAnswer,
  tooLarge,
  unavailable,
  unknownProvider,
} from "./answers.js";
import { Queryable, Transact } from "./db.js";
import { PayloadTooLarge, UnknownProvider, isOutage, sqlstate } from "./outage.js";
import * as sql from "./statements.js";

export const RETRY_SECONDS = 8;
/** The largest body a handler reads: 10 MiB. */
export const MAX_BODY = 10 * 1024 * 1024;

/** Request headers as frameworks hold them: fetch's `Headers`, or Node's object. */
export type HeadersLike = Headers | Record<string, string | string[] | undefined>;

export interface ReceiveOptions {
  /** The URL the provider called, for the schemes that sign it (Twilio, Square, HubSpot). */
  url?: string | null;
  /** true: queue for workers; false: claim here; undefined: what the provider is registered for. */
  inbox?: boolean | null;
  /** The commit of this transaction completes a claimed event (one-transaction handlers). */
  completeOnCommit?: boolean;
  /** The claim's lease (`'30 seconds'`); the server's default if left out. */
  lease?: string | null;
}

/** The request's headers as the JSON object webhook_receive reads. */
export function headersJson(headers: HeadersLike): string {
  const out: Record<string, string> = {};
  const entries =
    headers instanceof Headers ? [...headers.entries()] : Object.entries(headers);
  for (const [name, value] of entries) {
    if (value === undefined) continue;
    out[name] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  return JSON.stringify(out);
}

function rawBody(body: Uint8Array): Buffer {
  if (!(body instanceof Uint8Array)) {
    throw new TypeError(
      "body must be the raw request bytes, read before any parsing: signatures cover exactly those",
    );
  }
  return Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/** webhook_receive's arguments. */
export function receiveParams(provider: string, headers: HeadersLike, body: Uint8Array, o: ReceiveOptions = {}): unknown[] {
  return [provider, headersJson(headers), rawBody(body), o.lease ?? null, o.inbox ?? null, o.url ?? null, o.completeOnCommit ?? false];
}

async function receiveWith(db: Queryable, params: unknown[]): Promise<Delivery> {
  try {
    const [row] = await db.query(sql.RECEIVE, params);
    return deliveryFrom(row);
  } catch (error) {
    if (sqlstate(error) === sql.UNKNOWN_PROVIDER) throw new UnknownProvider(String(params[0]));
    if (sqlstate(error) === sql.PAYLOAD_TOO_LARGE) throw new PayloadTooLarge(String((error as Error).message));
    throw error;
  }
}

/** webhook_receive in the caller's open transaction; the caller commits, then answers `answerFor(delivery)`. */
export function receive(db: Queryable, provider: string, headers: HeadersLike, body: Uint8Array, o: ReceiveOptions = {}): Promise<Delivery> {
  return receiveWith(db, receiveParams(provider, headers, body, o));
}

/** The work: runs in the delivery's transaction; what it returns (JSON, optional) is answered to duplicates. */
export type Work<D = Queryable> = (db: D, delivery: Delivery) => Promise<unknown>;

/** Receive and work one delivery inside an open transaction. */
export async function deliver(db: Queryable, params: unknown[], work: Work): Promise<Answer> {
  const delivery = await receiveWith(db, params);
  if (!delivery.claimed) return answerFor(delivery);
  await db.query(sql.SAVEPOINT);
  try {
    const result = await work(db, delivery);
    if (result !== undefined && result !== null) await db.query(sql.COMPLETE, [delivery.id, JSON.stringify(result)]);
    await db.query(sql.RELEASE);
  } catch (error) {
    if (isOutage(error)) throw error;
    await db.query(sql.ROLLBACK_TO);
    const message = error instanceof Error ? error.message || error.name : String(error);
    await db.query(sql.FAIL, [delivery.id, message]);
    return failed();
  }
  return answerFor(delivery);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Run `attempt` (a whole delivery, its own transaction) again while the database is away; 503 after `retrySeconds`. */
export async function retrying(attempt: () => Promise<Answer>, retrySeconds = RETRY_SECONDS): Promise<Answer> {
  const deadline = Date.now() + retrySeconds * 1000;
  let wait = 100;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (error instanceof UnknownProvider) return unknownProvider(error.provider);
      if (error instanceof PayloadTooLarge) return tooLarge();
      if (!isOutage(error)) {
        // Logged with the database's words, answered without them.
        console.error("pg-webhook-inbox: webhook delivery failed:", error);
        return refusedAnswer();
      }
      if (Date.now() + wait >= deadline) return unavailable();
      await sleep(wait);
      wait = Math.min(wait * 2, 1000);
    }
  }
}

/**
 * The URL the provider called: the configured public base, then the
 * request's path and query. Null without a base: the schemes that sign the
 * URL then refuse the delivery (missing_url); the URL is never built from
 * the Host header, which whoever sends the request chooses.
 */
export function publicUrl(base: string | null | undefined, pathAndQuery: string): string | null {
  return base ? base.replace(/\/+$/, "") + pathAndQuery : null;
}

export interface HandlerOptions {
  /** The base URL the providers are configured with (`https://hooks.example.com`). */
  publicUrl?: string;
  retrySeconds?: number;
  inbox?: boolean;
  /** The largest body taken, in bytes (10 MiB); a larger one is answered 413. */
  maxBody?: number;
}

/** Handles deliveries, each in a transaction of its own from `transact`. */
export class WebhookHandler {
  constructor(
    readonly transact: Transact,
    readonly options: HandlerOptions = {},
  ) {}

  get maxBody(): number {
    return this.options.maxBody ?? MAX_BODY;
  }

  async handle(provider: string, headers: HeadersLike, body: Uint8Array, work: Work, path = ""): Promise<Answer> {
    if (body.byteLength > this.maxBody) return tooLarge();
    const params = receiveParams(provider, headers, body, {
      url: publicUrl(this.options.publicUrl, path),
      inbox: this.options.inbox,
      completeOnCommit: true,
    });
    return retrying(() => this.transact((db) => deliver(db, params, work)), this.options.retrySeconds);
  }
}
