"""An inbox worker in psycopg 3: leases a batch of events from webhook_next,
does the work, and completes the batch in one call.

Per event: one external side effect (an email through an HTTP API, with an
idempotency key derived from the event by webhook_outbound_key, so a retry
after a crash cannot send it twice) and one database write. The batch's
writes commit together with webhook_complete_batch (so each happens exactly
once). A failed event is recorded with webhook_fail in the same
transaction and retried after the backoff.

Workers poll, and LISTEN webhook_inbox to wake up as soon as something is
queued (LISTEN needs a direct or session-pooled connection; behind
PgBouncer in transaction mode, poll only).

On SIGTERM it finishes the event in hand, hands the rest of its batch back
at once (webhook_fail with retry_in => 0), and exits. When the database
goes away (a restart, a failover) it reconnects, waiting longer each time
up to half a minute, back to half a second once connected, each wait drawn
at random from its upper half so that workers one restart dropped do not
all come back at the same instant; what it held was rolled back with its
connection, and its leases run out and are taken again.

    DATABASE_URL=postgresql://app@localhost/shop python worker.py
"""
import json
import os
import random
import signal
import sys
import time
import urllib.request

import psycopg
import psycopg.errors

LANGUAGE = "python-worker"
CONSUMER = os.environ.get("WORKER_CONSUMER", "default")
EMAIL_URL = os.environ.get("EMAIL_URL", "http://127.0.0.1:8025/send")
BATCH = 10
# How long a batch's leases last: after a crash, its events wait this long
# before another worker takes them.
LEASE = os.environ.get("WORKER_LEASE", "1 minute")
POLL_SECONDS = 1.0

stopping = False


def stop(_signum, _frame):
    global stopping
    stopping = True


def send_email(key, event_id):
    req = urllib.request.Request(
        EMAIL_URL,
        data=json.dumps({"to": "customer@example.com", "event": event_id}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


def process(cur, lease, provider, event_id, event_type, payload, attempts):
    if payload.get("fail_first_attempt") and attempts == 1:
        raise RuntimeError("injected failure on the first attempt")
    # The same key on every attempt of this event, whichever lease runs it.
    cur.execute("SELECT webhook_outbound_key(%s, %s)", (lease, f"email/{CONSUMER}"))
    send_email(cur.fetchone()[0], event_id)
    cur.execute(
        "INSERT INTO orders (provider, event_id, event_type, language) VALUES (%s, %s, %s, %s)",
        (provider, event_id, event_type, LANGUAGE),
    )


def work_once(conn) -> int:
    """One batch. Returns how many events it leased.

    The lease commits on its own, so operators see the events as leased
    (webhook.inbox_stats, webhook.blocked_entities). The batch's work then
    commits in one transaction with one webhook_complete_batch, each event
    in a savepoint, so that a failing event undoes only its own work. A
    lease that ran out and was taken over refuses the batch (55006) and
    its work rolls back: the events are then done one transaction each, so
    the others still commit.
    """
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT id, provider, event_id, event_type, payload, attempts FROM webhook_next(%s, %s, lease => %s)",
            (BATCH, CONSUMER, LEASE),
        )
        leased = cur.fetchall()
    try:
        finish(conn, leased)
    except psycopg.errors.ObjectInUse:
        for event in leased:
            try:
                finish(conn, [event])
            except psycopg.errors.ObjectInUse:
                # 55006: this one was taken over; its work rolled back.
                continue
    return len(leased)


def finish(conn, events):
    """Work the events and finish their leases, in one transaction."""
    with conn.transaction(), conn.cursor() as cur:
        done = []
        for lease, provider, event_id, event_type, payload, attempts in events:
            if stopping:
                cur.execute("SELECT webhook_fail(%s, 'worker shut down', retry_in => '0 s')", (lease,))
                continue
            try:
                with conn.transaction():  # a savepoint: a failure undoes this event's work only
                    process(cur, lease, provider, event_id, event_type, payload, attempts)
                done.append(lease)
            except (psycopg.OperationalError, psycopg.errors.ObjectInUse):
                raise
            except Exception as exc:  # noqa: BLE001 - recorded, then retried after the backoff
                cur.execute("SELECT webhook_fail(%s, %s)", (lease, str(exc)))
        if done:
            cur.execute("SELECT webhook_complete_batch(%s)", (done,))


class Backoff:
    """How long to wait before reconnecting: doubling from 0.5 s to 30 s,
    each wait drawn from the upper half of its step (jitter), and back to
    the first step once a connection works."""

    FIRST, LAST = 0.5, 30.0

    def __init__(self):
        self.step = self.FIRST

    def connected(self):
        self.step = self.FIRST

    def next(self):
        wait = random.uniform(self.step / 2, self.step)
        self.step = min(self.step * 2, self.LAST)
        return wait


def run(url, backoff):
    """Work until stopped, on one pair of connections."""
    with psycopg.connect(url) as conn, psycopg.connect(url, autocommit=True) as listener:
        listener.execute("LISTEN webhook_inbox")
        backoff.connected()
        while not stopping:
            if work_once(conn) == 0:
                # Nothing ready: sleep until notified, or until the next poll.
                for _ in listener.notifies(timeout=POLL_SECONDS, stop_after=1):
                    pass


def main():
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    url = os.environ["DATABASE_URL"]
    backoff = Backoff()
    while not stopping:
        try:
            run(url, backoff)
        except psycopg.OperationalError as exc:
            # The connection is gone: nothing it held survives it.
            delay = backoff.next()
            print(f"worker: database unavailable ({exc}); reconnecting in {delay:.1f} s", file=sys.stderr)
            deadline = time.monotonic() + delay
            while not stopping and time.monotonic() < deadline:
                time.sleep(0.1)


if __name__ == "__main__":
    main()
