"""An inbox worker that continues each event's trace with OpenTelemetry.

The receiver passes its own request span's W3C trace context to
webhook_receive or webhook_enqueue (`traceparent => ...`), and
webhook_next hands it back with the event. The worker's span then follows
one rule:

* the first attempt of an event is a child of the request's span: one
  trace runs from the HTTP request to the work it caused;
* a retry (attempts > 1), and a replay (replay_id set), starts a trace of
  its own with a link to the request's span: work done minutes or days
  later does not stretch the request's trace, and still leads back to it.

Never pass the sender's own `traceparent` header through: it is not
signed, and whoever can reach the endpoint could pick the trace.

Each event runs in a savepoint: a handler that raises rolls back its own
writes, and the event is failed (retried with backoff) in the same
transaction that completes the others.

    DATABASE_URL=postgresql:///app python traced_worker.py [consumer]
"""
import os
import sys

import psycopg
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

PROPAGATOR = TraceContextTextMapPropagator()
tracer = trace.get_tracer("pg_webhook_inbox.examples.traced_worker")

# How soon a failed event is tried again; None: the extension's backoff.
RETRY_IN = None


def request_span_context(traceparent):
    """The request's span, as a SpanContext, or None without one."""
    if not traceparent:
        return None
    span_context = trace.get_current_span(PROPAGATOR.extract({"traceparent": traceparent})).get_span_context()
    return span_context if span_context.is_valid else None


def event_span(event):
    """The span an event's processing runs in, by the rule above."""
    name = f"process {event['provider']} {event['event_type']}"
    attributes = {
        "messaging.system": "pg_webhook_inbox",
        "messaging.operation": "process",
        "messaging.message.id": event["event_id"],
        "messaging.consumer.group.name": event["consumer"],
        "webhook.attempt": event["attempts"],
    }
    if event["replay_id"] is not None:
        attributes["webhook.replay_id"] = str(event["replay_id"])
    request = request_span_context(event["traceparent"])
    if request is None:
        return tracer.start_as_current_span(name, kind=SpanKind.CONSUMER, attributes=attributes)
    if event["attempts"] == 1 and event["replay_id"] is None:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(request))
        return tracer.start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes)
    # A new trace (an empty context has no parent), linked to the request.
    return tracer.start_as_current_span(name, context=otel_context.Context(), kind=SpanKind.CONSUMER,
                                        attributes=attributes, links=[Link(request)])


def work_once(conn, consumer, handle, batch=10):
    """Lease up to `batch` events, run `handle(conn, event)` for each in
    its span, complete or fail each, commit. Returns how many it leased."""
    with conn.transaction():
        cur = conn.execute(
            "SELECT id, provider, event_id, event_type, payload, attempts, consumer, replay_id, traceparent"
            "  FROM webhook_next(%s, %s)",
            (batch, consumer),
        )
        columns = [c.name for c in cur.description]
        events = [dict(zip(columns, row)) for row in cur.fetchall()]
        for event in events:
            with event_span(event) as span:
                try:
                    with conn.transaction():
                        handle(conn, event)
                        conn.execute("SELECT webhook_complete(%s)", (event["id"],))
                except Exception as err:  # the handler's failure is the event's
                    span.record_exception(err)
                    span.set_status(Status(StatusCode.ERROR, str(err)))
                    conn.execute("SELECT webhook_fail(%s, %s, retry_in => %s::interval)",
                                 (event["id"], str(err)[:2000], RETRY_IN))
    return len(events)


def main():
    consumer = sys.argv[1] if len(sys.argv) > 1 else "default"

    def handle(conn, event):
        print(f"{event['provider']} {event['event_type']} {event['event_id']}", flush=True)

    with psycopg.connect(os.environ.get("DATABASE_URL", "")) as conn:
        while True:
            if work_once(conn, consumer, handle) == 0:
                conn.execute("LISTEN webhook_inbox")
                conn.commit()
                for _ in conn.notifies(timeout=5, stop_after=1):
                    pass


if __name__ == "__main__":
    main()
