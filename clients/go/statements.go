package webhookinbox

// The SQL the package sends: all of it, in one place. JSON goes over as
// text (::text::jsonb) and comes back as text, whatever the driver.
const (
	receiveSQL = "SELECT id::text, claimed, status::text, attempts, result::text, http_status, reason, event_id, " +
		"event_type, event_type_signed, response, response_type " +
		"FROM webhook_receive($1::text, $2::text::jsonb, $3::bytea, lease => $4::interval, inbox => $5::boolean, " +
		"url => $6::text, complete_on_commit => $7::boolean)"
	completeSQL = "SELECT webhook_complete($1::uuid, $2::text::jsonb)"
	// FailSQL records a failure of a claim or lease.
	FailSQL = "SELECT webhook_fail($1::uuid, $2::text)"
	// The work's savepoint: a failure undoes the work, not the claim.
	SavepointSQL  = "SAVEPOINT pg_webhook_inbox_work"
	ReleaseSQL    = "RELEASE SAVEPOINT pg_webhook_inbox_work"
	RollbackToSQL = "ROLLBACK TO SAVEPOINT pg_webhook_inbox_work"

	unknownProviderState = "42704" // webhook_receive: no such provider registered
	tooLargeState        = "54000" // webhook_receive: larger than webhook.max_payload_size
)
