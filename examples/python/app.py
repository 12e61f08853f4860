"""A webhook receiver in FastAPI + psycopg 3.

    POST /webhooks/{provider}      one transaction: claim, business write, complete
    POST /webhooks-2p/{provider}   two phases: claim, send an email, complete
    POST /inbox/{provider}         inbox: store and answer 200 at once; worker.py
                                   processes it later
    POST /orders                   the application's own API: honours the
                                   Idempotency-Key header (idempotency_begin),
                                   creates an order and charges a card at a
                                   payment API with an outbound key

The database verifies the signature, deduplicates and claims the delivery
(webhook_receive); the pg_webhook_inbox package (clients/python) runs the
transaction, the savepoint around the work, the record of a failure and
the outage rule, and picks the answer the provider should hear; the
handlers here only do their work. The answers: 200 done or duplicate,
409 in progress elsewhere, 401 bad signature, 400 unreadable, 404 no such
provider, 500 failed (recorded: the next delivery retries it). While the database is away (a restart, a failover) a request
keeps trying it for up to DB_RETRY_SECONDS (8: GitHub gives up on a delivery
after 10 s and never sends it again), then answers 503 with Retry-After, an
answer every provider retries; never 500 for a delivery that was not
stored. An endpoint check (Slack's url_verification, Zoom's, Twitch's,
Discord's PING) comes back with the exact body to answer it with.

PUBLIC_URL is the base URL the providers are configured with (behind a
proxy, not what this process sees): schemes that sign the URL (Twilio,
Square, HubSpot) verify against PUBLIC_URL + the request's path and query.
Without it their deliveries are refused (missing_url): the URL is never
built from the request's Host header, which whoever sends the request
chooses.

    DATABASE_URL=postgresql://app@localhost/shop uvicorn app:app --port 8001
"""
import json
import os
import threading
import urllib.request

from fastapi import FastAPI, Request, Response
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

from pg_webhook_inbox import Answer, flow
from pg_webhook_inbox.psycopg import Handler, receive, retrying
from pg_webhook_inbox.starlette import path_and_query, response

LANGUAGE = "python"
EMAIL_URL = os.environ.get("EMAIL_URL", "http://127.0.0.1:8025/send")
PAYMENTS_URL = os.environ.get("PAYMENTS_URL", "http://127.0.0.1:8026/charges")
# How long a request with an Idempotency-Key owns its key without recording
# a step; a retry after a crash waits this long, then resumes.
ORDER_LEASE = os.environ.get("IDEMPOTENCY_LEASE", "30 seconds")
# check: every connection is checked as it leaves the pool, so one broken
# by a database restart is replaced instead of failing the request. A
# webhook answered 500 is retried by most providers, but never by GitHub.
pool = ConnectionPool(
    os.environ["DATABASE_URL"], min_size=1, max_size=8, open=True, check=ConnectionPool.check_connection,
    timeout=1.0,
)
app = FastAPI()
# How long a request keeps trying a database that is away before answering
# 503: within the shortest provider timeout (GitHub's 10 s).
DB_RETRY_SECONDS = float(os.environ.get("DB_RETRY_SECONDS", "8"))
PUBLIC_URL = os.environ.get("PUBLIC_URL")

# The one-transaction pattern, the answers and the outage rule are the
# package's (pg_webhook_inbox.psycopg.Handler): each delivery in its own
# transaction, the work in a savepoint, completed by the commit. inbox=False:
# claimed here, even for a provider registered for the inbox (GitHub).
handler = Handler(pool, public_url=PUBLIC_URL, retry_seconds=DB_RETRY_SECONDS, inbox=False)


def public_url(request: Request) -> str | None:
    """The URL the provider called. None without PUBLIC_URL: the schemes
    that sign the URL then refuse the delivery."""
    return flow.public_url(PUBLIC_URL, path_and_query(request))


@app.get("/healthz")
def healthz():
    return {"ok": True}


@app.post("/webhooks/{provider}")
async def webhook(provider: str, request: Request) -> Response:
    body = await request.body()  # the raw bytes: signatures cover exactly these
    headers = dict(request.headers)

    def record_order(conn, delivery):
        """The business write, in the delivery's transaction: it commits
        with the event's completion, or not at all."""
        conn.execute(
            "INSERT INTO orders (provider, event_id, event_type, language) VALUES (%s, %s, %s, %s)",
            (provider, delivery.event_id, delivery.event_type, LANGUAGE),
        )
        if headers.get("x-test-fail") == "1":
            raise RuntimeError("injected failure halfway")
        return {"order": delivery.event_id}  # what a duplicate is answered with

    return response(await run_in_threadpool(handler, provider, headers, body, record_order,
                                            path=path_and_query(request)))


class Heartbeat:
    """Renews a two-phase claim's lease while slow work runs."""

    def __init__(self, delivery, every=5.0, lease="30 seconds"):
        self.delivery, self.every, self.lease = delivery, every, lease
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(self.every):
            with pool.connection() as conn:
                conn.execute("SELECT webhook_extend(%s, %s::interval)", (self.delivery, self.lease))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@app.post("/webhooks-2p/{provider}")
async def webhook_two_phase(provider: str, request: Request) -> Response:
    body = await request.body()
    headers, url = dict(request.headers), public_url(request)
    return response(await run_in_threadpool(
        retrying, lambda: handle_two_phase(provider, headers, body, url), DB_RETRY_SECONDS))


