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

A slot that is down is skipped while the others go on. A connection that
breaks (the proxy or the application's database restarted, failed over)
is opened again, waiting longer each time up to half a minute, back to
half a second once connected, with jitter: the worker never polls a dead
connection.

TIER_SLOTS (8), TIER_CONSUMER ('default'), TIER_LEASE ('30 seconds') and
TIER_BATCH (10) say what to lease. TIER_EXIT_WHEN_IDLE=n exits after n
polls in a row found nothing (for drills). TIER_CRASH_AFTER_APPLY=n exits
at once after the n-th application commit, before completing its lease:
the crash this design is for, on demand.
"""
import os
import random
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


class Connections:
    """The tier's connection and the application's, each opened again
    after it breaks: waits double from 0.5 s to 30 s, drawn from the upper
    half of each step (jitter), back to the first once both work."""

    FIRST, LAST = 0.5, 30.0

    def __init__(self):
        self.tier = self.app = None
        self.step = self.FIRST

    def ready(self):
        """Both connections open, reconnecting what broke."""
        while True:
            try:
                if self.tier is None or self.tier.closed or self.tier.broken:
                    self.tier = psycopg.connect(os.environ["TIER_URL"], autocommit=True)
                if self.app is None or self.app.closed or self.app.broken:
                    self.app = psycopg.connect(os.environ["APP_URL"], autocommit=True)
                self.step = self.FIRST
                return self.tier, self.app
            except psycopg.OperationalError as exc:
                wait = random.uniform(self.step / 2, self.step)
                self.step = min(self.step * 2, self.LAST)
                print(f"tier_apply_worker: cannot connect ({exc}); again in {wait:.1f} s", file=sys.stderr)
                time.sleep(wait)

    def broken(self):
        return any(c is None or c.closed or c.broken for c in (self.tier, self.app))


def drain_slot(tier, app, slot, counts):
    """Lease one slot's batch, apply each event, complete its lease."""
    try:
        rows = tier.execute(
            "SELECT id, provider, event_id, event_type, payload"
            "  FROM webhook_next_on(%s, %s, %s, lease => %s::interval)",
            (slot, BATCH, CONSUMER, LEASE),
        ).fetchall()
    except psycopg.errors.DatabaseError:
        if tier.broken or tier.closed:
            raise
        # That slot is unreachable (PL/Proxy says so as an error): the
        # others go on; its leases expire and come back.
        return
    for lease, provider, event_id, event_type, payload in rows:
        counts["found"] += 1
        status = claim_and_apply(app, provider, event_id, event_type, payload)
        if status == "in_progress":
            # Another worker is applying it right now: its lease will be
            # completed by whoever finishes.
            continue
        if status in ("claimed", "retry"):
            counts["applied"] += 1
            if counts["applied"] == CRASH_AFTER_APPLY:
                os._exit(3)
        try:
            tier.execute("SELECT webhook_complete(%s)", (lease,))
        except psycopg.errors.DatabaseError:
            if tier.broken or tier.closed:
                raise
            # Lost (another worker leased it after this lease ran out) or
            # the slot went away: the event comes again and is a duplicate
            # in the application's database.


def main():
    connections = Connections()
    counts = {"applied": 0}
    idle = 0
    while True:
        counts["found"] = 0
        tier, app = connections.ready()
        try:
            for slot in range(SLOTS):
                drain_slot(tier, app, slot, counts)
        except psycopg.errors.DatabaseError as exc:
            if not connections.broken():
                raise
            # The proxy or the application's database went away: whatever
            # was in hand is leased again once its lease runs out, and is a
            # duplicate where it was applied.
            print(f"tier_apply_worker: connection lost ({exc}); reconnecting", file=sys.stderr)
            continue
        idle = 0 if counts["found"] else idle + 1
        if EXIT_WHEN_IDLE and idle >= EXIT_WHEN_IDLE:
            return 0
        if not counts["found"]:
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
