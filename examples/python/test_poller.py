"""Test of poller.py against a real PostgreSQL and a local stand-in of
Stripe's events API (no provider is reachable from tests): 25 events, 10
of them also delivered as webhooks. One pass queues the 15 missed ones;
webhook.missed_deliveries lists exactly those; a second pass queues
nothing; the stand-in saw the API key on every request and was paged
through.

Run by .ci/examples-test with PGHOST/PGPORT/PGUSER of its throwaway server.
"""
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

import psycopg

DB = "poller_example"
KEY = "sk_test_poller"
NOW = int(time.time())
EVENTS = [
    {"id": f"evt_poll_{i:02}", "object": "event", "type": "invoice.paid", "created": NOW - 60 * i,
     "data": {"object": {"id": f"in_{i}", "customer": "cus_1"}}}
    for i in range(25)
]  # newest first, as Stripe lists them
DELIVERED = {e["id"] for e in EVENTS[::5] + EVENTS[1::5]}
seen_requests = []


class StandIn(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        seen_requests.append((self.headers.get("Authorization"), query))
        if url.path != "/v1/events" or self.headers.get("Authorization") != "Bearer " + KEY:
            self.send_response(401)
            self.end_headers()
            return
        events = [e for e in EVENTS if e["created"] >= int(query["created[gte]"])]
        if "starting_after" in query:
            at = [e["id"] for e in events].index(query["starting_after"])
            events = events[at + 1:]
        limit = min(int(query.get("limit", 10)), 10)  # pages of 10, whatever is asked
        body = json.dumps({"object": "list", "data": events[:limit], "has_more": len(events) > limit}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with psycopg.connect(dbname="postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(dbname=DB, autocommit=True) as db:
        db.execute("CREATE EXTENSION pg_webhook_inbox")
        db.execute("SELECT webhook_register_provider('stripe', secret => 'whsec_poll', inbox => true)")
        db.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'poller_app') THEN "
                   "CREATE ROLE poller_app LOGIN; END IF; END $$")
        db.execute("SELECT webhook_grant_app('poller_app')")
        # The webhooks that did arrive (verified by the receiver).
        for e in EVENTS:
            if e["id"] in DELIVERED:
                db.execute("SELECT webhook_enqueue('stripe', %s, %s, %s::jsonb)",
                           (e["id"], e["type"], json.dumps(e)))

        env = dict(os.environ,
                   DATABASE_URL=f"host={os.environ['PGHOST']} port={os.environ['PGPORT']} user=poller_app dbname={DB}",
                   EVENTS_URL=f"http://127.0.0.1:{server.server_port}/v1/events",
                   STRIPE_API_KEY=KEY, LOOKBACK_SECONDS="86400")
        poller = [sys.executable, os.path.join(os.path.dirname(__file__), "poller.py"), "--once"]
        first = subprocess.run(poller, env=env, capture_output=True, text=True, check=True).stdout
        assert "15 missed event(s) queued, 10 already delivered" in first, first
        assert all(auth == "Bearer " + KEY for auth, _ in seen_requests), seen_requests
        assert len(seen_requests) == 3, f"25 events in pages of 10: {len(seen_requests)} requests"

        missed = {r[0] for r in db.execute(
            "SELECT event_id FROM webhook.missed_deliveries WHERE provider = 'stripe'").fetchall()}
        assert missed == {e["id"] for e in EVENTS} - DELIVERED, sorted(missed)
        queued = db.execute("SELECT count(*) FROM webhook.inbox WHERE provider = 'stripe'").fetchone()[0]
        assert queued == 25, queued

        second = subprocess.run(poller, env=env, capture_output=True, text=True, check=True).stdout
        assert "0 missed event(s) queued, 25 already delivered" in second, second
        queued = db.execute("SELECT count(*) FROM webhook.inbox WHERE provider = 'stripe'").fetchone()[0]
        assert queued == 25, queued
    server.shutdown()
    print("poller: 15 missed events queued once, 10 delivered ones left alone, listed in webhook.missed_deliveries")


if __name__ == "__main__":
    main()
