"""The worker loop against the real inbox: a pool of workers, a failing
event among others, a worker killed holding a batch, one stopped by
SIGTERM, and the database restarted under them. Every test asserts that
each event's work committed exactly once."""
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import psycopg

from conftest import new_run, orders, restart_server, stripe_event, stripe_headers
from pg_webhook_inbox import Status
from pg_webhook_inbox.psycopg import receive
from pg_webhook_inbox.worker import Backoff, Worker

HERE = pathlib.Path(__file__).resolve().parent
INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES (%s, %s, %s, 'worker')"


def queue(database_url, run, n):
    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(n):
            body = stripe_event(f"evt_{run}_{i}", run)
            assert receive(conn, "stripe_inbox", stripe_headers(body), body).status is Status.QUEUED


def once_each(admin, run, n):
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute("SELECT event_id, count(*) FROM orders WHERE handler = 'worker' AND event_id LIKE %s "
                            "GROUP BY event_id", (f"evt_{run}_%",)).fetchall()
    assert all(count == 1 for _, count in rows), [r for r in rows if r[1] != 1]
    return len(rows)


def wait_for(admin, run, n, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if orders(admin, run, "worker") >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{orders(admin, run, 'worker')} of {n} events done after {seconds} s")


def plain_work(conn, event):
    conn.execute(INSERT, (event.provider, event.event_id, event.event_type))


class Pool:
    """Worker threads, as a service runs them."""

    def __init__(self, url, n, work=plain_work, **kw):
        self.workers = [Worker(url, work, **kw) for _ in range(n)]
        self.threads = [threading.Thread(target=w.run, daemon=True) for w in self.workers]
        for t in self.threads:
            t.start()

    def stop(self):
        for w in self.workers:
            w.stop()
        for t in self.threads:
            t.join(10)
            assert not t.is_alive()


def test_a_pool_of_workers_does_every_event_once(database_url, admin):
    run = new_run()
    queue(database_url, run, 60)
    pool = Pool(database_url, 3, batch=7)
    try:
        wait_for(admin, run, 60)
    finally:
        pool.stop()
    assert once_each(admin, run, 60) == 60


def test_a_failing_event_undoes_its_own_work_only(database_url, admin):
    run = new_run()
    queue(database_url, run, 10)
    errors = []

    def work(conn, event):
        plain_work(conn, event)
        if event.event_id == f"evt_{run}_3":
            raise RuntimeError("the payment service said no")

    pool = Pool(database_url, 1, work, batch=10, on_error=errors.append)
    try:
        wait_for(admin, run, 9)
        time.sleep(0.3)
    finally:
        pool.stop()
    assert once_each(admin, run, 9) == 9
    assert orders(admin, run + "_3", "worker") == 0
    assert [str(e) for e in errors] == ["the payment service said no"]
    with psycopg.connect(admin, autocommit=True) as conn:
        attempts, error = conn.execute(
            "SELECT i.attempts, i.last_error FROM webhook.inbox i JOIN webhook.deliveries a ON a.id = i.delivery_id "
            "WHERE a.event_id = %s", (f"evt_{run}_3",)).fetchone()
    assert (attempts, error) == (1, "the payment service said no")


def test_a_worker_killed_holding_a_batch_loses_nothing(database_url, admin):
    """SIGKILL while the batch's work is written but not committed: that
    work is gone with the connection, the leases run out (2 s), and another
    worker does those events; each exactly once."""
    run = new_run()
    queue(database_url, run, 12)
    victim = subprocess.Popen([sys.executable, str(HERE / "worker_process.py"), "30", "2 seconds"],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        line = victim.stdout.readline()
        assert line.startswith("working "), line
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    pool = Pool(database_url, 2, batch=5, lease="30 seconds")
    try:
        wait_for(admin, run, 12)
    finally:
        pool.stop()
    assert once_each(admin, run, 12) == 12


def test_sigterm_finishes_the_event_in_hand_and_hands_the_rest_back(database_url, admin):
    run = new_run()
    queue(database_url, run, 5)
    worker = subprocess.Popen([sys.executable, str(HERE / "worker_process.py"), "0.5", "10 minutes"],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    line = worker.stdout.readline()
    assert line.startswith("working "), line
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    # The event in hand (the one it named: perhaps one another test left in
    # the inbox, as the oldest ready events are leased first) committed;
    # the rest were handed back at once, not after their ten-minute leases.
    in_hand = line.split()[1]
    assert orders(admin, in_hand, "worker") == 1, f"the event in hand ({in_hand}) committed"
    pool = Pool(database_url, 1, batch=5)
    try:
        wait_for(admin, run, 5, seconds=10)
    finally:
        pool.stop()
    assert once_each(admin, run, 5) == 5


def test_a_restart_under_the_workers_loses_nothing_and_repeats_nothing(database_url, admin):
    run = new_run()
    queue(database_url, run, 80)
    slowly = lambda conn, event: (plain_work(conn, event), time.sleep(0.02))  # noqa: E731
    pool = Pool(database_url, 3, slowly, batch=5, lease="3 seconds")
    for w in pool.workers:
        w.backoff = Backoff(first=0.1, last=0.5)
    try:
        deadline = time.monotonic() + 20
        while orders(admin, run, "worker") < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        restart_server(0.5)
        wait_for(admin, run, 80, seconds=40)
    finally:
        pool.stop()
    assert once_each(admin, run, 80) == 80


def test_backoff_doubles_with_jitter_and_starts_over_once_connected():
    b = Backoff()
    waits = [b.next() for _ in range(8)]
    steps = [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert all(s / 2 <= w <= s for w, s in zip(waits, steps)), waits
    b.connected()
    assert 0.25 <= b.next() <= 0.5
