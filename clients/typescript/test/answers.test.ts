// The table of answers (clients/testing/cases.json), through every
// adapter, and what surrounds it: a live attempt elsewhere, a database
// restarted in the middle of the work, one that stays away, a provider
// nobody registered.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pg from "pg";
import { ALL, Adapter } from "./adapters.js";
import { AWAY, CASES, DATABASE_URL, delivery, expected, newRun, orders, stripeEvent, stripeHeaders } from "./support.js";
import { pgClient, receive } from "../src/index.js";

async function using(make: (url: string, retry?: number) => Promise<Adapter>, f: (a: Adapter) => Promise<void>, url = DATABASE_URL, retry?: number) {
  const a = await make(url, retry);
  try {
    await f(a);
  } finally {
    await a.close();
  }
}

for (const make of ALL) {
  describe(make.name, () => {
    it("gives every answer of the table", () =>
      using(make, async (a) => {
        const run = newRun();
        for (const c of CASES) {
          if (c.fail) a.trouble.fail.add(c.event!.replaceAll("{run}", run));
          const before = await orders(run, a.name);
          const r = await a.send(...delivery(c, run));
          a.trouble.fail.clear();
          const want = expected(c, run);
          assert.equal(r.status, want.http, `${c.name}: ${r.body}`);
          assert.equal((await orders(run, a.name)) - before, want.work, c.name);
          if (want.body !== undefined) {
            assert.equal(r.body, want.body, c.name);
            assert.equal(r.contentType, want.content_type, c.name);
            continue;
          }
          const answer = JSON.parse(r.body);
          assert.equal(answer.status, want.status, `${c.name}: ${r.body}`);
          if (want.keys !== undefined) assert.deepEqual(Object.keys(answer).sort(), [...want.keys].sort(), `${c.name}: ${r.body}`);
          if (want.reason !== undefined) assert.equal(answer.reason, want.reason, c.name);
          if (want.result !== undefined) assert.deepEqual(answer.result, want.result, c.name);
        }
      }));

    it("answers 413 to a streamed body that goes past the bound, without reading it whole", () =>
      using(make, async (a) => {
        if (a.base === undefined) return; // called in-process: no stream to send
        // No Content-Length: chunks of 64 KiB, 10 MiB and one more.
        const chunk = new Uint8Array(64 * 1024).fill(120);
        let sentChunks = 0;
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (sentChunks++ > 160) controller.close();
            else controller.enqueue(chunk);
          },
        });
        const r = await fetch(`${a.base}/webhooks/stripe`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          duplex: "half",
        } as RequestInit);
        assert.equal(r.status, 413, a.name);
        assert.deepEqual(await r.json(), { status: "too_large" }, a.name);
      }));

    it("answers 409 while an attempt elsewhere is live, and claims once it ends", () =>
      using(make, async (a) => {
        const run = newRun();
        const body = stripeEvent(`evt_${run}_live`, run);
        const holder = new pg.Client({ connectionString: DATABASE_URL });
        await holder.connect();
        try {
          await holder.query("BEGIN");
          const held = await receive(pgClient(holder), "stripe", stripeHeaders(body), body, { completeOnCommit: true });
          assert.equal(held.claimed, true);
          const r = await a.send("stripe", stripeHeaders(body), body);
          assert.deepEqual([r.status, JSON.parse(r.body).status], [409, "in_progress"]);
          await holder.query("ROLLBACK"); // the live attempt dies: its claim goes with it
        } finally {
          await holder.end();
        }
        const r = await a.send("stripe", stripeHeaders(body), body);
        assert.deepEqual([r.status, JSON.parse(r.body).status], [200, "claimed"]);
        assert.equal(await orders(run, a.name), 1);
      }));

    it("does the work once through a restart in the middle of it", () =>
      using(make, async (a) => {
        await a.send(...delivery(CASES[0], newRun())); // a pooled connection, as in a running service
        const run = newRun();
        const id = `evt_${run}_restart`;
        const body = stripeEvent(id, run);
        a.trouble.restart.add(id);
        let r = await a.send("stripe", stripeHeaders(body), body);
        assert.equal(a.trouble.restart.size, 0, "the restart did not happen inside the work");
        assert.deepEqual([r.status, JSON.parse(r.body).status], [200, "claimed"], r.body);
        assert.equal(await orders(run, a.name), 1);
        r = await a.send("stripe", stripeHeaders(body), body);
        assert.deepEqual([r.status, JSON.parse(r.body).status], [200, "duplicate"], r.body);
        assert.equal(await orders(run, a.name), 1);
      }));

    it("answers 503 with Retry-After when the database stays away", () =>
      using(
        make,
        async (a) => {
          const started = Date.now();
          const body = stripeEvent("evt_away", "away");
          const r = await a.send("stripe", stripeHeaders(body), body);
          assert.deepEqual([r.status, JSON.parse(r.body)], [503, { status: "unavailable" }]);
          assert.equal(r.headers.get("retry-after"), "30");
          assert.ok(Date.now() - started < 6000);
        },
        AWAY,
        1,
      ));

    it("answers 404 for a provider nobody registered", () =>
      using(make, async (a) => {
        const body = stripeEvent("evt_nobody", "nobody");
        const r = await a.send("nobody", stripeHeaders(body), body);
        assert.deepEqual([r.status, JSON.parse(r.body).status], [404, "unknown_provider"]);
      }));
  });
}
