"""The worker's reconnect waits (pg_webhook_inbox.worker.Backoff): doubling
from half a second to half a minute, each drawn from the upper half of its step so that workers
one restart dropped do not come back in step, and back to the first step
once a connection works (without it, after a few restarts every worker
waited the full half minute, all at once).

Run by .ci/examples-test (no database needed).
"""
from pg_webhook_inbox.worker import Backoff


def main():
    backoff = Backoff()
    waits = [backoff.next() for _ in range(10)]
    steps = [min(0.5 * 2**n, 30.0) for n in range(10)]
    for wait, step in zip(waits, steps):
        assert step / 2 <= wait <= step, (wait, step)
    assert waits[-1] >= 15.0, waits
    # Connected again: the next outage starts from half a second.
    backoff.connected()
    assert backoff.next() <= 0.5
    # Jitter: a hundred workers dropped together do not all wait alike.
    spread = {round(Backoff().next(), 3) for _ in range(100)}
    assert len(spread) > 50, len(spread)
    print("backoff: 1 passed, 0 failed")


if __name__ == "__main__":
    main()
