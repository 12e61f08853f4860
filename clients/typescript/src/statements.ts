// The SQL the package sends: all of it, in one place.

const COLUMNS =
  "id::text, claimed, status::text, attempts, result, http_status, reason, event_id, event_type, " +
  "event_type_signed, response, response_type";

// inbox NULL: what the provider is registered for; lease NULL: the
// server's default (webhook.lease_timeout). JSON goes over as text
// (::text::jsonb): drivers that type parameters from the statement
// (postgres.js) would encode a jsonb parameter's string a second time.
export const RECEIVE =
  `SELECT ${COLUMNS} FROM webhook_receive($1::text, $2::text::jsonb, $3::bytea, lease => $4::interval, ` +
  "inbox => $5::boolean, url => $6::text, complete_on_commit => $7::boolean)";
// The functions that return nothing are called in FROM with a column of
// their own: a void column is one some drivers cannot read (Prisma's).
export const COMPLETE = "SELECT true AS done FROM webhook_complete($1::uuid, $2::text::jsonb)";
export const FAIL = "SELECT true AS done FROM webhook_fail($1::uuid, $2::text)";
export const HAND_BACK = "SELECT true AS done FROM webhook_fail($1::uuid, 'worker shut down', retry_in => '0 s')";
export const NEXT =
  "SELECT id::text, provider, event_id, event_type, payload, attempts, consumer, traceparent, origin " +
  "FROM webhook_next($1::int, $2::text, provider => $3::text, lease => $4::interval)";
export const COMPLETE_BATCH = "SELECT true AS done FROM webhook_complete_batch($1::uuid[])";
export const OUTBOUND_KEY = "SELECT webhook_outbound_key($1::uuid, $2::text) AS key";
export const LISTEN = "LISTEN webhook_inbox";
// The work's savepoint: a failure undoes the work, not the claim.
export const SAVEPOINT = "SAVEPOINT pg_webhook_inbox_work";
export const RELEASE = "RELEASE SAVEPOINT pg_webhook_inbox_work";
export const ROLLBACK_TO = "ROLLBACK TO SAVEPOINT pg_webhook_inbox_work";

// SQLSTATEs the package acts on.
export const UNKNOWN_PROVIDER = "42704"; // webhook_receive: no such provider registered
export const PAYLOAD_TOO_LARGE = "54000"; // webhook_receive: larger than webhook.max_payload_size
export const TAKEN_OVER = "55006"; // a lease ran out and another worker holds the event
