// What the suite shares: the cases of clients/testing/cases.json, signing
// as Stripe and Slack do, the count of order rows (as the owner, on a
// fresh connection each time: the restart tests cut every connection),
// and the server restart.

import { createHmac, randomBytes } from "node:crypto";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import pg from "pg";

const here = path.dirname(fileURLToPath(import.meta.url));
export const TESTING = path.resolve(here, "../../../testing");
export const CASES: Case[] = JSON.parse(readFileSync(path.join(TESTING, "cases.json"), "utf8")).cases;
export const DATABASE_URL = process.env.DATABASE_URL!;
export const ADMIN_URL = process.env.ADMIN_URL!;
export const AWAY = "postgresql://clients_app@127.0.0.1:1/nowhere";

export interface Case {
  name: string;
  provider: string;
  event?: string;
  raw_body?: string;
  body_bytes?: number;
  sign: "stripe" | "slack" | "forged" | "none";
  fail?: boolean;
  expect: {
    http: number;
    status: string;
    work: number;
    reason?: string;
    result?: unknown;
    body?: string;
    content_type?: string;
    keys?: string[];
  };
}

export const newRun = () => randomBytes(6).toString("hex");
const now = () => String(Math.floor(Date.now() / 1000));

export function stripeEvent(eventId: string, run: string): Buffer {
  return Buffer.from(JSON.stringify({ id: eventId, object: "event", type: "invoice.paid", data: { object: { id: `in_${run}` } } }));
}

export function stripeHeaders(body: Buffer, secret = "whsec_clients_suite"): Record<string, string> {
  const t = now();
  const v1 = createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
  return { "content-type": "application/json", "stripe-signature": `t=${t},v1=${v1}` };
}

function slackHeaders(body: Buffer): Record<string, string> {
  const t = now();
  const v0 = createHmac("sha256", "slack_clients_suite").update(`v0:${t}:`).update(body).digest("hex");
  return { "content-type": "application/json", "x-slack-request-timestamp": t, "x-slack-signature": `v0=${v0}` };
}

const fill = (s: string, run: string) => s.replaceAll("{run}", run);

/** [provider, headers, body] of a case. */
export function delivery(c: Case, run: string): [string, Record<string, string>, Buffer] {
  const body =
    c.body_bytes !== undefined ? Buffer.alloc(c.body_bytes, "x")
    : c.raw_body !== undefined ? Buffer.from(fill(c.raw_body, run))
    : stripeEvent(fill(c.event!, run), run);
  const headers =
    c.sign === "stripe" ? stripeHeaders(body)
    : c.sign === "forged" ? stripeHeaders(body, "whsec_someone_else")
    : c.sign === "slack" ? slackHeaders(body)
    : { "content-type": "application/json" };
  return [c.provider, headers, body];
}

export const expected = (c: Case, run: string): Case["expect"] => JSON.parse(fill(JSON.stringify(c.expect), run));

export async function orders(pattern: string, handler: string): Promise<number> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const r = await c.query("SELECT count(*)::int AS n FROM orders WHERE event_id LIKE $1 AND handler = $2", [`%${pattern}%`, handler]);
    return r.rows[0].n;
  } finally {
    await c.end();
  }
}

/** event_id → how many order rows `handler` wrote for it, for a run. */
export async function perEvent(run: string, handler: string): Promise<Map<string, number>> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const r = await c.query("SELECT event_id, count(*)::int AS n FROM orders WHERE event_id LIKE $1 AND handler = $2 GROUP BY 1", [`evt_${run}_%`, handler]);
    return new Map(r.rows.map((row) => [row.event_id, row.n]));
  } finally {
    await c.end();
  }
}

/** Restarts the server; the process goes on meanwhile, as a service's would. */
export async function restartServer(secondsDown = 0.3): Promise<void> {
  await promisify(execFile)(path.join(TESTING, "restart-server"), [String(secondsDown)]);
}

/** What goes wrong in the work, per event id: `restart` (before it writes) and `fail` (after). */
export class Trouble {
  fail = new Set<string>();
  restart = new Set<string>();
  async before(eventId: string | null) {
    if (eventId && this.restart.delete(eventId)) await restartServer();
  }
  after(eventId: string | null) {
    if (eventId && this.fail.has(eventId)) throw new Error(`${eventId} fails`);
  }
}

/** The application role's URL through PgBouncer in transaction mode (.ci/clients-test starts it). */
export const POOLER_URL = process.env.POOLER_URL!;

/** PgBouncer stopped at once (every client connection cut) and started again, as a redeploy of the pooler. */
export async function restartPooler(secondsDown = 0): Promise<void> {
  await promisify(execFile)(path.join(TESTING, "pooler"), ["restart", process.env.POOLER_DIR!, String(secondsDown)]);
}
