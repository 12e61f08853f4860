"""The SQL the package sends: all of it, in one place."""
import functools

COLUMNS = ("id, claimed, status, attempts, result, http_status, reason, event_id, event_type, "
           "event_type_signed, response, response_type")


# The casts of webhook_receive's named arguments that need one.
_CASTS = {"lease": "::interval"}


@functools.lru_cache(maxsize=None)
def receive(named: tuple) -> str:
    """``webhook_receive`` naming only the arguments a delivery sets (of
    lease, inbox, url, complete_on_commit, in that order); the others take
    the server's defaults (lease: webhook.lease_timeout; inbox: what the
    provider is registered for; complete_on_commit: false). The call is
    then the one a handler written by hand makes, and costs what it does
    (docs/performance.md). Sixteen texts at most, each prepared once per
    connection."""
    args = ["%s", "%s::jsonb", "%s::bytea"] + [f"{name} => %s{_CASTS.get(name, '')}" for name in named]
    return f"SELECT {COLUMNS} FROM webhook_receive({', '.join(args)})"


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
