// Every way the package takes a delivery, each as send(provider, headers,
// body) through the framework's own request handling, over real HTTP where
// the framework serves it, with the same work: one order row.

import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import express from "express";
import Fastify from "fastify";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import pg from "pg";
import postgres from "postgres";
import { drizzle as drizzleOrm } from "drizzle-orm/node-postgres";
import { Queryable, Transact, WebhookHandler, pgPool, postgresJs } from "../src/index.js";
import { drizzle } from "../src/drizzle.js";
import { prisma } from "../src/prisma.js";
import { PrismaPg } from "@prisma/adapter-pg";
import { PrismaClient } from "./prisma/generated/client.js";
import { webhookExpress, webhookFastify } from "../src/node-http.js";
import { webhookHono, webhookRoute } from "../src/web.js";
import { Delivery } from "../src/answers.js";
import { Trouble } from "./support.js";

export interface Sent {
  status: number;
  contentType: string;
  body: string;
  headers: Headers;
}

export interface Adapter {
  name: string;
  trouble: Trouble;
  send(provider: string, headers: Record<string, string>, body: Buffer): Promise<Sent>;
  /** Where it serves HTTP, for the adapters that do. */
  base?: string;
  close(): Promise<void>;
}

const INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, $3)";

function work(name: string, trouble: Trouble) {
  return async (db: Queryable, d: Delivery) => {
    await trouble.before(d.eventId);
    await db.query(INSERT, [d.eventId, d.eventType, name]);
    trouble.after(d.eventId);
    return { order: d.eventId };
  };
}

async function sent(r: Response): Promise<Sent> {
  return { status: r.status, contentType: (r.headers.get("content-type") ?? "").split(";")[0], body: await r.text(), headers: r.headers };
}

function newPool(url: string) {
  const pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: 1000 });
  pool.on("error", () => undefined); // an idle client cut by a restart
  return pool;
}

async function listening(server: Server): Promise<string> {
  await new Promise<void>((resolve) => (server.listening ? resolve() : server.once("listening", resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function post(base: string, provider: string, headers: Record<string, string>, body: Buffer) {
  return sent(await fetch(`${base}/webhooks/${provider}`, { method: "POST", headers, body: new Uint8Array(body) }));
}

/** A handler called as an application's own route would call it. */
function calling(handler: WebhookHandler, name: string, trouble: Trouble): Adapter["send"] {
  return async (provider, headers, body) => {
    const a = await handler.handle(provider, headers, body, work(name, trouble), `/webhooks/${provider}`);
    return { status: a.status, contentType: a.contentType, body: a.body, headers: new Headers(a.headers) };
  };
}

/** node-postgres Pool, the handler called as an application's own route would. */
export async function direct(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const pool = newPool(url);
  return {
    name: "pg",
    trouble,
    send: calling(new WebhookHandler(pgPool(pool), { retrySeconds }), "pg", trouble),
    close: () => pool.end(),
  };
}

/** Express 5 over HTTP, on a node-postgres Pool. */
export async function expressApp(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const pool = newPool(url);
  const app = express();
  app.post("/webhooks/:provider", webhookExpress(new WebhookHandler(pgPool(pool), { retrySeconds }), work("express", trouble)));
  app.use(express.json()); // the application's other routes parse JSON; the webhook route comes first
  const server = app.listen(0, "127.0.0.1");
  const base = await listening(server);
  return {
    name: "express",
    trouble,
    send: (p, h, b) => post(base, p, h, b),
    base,
    close: async () => {
      server.close();
      await pool.end();
    },
  };
}

/** Fastify over HTTP, on postgres.js. */
export async function fastifyApp(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const sql = postgres(url, { max: 4, connect_timeout: 1, onnotice: () => undefined });
  const app = Fastify();
  await app.register(webhookFastify(new WebhookHandler(postgresJs(sql), { retrySeconds }), work("fastify", trouble)));
  const base = await app.listen({ port: 0, host: "127.0.0.1" });
  return {
    name: "fastify",
    trouble,
    send: (p, h, b) => post(base, p, h, b),
    base,
    close: async () => {
      await app.close();
      await sql.end({ timeout: 1 });
    },
  };
}

/** Hono on @hono/node-server over HTTP, on Drizzle (node-postgres). */
export async function honoApp(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const pool = newPool(url);
  const transact: Transact = drizzle(drizzleOrm(pool));
  const app = new Hono();
  app.post("/webhooks/:provider", webhookHono(new WebhookHandler(transact, { retrySeconds }), work("hono", trouble)));
  const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }) as Server;
  const base = await listening(server);
  return {
    name: "hono",
    trouble,
    send: (p, h, b) => post(base, p, h, b),
    base,
    close: async () => {
      server.close();
      await pool.end();
    },
  };
}

/**
 * A Next.js App Router route handler (app/api/webhooks/[provider]/route.ts:
 * `export const POST = webhookRoute(handler, work)`), called as Next.js 15
 * and later call it: a fetch Request and a context whose params is a promise.
 */
export async function nextRoute(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const pool = newPool(url);
  const POST = webhookRoute(new WebhookHandler(pgPool(pool), { retrySeconds }), work("next", trouble));
  return {
    name: "next",
    trouble,
    send: async (provider, headers, body) =>
      sent(
        await POST(new Request(`http://localhost:3000/api/webhooks/${provider}`, { method: "POST", headers, body: new Uint8Array(body) }), {
          params: Promise.resolve({ provider }),
        }),
      ),
    close: () => pool.end(),
  };
}

/** Prisma 7 on @prisma/adapter-pg, its interactive transactions, the handler called as a route would. */
export async function prismaApp(url: string, retrySeconds = 8): Promise<Adapter> {
  const trouble = new Trouble();
  const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 4, connectionTimeoutMillis: 1000 }) });
  return {
    name: "prisma",
    trouble,
    send: calling(new WebhookHandler(prisma(client), { retrySeconds }), "prisma", trouble),
    close: () => client.$disconnect(),
  };
}

export const ALL = [direct, expressApp, fastifyApp, honoApp, nextRoute, prismaApp];
