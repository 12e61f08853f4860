// The README's Next.js route handler, run as it is printed: compiled as
// Next.js would compile it, then called as Next.js calls a route handler.
// It verifies a signed Stripe delivery, writes its row once, answers the
// redelivery as a duplicate and refuses a forgery.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";
import { it } from "node:test";
import pg from "pg";
import ts from "typescript";
import { ADMIN_URL, newRun, stripeEvent, stripeHeaders } from "./support.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(path.resolve(here, "../../README.md"), "utf8");
const section = readme.split("## A Stripe handler in ten lines")[1].split("\n## ")[0];
const blocks = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);

it("the Next.js route handler of the README does a delivery once", async () => {
  const code = blocks.find((b) => b.includes("webhookRoute"));
  assert.ok(code, "no Next.js block");
  assert.ok(code.trim().split("\n").length <= 12, "the README promises about ten lines");
  // Inside this package, "pg-webhook-inbox" resolves to the package itself.
  const file = path.join(here, "readme-route.mjs");
  writeFileSync(file, ts.transpileModule(code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText);
  const { POST } = await import(pathToFileURL(file).href);
  const send = async (body: Buffer, secret?: string) => {
    const request = new Request("https://hooks.example.com/api/webhooks/stripe", {
      method: "POST",
      headers: stripeHeaders(body, secret),
      body: new Uint8Array(body),
    });
    const r: Response = await POST(request, { params: Promise.resolve({ provider: "stripe" }) });
    return [r.status, await r.json()] as const;
  };
  const run = newRun();
  const event = `evt_${run}_readme`;
  const body = stripeEvent(event, run);
  let [status, answer] = await send(body);
  assert.deepEqual([status, answer.status], [200, "claimed"]);
  [status, answer] = await send(body);
  assert.deepEqual([status, answer.status], [200, "duplicate"]);
  [status, answer] = await send(body, "whsec_someone_else");
  assert.deepEqual([status, answer.reason], [401, "bad_signature"]);
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const r = await admin.query("SELECT count(*)::int AS n FROM invoices_paid WHERE event_id = $1", [event]);
  await admin.end();
  assert.equal(r.rows[0].n, 1);
});
