"""Reconcile missed webhooks by polling the provider's events API.

Stripe keeps 30 days of events behind GET /v1/events; a webhook that never
arrived (the endpoint was down past Stripe's retries, a firewall dropped
it) is still there. This poller lists the events created since a lookback
window, page by page, and feeds each to webhook_enqueue_polled: the same
dedup key as the deliveries (provider, event id), so an event that was
also delivered is queued once and processed once by the inbox workers
(worker.py), whichever came first. webhook.missed_deliveries then lists the
events only the poller saw.

Each pass looks back LOOKBACK_SECONDS (a day by default) from the newest
event it has seen, so that an event created late in a page boundary is not
skipped; what it sees twice is a duplicate and costs nothing.

    DATABASE_URL=postgresql://app@localhost/shop STRIPE_API_KEY=sk_... \\
        python poller.py            # every POLL_SECONDS
    python poller.py --once         # one pass, then exit (cron)
"""
import json
import os
import sys
import time
import urllib.parse
import urllib.request

import psycopg

PROVIDER = os.environ.get("POLL_PROVIDER", "stripe")
EVENTS_URL = os.environ.get("EVENTS_URL", "https://api.stripe.com/v1/events")
API_KEY = os.environ.get("STRIPE_API_KEY", "")
LOOKBACK_SECONDS = int(os.environ.get("LOOKBACK_SECONDS", str(24 * 3600)))
POLL_SECONDS = float(os.environ.get("POLL_SECONDS", "300"))
PAGE = 100


def list_events(created_gte):
    """Every event created at or after created_gte, newest first, following
    Stripe's cursor (starting_after) page by page."""
    starting_after = None
    while True:
        query = {"limit": PAGE, "created[gte]": created_gte}
        if starting_after:
            query["starting_after"] = starting_after
        req = urllib.request.Request(
            EVENTS_URL + "?" + urllib.parse.urlencode(query),
            headers={"Authorization": "Bearer " + API_KEY},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            page = json.load(resp)
        yield from page["data"]
        if not page.get("has_more") or not page["data"]:
            return
        starting_after = page["data"][-1]["id"]


def poll_once(conn, since):
    """One pass: feed every event created since `since` in. Returns
    (queued, duplicates, newest created seen)."""
    queued = duplicates = 0
    newest = since
    for event in list_events(since):
        with conn.transaction():
            status = conn.execute(
                "SELECT status FROM webhook_enqueue_polled(%s, %s, %s, %s::jsonb)",
                (PROVIDER, event["id"], event["type"], json.dumps(event)),
            ).fetchone()[0]
        if status == "queued":
            queued += 1
        else:
            duplicates += 1
        newest = max(newest, int(event["created"]))
    return queued, duplicates, newest


def main():
    once = "--once" in sys.argv[1:]
    since = int(time.time()) - LOOKBACK_SECONDS
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        while True:
            queued, duplicates, newest = poll_once(conn, since)
            print(f"poller: {queued} missed event(s) queued, {duplicates} already delivered", flush=True)
            if once:
                return
            since = max(since, newest - LOOKBACK_SECONDS)
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    main()
