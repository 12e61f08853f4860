"""The SQL the package sends: all of it, in one place."""
import itertools

COLUMNS = ("id, claimed, status, attempts, result, http_status, reason, event_id, event_type, "
           "event_type_signed, response, response_type")


def _receive(lease: bool, inbox: bool, url: bool) -> str:
    named = [f"{name} => %s{cast}" for name, cast, is_set in (
        ("lease", "::interval", lease), ("inbox", "::boolean", inbox), ("url", "", url),
        ("complete_on_commit", "::boolean", True)) if is_set]
    return f"SELECT {COLUMNS} FROM webhook_receive(%s, %s::jsonb, %s::bytea, {', '.join(named)})"


# webhook_receive naming only the optional arguments a delivery sets (one
# statement for each combination, built once): an argument left out is its
# default (lease: webhook.lease_timeout; inbox: what the provider is
# registered for), and the server binds a shorter call faster.
RECEIVE_CALLS = {key: _receive(*key) for key in itertools.product((True, False), repeat=3)}


def receive(*, lease: bool, inbox: bool, url: bool) -> str:
    return RECEIVE_CALLS[(lease, inbox, url)]


COMPLETE = "SELECT webhook_complete(%s::uuid, %s::jsonb)"
FAIL = "SELECT webhook_fail(%s::uuid, %s)"
HAND_BACK = "SELECT webhook_fail(%s::uuid, 'worker shut down', retry_in => '0 s')"
NEXT = ("SELECT id, provider, event_id, event_type, payload, attempts, consumer, traceparent, origin "
        "FROM webhook_next(%s, %s, provider => %s, lease => %s::interval)")
COMPLETE_BATCH = "SELECT webhook_complete_batch(%s::uuid[])"
OUTBOUND_KEY = "SELECT webhook_outbound_key(%s::uuid, %s)"
LISTEN = "LISTEN webhook_inbox"

# SQLSTATEs the package acts on.
UNKNOWN_PROVIDER = "42704"  # webhook_receive: no such provider registered
PAYLOAD_TOO_LARGE = "54000"  # webhook_receive: larger than webhook.max_payload_size
