"""Test of traced_worker.py against a real PostgreSQL, with OpenTelemetry's
in-memory exporter: a receiver's request span queues two events with its
traceparent, and one without. The first attempt of each traced event is a
child of the request's span (same trace, the request as parent); the
retry of the one whose handler failed is a new trace linked to the
request's span; the untraced event's span is a root with no link.

Run by .ci/examples-test with PGHOST/PGPORT/PGUSER of its throwaway server.
"""
import sys

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

import traced_worker  # noqa: E402  (after the provider: its tracer is the SDK's)

DB = "traced_worker_example"


def main():
    with psycopg.connect(dbname="postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(dbname=DB, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_webhook_inbox")
        conn.execute("SELECT webhook_register_provider('stripe', scheme => 'stripe', secret => 'whsec_traced')")

        # The receiver: its request span, whose context goes with the events.
        receiver = trace.get_tracer("receiver")
        with receiver.start_as_current_span("POST /webhooks/stripe", kind=SpanKind.SERVER) as request:
            carrier = {}
            traced_worker.PROPAGATOR.inject(carrier)
            for event_id in ("evt_traced_ok", "evt_traced_flaky"):
                conn.execute(
                    "SELECT webhook_enqueue('stripe', %s, 'invoice.paid', '{}'::jsonb, traceparent => %s)",
                    (event_id, carrier["traceparent"]),
                )
        conn.execute("SELECT webhook_enqueue('stripe', 'evt_untraced', 'invoice.paid', '{}'::jsonb)")
        request_context = request.get_span_context()

        failed_once = set()

        def handle(conn, event):
            if event["event_id"] == "evt_traced_flaky" and event["event_id"] not in failed_once:
                failed_once.add(event["event_id"])
                raise RuntimeError("ledger timed out")

        traced_worker.RETRY_IN = "0 seconds"
        conn.autocommit = False
        leased = 0
        for _ in range(10):
            leased += traced_worker.work_once(conn, "default", handle)
        conn.autocommit = True
        assert leased == 4, leased
        left = conn.execute("SELECT count(*) FROM webhook.inbox WHERE status <> 'processed'").fetchone()[0]
        assert left == 0, left

    spans = {}
    for span in exporter.get_finished_spans():
        if span.name.startswith("process"):
            key = (span.attributes["messaging.message.id"], span.attributes["webhook.attempt"])
            spans[key] = span
    assert set(spans) == {("evt_traced_ok", 1), ("evt_traced_flaky", 1), ("evt_traced_flaky", 2),
                          ("evt_untraced", 1)}, sorted(spans)

    for key in (("evt_traced_ok", 1), ("evt_traced_flaky", 1)):
        span = spans[key]
        assert span.context.trace_id == request_context.trace_id, key
        assert span.parent is not None and span.parent.span_id == request_context.span_id, key
        assert not span.links, key
    assert not spans[("evt_traced_flaky", 1)].status.is_ok, "the failed attempt says so"

    retry = spans[("evt_traced_flaky", 2)]
    assert retry.context.trace_id != request_context.trace_id, "a retry is a trace of its own"
    assert retry.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in retry.links] == \
        [(request_context.trace_id, request_context.span_id)], "linked to the request"

    untraced = spans[("evt_untraced", 1)]
    assert untraced.parent is None and not untraced.links
    print("traced worker: first attempts continue the request's trace, the retry links to it")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as err:
        print(f"traced worker: FAILED: {err}", file=sys.stderr)
        raise
