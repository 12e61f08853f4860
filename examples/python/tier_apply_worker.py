"""Exactly-once apply behind an intake tier (docs/scale-out.md).

The tier's slot databases receive, verify, deduplicate and queue webhooks;
the business writes live in the application's own database, which has
pg_webhook_inbox too. For each event this worker:

  1. leases it from the tier (webhook_next_on, through the proxy, one slot
     after another, so a slot that is down does not stop the others);
  2. in the application's database, claims it with complete_on_commit in
     the same transaction as the business write, and commits;
  3. only then completes the tier lease.

A crash between 2 and 3 leaves a lease that expires; the event is leased
again, the application's claim answers `duplicate`, and the worker just
completes the lease. Exactly once, without two-phase commit.

    TIER_URL=postgresql://app@proxy/tier APP_URL=postgresql://app@db/shop \
        python tier_apply_worker.py

TIER_SLOTS (8), TIER_CONSUMER ('default'), TIER_LEASE ('30 seconds') and
TIER_BATCH (10) say what to lease. TIER_EXIT_WHEN_IDLE=n exits after n
polls in a row found nothing (for drills). TIER_CRASH_AFTER_APPLY=n exits
at once after the n-th application commit, before completing its lease:
the crash this design is for, on demand.
"""
import os
import sys
import time

import psycopg
import psycopg.errors
from psycopg.types.json import Jsonb

SLOTS = int(os.environ.get("TIER_SLOTS", "8"))
CONSUMER = os.environ.get("TIER_CONSUMER", "default")
LEASE = os.environ.get("TIER_LEASE", "30 seconds")
BATCH = int(os.environ.get("TIER_BATCH", "10"))
EXIT_WHEN_IDLE = int(os.environ.get("TIER_EXIT_WHEN_IDLE", "0"))
CRASH_AFTER_APPLY = int(os.environ.get("TIER_CRASH_AFTER_APPLY", "0"))
POLL_SECONDS = 0.2


def apply(cur, provider, event_id, event_type, payload):
    """The business write: a ledger row, and the entity's latest state."""
    obj = (payload.get("data") or {}).get("object") or {}
    cur.execute(
        "INSERT INTO ledger (provider, event_id, event_type, entity) VALUES (%s, %s, %s, %s)",
        (provider, event_id, event_type, obj.get("id")),
    )
    if obj.get("id") is not None and payload.get("created") is not None:
        cur.execute(
            """INSERT INTO entity_state (entity, version, event_id) VALUES (%s, %s, %s)
               ON CONFLICT (entity) DO UPDATE SET version = excluded.version, event_id = excluded.event_id""",
            (obj["id"], payload["created"], event_id),
        )


def claim_and_apply(app, provider, event_id, event_type, payload):
    """Step 2: the claim and the business write commit together."""
    with app.transaction():
        with app.cursor() as cur:
            cur.execute(
                "SELECT status FROM webhook_claim(%s, %s, %s, %s, NULL, complete_on_commit => true)",
                (provider, event_id, event_type, Jsonb(payload)),
            )
            status = cur.fetchone()[0]
            if status in ("claimed", "retry"):
                apply(cur, provider, event_id, event_type, payload)
    return status


def main():
    tier = psycopg.connect(os.environ["TIER_URL"], autocommit=True)
    app = psycopg.connect(os.environ["APP_URL"], autocommit=True)
    applied = idle = 0
    while True:
        found = 0
        for slot in range(SLOTS):
            try:
                rows = tier.execute(
                    "SELECT id, provider, event_id, event_type, payload"
                    "  FROM webhook_next_on(%s, %s, %s, lease => %s::interval)",
                    (slot, BATCH, CONSUMER, LEASE),
                ).fetchall()
            except psycopg.errors.DatabaseError:
                # That slot is unreachable (PL/Proxy says so as an error):
                # the others go on; its leases expire and come back.
                continue
            for lease, provider, event_id, event_type, payload in rows:
                found += 1
                status = claim_and_apply(app, provider, event_id, event_type, payload)
                if status == "in_progress":
                    # Another worker is applying it right now: its lease
                    # will be completed by whoever finishes.
                    continue
                if status in ("claimed", "retry"):
                    applied += 1
                    if applied == CRASH_AFTER_APPLY:
                        os._exit(3)
                try:
                    tier.execute("SELECT webhook_complete(%s)", (lease,))
                except psycopg.errors.DatabaseError:
                    # Lost (another worker leased it after this lease ran
                    # out) or the slot went away: the event comes again
                    # and is a duplicate in the application's database.
                    pass
        idle = 0 if found else idle + 1
        if EXIT_WHEN_IDLE and idle >= EXIT_WHEN_IDLE:
            return 0
        if not found:
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
