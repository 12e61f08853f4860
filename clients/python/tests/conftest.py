"""The suite runs against a real PostgreSQL with the extension, set up by
clients/testing/setup.sql: DATABASE_URL (the application role, as a
handler connects), ADMIN_URL (the owner, for the assertions only) and,
for the restart tests, what .ci/pg-temp exports (PG_BINDIR, PG_DATA_DIR…)."""
import hashlib
import hmac
import json
import os
import pathlib
import subprocess
import time
import uuid

import psycopg
import pytest

TESTING = pathlib.Path(__file__).resolve().parents[2] / "testing"
CASES = json.loads((TESTING / "cases.json").read_text())["cases"]
STRIPE_SECRET = "whsec_clients_suite"
SLACK_SECRET = "slack_clients_suite"


@pytest.fixture(scope="session")
def database_url():
    return os.environ["DATABASE_URL"]


@pytest.fixture(scope="session")
def admin():
    """The owner's URL: each assertion connects afresh, as the restart tests
    cut every connection."""
    return os.environ["ADMIN_URL"]


def stripe_event(event_id: str, run: str, event_type: str = "invoice.paid") -> bytes:
    return json.dumps({"id": event_id, "object": "event", "type": event_type,
                       "data": {"object": {"id": f"in_{run}"}}}, separators=(",", ":")).encode()


def stripe_headers(body: bytes, secret: str = STRIPE_SECRET) -> dict:
    t = str(int(time.time()))
    v1 = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "Stripe-Signature": f"t={t},v1={v1}"}


def slack_headers(body: bytes) -> dict:
    t = str(int(time.time()))
    v0 = hmac.new(SLACK_SECRET.encode(), f"v0:{t}:".encode() + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-Slack-Request-Timestamp": t, "X-Slack-Signature": f"v0={v0}"}


def delivery(case: dict, run: str):
    """(provider, headers, body) of a case of cases.json."""
    fill = lambda s: s.replace("{run}", run)  # noqa: E731
    if "body_bytes" in case:
        body = b"x" * case["body_bytes"]
    elif "raw_body" in case:
        body = fill(case["raw_body"]).encode()
    else:
        body = stripe_event(fill(case["event"]), run)
    sign = case["sign"]
    if sign == "stripe":
        headers = stripe_headers(body)
    elif sign == "forged":
        headers = stripe_headers(body, "whsec_someone_else")
    elif sign == "slack":
        headers = slack_headers(body)
    else:
        headers = {"Content-Type": "application/json"}
    return case["provider"], headers, body


def expected(case: dict, run: str) -> dict:
    return json.loads(json.dumps(case["expect"]).replace("{run}", run))


def new_run() -> str:
    return uuid.uuid4().hex[:12]


def orders(admin: str, run: str, handler: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM orders WHERE event_id LIKE %s AND handler = %s",
                            (f"%{run}%", handler)).fetchone()[0]


def restart_server(seconds_down: float = 0):
    subprocess.run([str(TESTING / "restart-server"), str(seconds_down)], check=True)


@pytest.fixture(scope="session")
def pooler_url():
    """The application role's URL through PgBouncer in transaction mode
    (.ci/clients-test starts it in front of the server)."""
    return os.environ["POOLER_URL"]


def restart_pooler(seconds_down: float = 0.0) -> None:
    """PgBouncer stopped at once (every client connection cut) and started
    again, as a redeploy of the pooler looks to its clients."""
    subprocess.run([str(TESTING / "pooler"), "restart", os.environ["POOLER_DIR"], str(seconds_down)], check=True)
