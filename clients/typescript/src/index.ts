// pg-webhook-inbox for TypeScript and Node: verified, exactly-once webhook
// handling on the pg_webhook_inbox PostgreSQL extension, in the caller's
// transaction. Framework adapters: ./web (Next.js, Hono, fetch), ./node-http
// (Express, Fastify), ./drizzle, ./prisma; the inbox's worker: ./worker.

export * from "./answers.js";
export * from "./db.js";
export * from "./flow.js";
export { PayloadTooLarge, UnknownProvider, isOutage } from "./outage.js";
