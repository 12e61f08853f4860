// A worker in a process of its own, for the tests that kill it or stop it:
// `node worker-process.js MS_PER_EVENT LEASE`. It prints `working EVENT_ID`
// as each event's work starts (written, not committed), then takes
// MS_PER_EVENT over it.

import { Worker } from "../src/worker.js";

const [msPerEvent, lease] = process.argv.slice(2);
const INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, 'worker')";

await new Worker({
  connectionString: process.env.DATABASE_URL!,
  batch: 5,
  lease,
  work: async (db, event) => {
    await db.query(INSERT, [event.provider, event.eventId, event.eventType]);
    process.stdout.write(`working ${event.eventId}\n`);
    await new Promise((resolve) => setTimeout(resolve, Number(msPerEvent)));
  },
})
  .handleSignals()
  .run();
