"""A worker in a process of its own, for the tests that kill it or stop it:
``python worker_process.py SECONDS_PER_EVENT LEASE``. It prints
``working EVENT_ID`` as each event's work starts (the write is done, not
committed), then takes SECONDS_PER_EVENT over it."""
import os
import sys
import time

from pg_webhook_inbox.worker import Worker

INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES (%s, %s, %s, 'worker')"


def work(conn, event):
    conn.execute(INSERT, (event.provider, event.event_id, event.event_type))
    print(f"working {event.event_id}", flush=True)
    time.sleep(float(sys.argv[1]))


if __name__ == "__main__":
    Worker(os.environ["DATABASE_URL"], work, batch=5, lease=sys.argv[2]).handle_signals().run()
