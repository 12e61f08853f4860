"""The SQL the package sends: all of it, in one place."""

COLUMNS = ("id, claimed, status, attempts, result, http_status, reason, event_id, event_type, "
           "event_type_signed, response, response_type")

# inbox NULL: what the provider is registered for. lease NULL: the server's
# default (webhook.lease_timeout).
RECEIVE = (f"SELECT {COLUMNS} FROM webhook_receive(%s, %s::jsonb, %s::bytea, lease => %s::interval, "
           "inbox => %s, url => %s, complete_on_commit => %s)")
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
