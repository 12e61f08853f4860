"""An inbox worker on the pg_webhook_inbox package's worker loop
(pg_webhook_inbox.worker.Worker, psycopg 3).

The loop leases a batch of events from webhook_next and completes the
batch with one webhook_complete_batch in the transaction of its work, so
each event's work commits exactly once; a failed event is recorded with
webhook_fail in the same transaction and retried after the backoff. It
polls, and LISTENs on a connection of its own to wake up as soon as
something is queued (behind PgBouncer in transaction mode, pass
listen=False and poll). On SIGTERM it finishes the event in hand, hands the
rest of its batch back at once, and exits. When the database goes away it
reconnects, waiting longer each time up to half a minute, each wait drawn
at random from its upper half.

Here, per event: one external side effect (an email through an HTTP API,
with an idempotency key derived from the event by webhook_outbound_key, so
a retry after a crash cannot send it twice) and one database write.

    DATABASE_URL=postgresql://app@localhost/shop python worker.py
"""
import json
import os
import sys
import urllib.request

from pg_webhook_inbox.worker import Worker, outbound_key

LANGUAGE = "python-worker"
CONSUMER = os.environ.get("WORKER_CONSUMER", "default")
EMAIL_URL = os.environ.get("EMAIL_URL", "http://127.0.0.1:8025/send")
# How long a batch's leases last: after a crash, its events wait this long
# before another worker takes them.
LEASE = os.environ.get("WORKER_LEASE", "1 minute")


def send_email(key, event_id):
    req = urllib.request.Request(
        EMAIL_URL,
        data=json.dumps({"to": "customer@example.com", "event": event_id}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


def process(conn, event):
    """One event, in the batch's transaction: its write commits with its
    completion; raising records a failure and undoes only this event."""
    if event.payload.get("fail_first_attempt") and event.attempts == 1:
        raise RuntimeError("injected failure on the first attempt")
    # The same key on every attempt of this event, whichever lease runs it.
    send_email(outbound_key(conn, event.id, f"email/{CONSUMER}"), event.event_id)
    conn.execute(
        "INSERT INTO orders (provider, event_id, event_type, language) VALUES (%s, %s, %s, %s)",
        (event.provider, event.event_id, event.event_type, LANGUAGE),
    )


def report(exc):
    print(f"worker: {exc}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    Worker(os.environ["DATABASE_URL"], process, consumer=CONSUMER, batch=10, lease=LEASE,
           on_error=report).handle_signals().run()
