"""A handler through the Python package against the same handler calling
SQL by hand: deliveries a second, one after another on a pool of one,
the two taking turns and each going first in every other round, so that
neither a slow moment of the machine nor the place in a round favours one.
Prints one JSON line. ``python bench.py DELIVERIES ROUNDS``."""
import hashlib
import hmac
import json
import os
import statistics
import sys
import time
import uuid

from psycopg_pool import ConnectionPool

from pg_webhook_inbox.psycopg import Handler

INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', %s, %s, 'bench')"
RECEIVE = ("SELECT id, claimed, status, http_status, reason, response, response_type, event_id, event_type "
           "FROM webhook_receive(%s, %s::jsonb, %s::bytea, url => %s, complete_on_commit => true)")


def signed(n):
    out = []
    for _ in range(n):
        body = json.dumps({"id": f"evt_{uuid.uuid4().hex}", "object": "event", "type": "invoice.paid",
                           "data": {"object": {"id": "in_1"}}}, separators=(",", ":")).encode()
        t = str(int(time.time()))
        v1 = hmac.new(b"whsec_clients_suite", t.encode() + b"." + body, hashlib.sha256).hexdigest()
        out.append(({"content-type": "application/json", "stripe-signature": f"t={t},v1={v1}"}, body))
    return out


def by_hand(pool, headers, body):
    """What a careful handler writes without the package."""
    with pool.connection() as conn, conn.transaction():
        delivery, claimed, status, http_status, reason, response, response_type, event_id, event_type = conn.execute(
            RECEIVE, ("stripe", json.dumps(headers), body, None)).fetchone()
        if response is not None:
            return 200, response
        if not claimed:
            return http_status, json.dumps({"status": status, "reason": reason})
        try:
            with conn.transaction():
                conn.execute(INSERT, (event_id, event_type))
        except Exception as exc:  # noqa: BLE001
            conn.execute("SELECT webhook_fail(%s, %s)", (delivery, str(exc)))
            return 500, json.dumps({"status": "failed"})
    return http_status, json.dumps({"status": status, "reason": reason})


def main():
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    pool = ConnectionPool(os.environ["DATABASE_URL"], min_size=1, max_size=1, open=True)
    handler = Handler(pool)

    def work(conn, delivery):
        conn.execute(INSERT, (delivery.event_id, delivery.event_type))

    rates = {"package": [], "by_hand": []}
    for r in range(rounds):
        for name in ("package", "by_hand") if r % 2 == 0 else ("by_hand", "package"):
            batch = signed(n)
            started = time.perf_counter()
            for headers, body in batch:
                if name == "package":
                    assert handler("stripe", headers, body, work).status == 200
                else:
                    assert by_hand(pool, headers, body)[0] == 200
            rates[name].append(n / (time.perf_counter() - started))
    package, hand = statistics.median(rates["package"]), statistics.median(rates["by_hand"])
    print(json.dumps({"language": "python (psycopg Handler)", "package": round(package), "by_hand": round(hand),
                      "ratio": round(package / hand, 3)}))


if __name__ == "__main__":
    main()