def handle_two_phase(provider: str, headers: dict, body: bytes, url: str | None) -> Answer:
    with pool.connection() as conn:
        conn.autocommit = True  # the claim commits on its own, with its lease
        delivery = receive(conn, provider, headers, body, url=url, inbox=False, lease="30 seconds")
        if not delivery.owns_event:
            return delivery.answer()
        try:
            with Heartbeat(delivery.id):
                # The side effect outside the database, keyed by the event so
                # that a retry after a crash cannot send it twice.
                (key,) = conn.execute("SELECT webhook_outbound_key(%s, 'email')", (delivery.id,)).fetchone()
                req = urllib.request.Request(
                    EMAIL_URL,
                    data=json.dumps({"to": "customer@example.com", "event": delivery.event_id}).encode(),
                    headers={"Idempotency-Key": key, "Content-Type": "application/json"},
                )
                urllib.request.urlopen(req, timeout=10).read()
            conn.execute("SELECT webhook_complete(%s)", (delivery.id,))
        except Exception as exc:  # noqa: BLE001
            conn.execute("SELECT webhook_fail(%s, %s)", (delivery.id, str(exc)))
            return Answer.failed()
    return delivery.answer()


@app.post("/inbox/{provider}")
async def webhook_inbox(provider: str, request: Request) -> Response:
    body = await request.body()
    headers, url = dict(request.headers), public_url(request)
    return response(await run_in_threadpool(
        retrying, lambda: handle_inbox(provider, headers, body, url), DB_RETRY_SECONDS))


def handle_inbox(provider: str, headers: dict, body: bytes, url: str | None) -> Answer:
    # Verified, archived and queued in one statement; the answer is sent
    # only after it commits (leaving the block commits), so a 200 always
    # means the delivery is stored.
    with pool.connection() as conn:
        delivery = receive(conn, provider, headers, body, url=url, inbox=True)
    return delivery.answer()


# The application's own API. A client that sends the same POST again with
# the same Idempotency-Key (after a timeout, a dropped connection, a crash
# of this process) gets the first answer back, and the order is made and
# the card charged once. Two steps, each recorded as it commits: a retry
# after a crash resumes after the last one.
BEGIN = """SELECT outcome, request_id, http_status, recovery_point, recovery, response_body
             FROM idempotency_begin(%s, %s, idempotency_fingerprint('POST', '/orders', %s::bytea),
                                    lease => %s::interval)"""


@app.post("/orders")
async def create_order(request: Request) -> Response:
    body = await request.body()
    key, customer = request.headers.get("idempotency-key"), request.headers.get("x-customer", "anonymous")
    crash_after = request.headers.get("x-test-crash-after")
    return response(await run_in_threadpool(
        retrying, lambda: handle_order(key, customer, body, crash_after), DB_RETRY_SECONDS))


def handle_order(key, customer: str, body: bytes, crash_after) -> Answer:
    if not key:
        return Answer.json(400, error="the Idempotency-Key header is required")
    try:
        order = json.loads(body)
        sku, amount = str(order["sku"]), int(order["amount"])
    except (ValueError, KeyError, TypeError):
        return Answer.json(400, error="the body must be {\"sku\": ..., \"amount\": ...}")
    with pool.connection() as conn:
        conn.autocommit = True  # each step commits on its own, with its recovery point
        # The scope keeps one customer's keys apart from another's.
        outcome, request_id, http_status, point, recovery, stored = conn.execute(
            BEGIN, (f"orders:{customer}", key, body, ORDER_LEASE)
        ).fetchone()
        if outcome == "in_progress":
            return Answer.json(409, error="a request with this Idempotency-Key is in progress; retry later")
        if outcome == "mismatch":
            return Answer.json(422, error="this Idempotency-Key was used with a different request")
        if outcome == "replay":
            return Answer(http_status, stored, headers={"Idempotent-Replayed": "true"})
        recovery = recovery or {}
        try:
            if point is None:
                with conn.transaction():
                    (order_id,) = conn.execute(
                        "INSERT INTO api_orders (idempotency_key, sku, amount, language) "
                        "VALUES (%s, %s, %s, %s) RETURNING id",
                        (key, sku, amount, LANGUAGE),
                    ).fetchone()
                    conn.execute(
                        "SELECT idempotency_checkpoint(%s, 'created_order', jsonb_build_object('order_id', %s::bigint))",
                        (request_id, order_id),
                    )
                recovery["created_order"] = {"order_id": order_id}
            if crash_after == "order":
                return Answer.json(503, error="stopped after the order, as if the process had died")
            order_id = recovery["created_order"]["order_id"]
            # Charge with a key made from the order: a retry that resumes
            # here (the charge went through but was not recorded) gets the
            # same charge back from the payment API instead of a second one.
            (charge_key,) = conn.execute(
                "SELECT webhook_outbound_key('orders-api', %s, 'charge')", (str(order_id),)
            ).fetchone()
            req = urllib.request.Request(
                PAYMENTS_URL,
                data=json.dumps({"amount": amount, "order": order_id}).encode(),
                headers={"Idempotency-Key": charge_key, "Content-Type": "application/json"},
            )
            charge = json.loads(urllib.request.urlopen(req, timeout=10).read())["id"]
            if crash_after == "charge":
                return Answer.json(503, error="stopped after the charge, as if the process had died")
            result = json.dumps({"order": order_id, "charge": charge})
            with conn.transaction():
                conn.execute(
                    "SELECT idempotency_checkpoint(%s, 'charged_card', jsonb_build_object('charge', %s::text))",
                    (request_id, charge),
                )
                conn.execute("SELECT idempotency_finish(%s, 201, %s)", (request_id, result))
            return Answer(201, result)
        except Exception as exc:  # noqa: BLE001 - the key is freed; the client's retry resumes
            conn.execute("SELECT idempotency_fail(%s, %s)", (request_id, str(exc)))
            return Answer.json(500, error="failed; retry with the same Idempotency-Key")
