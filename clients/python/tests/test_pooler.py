"""Through PgBouncer in transaction mode (four server connections shared
by every client), as on Supabase's or Neon's pooled connection string:
providers delivering to the Handler, claimed and queued, workers draining
the inbox, the pooler restarted twice under them. Each delivery answered
2xx is done exactly once; nothing fails on a statement the pooler moved;
the workers are still running at the end. And a worker keeps running
through any error, not only an outage."""
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from conftest import new_run, restart_pooler, stripe_event, stripe_headers
from pg_webhook_inbox import errors as package_errors
from pg_webhook_inbox.psycopg import Handler
from pg_webhook_inbox.worker import Backoff, Worker

INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES (%s, %s, %s, %s)"
SENDERS, EACH = 6, 30


def record(handler_name, provider=None):
    def work(conn, item):
        # The pool's own settings are left as psycopg's defaults (statements
        # prepared after five runs): the package's statements never are, and
        # the work's are not here.
        conn.execute(INSERT, (provider or item.provider, item.event_id, item.event_type, handler_name),
                     prepare=False)
    return work


def done_once(admin, run):
    with psycopg.connect(admin, autocommit=True) as conn:
        return dict(conn.execute("SELECT event_id, count(*) FROM orders WHERE event_id LIKE %s GROUP BY 1",
                                 (f"evt_{run}_%",)).fetchall())


def test_handler_and_workers_through_a_transaction_pooler(pooler_url, admin):
    run = new_run()
    pool = ConnectionPool(pooler_url, min_size=6, max_size=6, check=ConnectionPool.check_connection)
    handler = Handler(pool)
    # A batch a restart took the connection of is leased until its lease
    # runs out: a short one, so that the test does not wait a minute.
    workers = [Worker(pooler_url, record("pooled_worker"), listen=False, poll_seconds=0.1, batch=5,
                      lease="5 seconds")
               for _ in range(2)]
    for w in workers:
        w.backoff = Backoff(first=0.1, last=0.5)
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    answers, acknowledged, lock = {}, [], threading.Lock()
    progress = [0]

    def provider(s):
        for i in range(EACH):
            event_id = f"evt_{run}_{s}_{i}"
            name = "stripe" if i % 2 else "stripe_inbox"
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, f"{event_id} never acknowledged"
                body = stripe_event(event_id, run)
                answer = handler(name, stripe_headers(body), body, record("pooled", name))
                with lock:
                    answers[answer.status] = answers.get(answer.status, 0) + 1
                if 200 <= answer.status < 300:
                    break
                time.sleep(0.05)
            with lock:
                acknowledged.append(event_id)
                progress[0] += 1

    senders = [threading.Thread(target=provider, args=(s,)) for s in range(SENDERS)]
    try:
        for t in senders:
            t.start()

        def after(n):
            deadline = time.monotonic() + 60
            while progress[0] < n:
                assert time.monotonic() < deadline, f"{progress[0]} deliveries acknowledged"
                time.sleep(0.02)

        after(40)
        restart_pooler(0)
        after(100)
        restart_pooler(0.3)
        for t in senders:
            t.join(120)
        deadline = time.monotonic() + 60
        while len(done_once(admin, run)) < SENDERS * EACH and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [t.is_alive() for t in threads]
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(10)
        pool.close()
    done = done_once(admin, run)
    print(f"through the pooler: answers {answers}; worker errors "
          f"{[type(w.last_error).__name__ for w in workers if w.last_error]}")
    assert sorted(acknowledged) == sorted(done), "every acknowledged delivery done, nothing else"
    assert all(n == 1 for n in done.values()), {k: n for k, n in done.items() if n != 1}
    assert len(done) == SENDERS * EACH
    assert all(alive), "the workers still running"
    assert set(answers) <= {200, 503}, answers
    for w in workers:
        assert w.last_error is None or package_errors.connection_lost(w.last_error), w.last_error


def test_a_worker_runs_through_any_error_until_stopped(database_url, admin, caplog):
    """webhook_next refused (EXECUTE revoked, as a botched migration would
    leave it) and an on_error that raises: logged, counted, waited out,
    and the worker picks up where it was once the grant is back."""
    run = new_run()

    def execute_on_next(grant):
        with psycopg.connect(admin, autocommit=True) as conn:
            for (signature,) in conn.execute("SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'webhook_next'"):
                verb = "GRANT EXECUTE ON FUNCTION {} TO clients_app" if grant else \
                    "REVOKE EXECUTE ON FUNCTION {} FROM clients_app"
                conn.execute(verb.format(signature))

    seen = []

    def on_error(exc):
        seen.append(exc)
        raise RuntimeError("the application's own callback failed too")

    worker = Worker(database_url, record("worker"), listen=False, poll_seconds=0.05, on_error=on_error)
    worker.backoff = Backoff(first=0.05, last=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    execute_on_next(False)
    try:
        thread.start()
        deadline = time.monotonic() + 20
        while worker.consecutive_errors < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.consecutive_errors >= 3, worker.last_error
        assert thread.is_alive()
        assert isinstance(worker.last_error, psycopg.errors.InsufficientPrivilege), worker.last_error
    finally:
        execute_on_next(True)
    try:
        from test_worker import queue, wait_for
        queue(database_url, run, 3)
        wait_for(admin, run, 3)
        assert worker.consecutive_errors == 0
        assert worker.errors >= 3 and len(seen) >= 3
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert "an iteration failed" in caplog.text and "InsufficientPrivilege" in caplog.text
