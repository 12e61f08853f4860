//! The SQL of the claim path. Each statement that answers an existing
//! event returns it in the shape `EventState::read` takes — `(answer,
//! status, attempts, claim_id, result, payload_hash)` — where `answer`
//! comes from `answer!`, the one place an event's state is turned into an
//! answer. A new event's claim needs no answer: `INSERT_NEW` returns a row
//! when it inserted the event.
//!
//! Arguments of the archiving statements follow `archive_insert!`'s
//! column order as far as they can.

use crate::archive::archive_insert;
use crate::plans::Statement;
use pgrx::pg_sys;

/// What a delivery of an event is answered, from the event's committed
/// state (`status`, `lease`: SQL expressions of the event's columns):
/// `duplicate`, `dead`, `in_progress`, or NULL when the delivery may take
/// the event over (it failed, or its lease ran out). `held_elsewhere`
/// (`true`/`false`): another transaction holds the event's lock, so it is
/// in progress whatever its lease says; so is an event not yet committed
/// (NULL status). A processed event, one handed to the inbox (queued), or
/// one skipped as stale or filtered is a duplicate: its work is done,
/// owned by the inbox's workers, or never to be done (compared as text: a
/// release before filters has no such label). Every label of
/// `webhook.event_status` is named. Written once, expanded into each
/// statement, so the decision costs no function call and needs no SQL
/// object of its own.
macro_rules! answer {
    ($status:literal, $lease:literal, $held_elsewhere:literal) => {
        concat!(
            "(CASE WHEN ",
            $status,
            " IS NULL THEN 'in_progress'
                   WHEN ",
            $status,
            " = 'dead' THEN 'dead'
                   WHEN ",
            $status,
            "::text IN ('processed', 'queued', 'stale', 'filtered') THEN 'duplicate'
                   WHEN ",
            $status,
            " IN ('processing', 'failed') THEN
                       CASE WHEN ",
            $held_elsewhere,
            " OR (",
            $status,
            " = 'processing' AND ",
            $lease,
            " > pg_catalog.clock_timestamp())
                            THEN 'in_progress'
                       END
              END)::webhook.claim_status"
        )
    };
}

/// The status of an event a claim owns, given an SQL condition that holds
/// when the claim completes on commit: `processed` already then, so that
/// its transaction's commit is the event's completion and its rollback
/// undoes both; `processing` otherwise, until `webhook_complete`. The claim
/// statements test the lease (a claim that completes on commit has none),
/// `lifecycle` a flag the session keeps.
macro_rules! owned_status {
    ($completes_on_commit:literal) => {
        concat!(
            "(CASE WHEN ",
            $completes_on_commit,
            " THEN 'processed' ELSE 'processing' END)::webhook.event_status"
        )
    };
}
pub(crate) use owned_status;

/// The arguments of CLAIM, OBSERVE and the inbox's ENQUEUE
/// (`Delivery::arguments`): provider, event_id, event_type, the delivery's
/// id, payload, raw_body, signature, headers, lease, payload digest, then
/// an ordered event's entity key and order value (as text; NULL for an
/// unordered one), then the fingerprint of the key that verified the
/// delivery (NULL but for `webhook_receive`).
pub(crate) const DELIVERY_ARGUMENTS: &[pg_sys::Oid] = &[
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::UUIDOID,
    pg_sys::JSONBOID,
    pg_sys::BYTEAOID,
    pg_sys::TEXTOID,
    pg_sys::JSONBOID,
    pg_sys::INTERVALOID,
    pg_sys::BYTEAOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
];

/// The claim of an event, first step: insert it if it is new (one row
/// returned), as the claim's own. Nothing else is in this statement, and
/// the archive row is `CLAIMED`, a second one, because an event is new far
/// more often than not and a statement's executor start-up is paid for
/// every node of its plan, run or not: the branch that answers an existing
/// event, folded into one statement with the insert, cost the new event
/// more to set up than a statement of its own costs to run. Under the
/// event lock this never meets an uncommitted row of the event, so it
/// never waits.
pub static INSERT_NEW: Statement = Statement {
    sql: concat!(
        "INSERT INTO webhook.events
             (provider, event_id, event_type, status, attempts, claim_id, lease_expires_at,
              processed_at, payload_hash, entity_key, order_value)
         VALUES ($1, $2, $3, ",
        owned_status!("$9 IS NULL"),
        ", 1, $4, pg_catalog.clock_timestamp() + $9,
                 CASE WHEN $9 IS NULL THEN pg_catalog.now() END, $10, $11, $12::numeric)
         ON CONFLICT (provider, event_id) DO NOTHING
         RETURNING 1"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// The archive row of a new event's claim (`INSERT_NEW` inserted it),
/// saying whether the claim completes on commit (`claim_completes`), so
/// that the metrics count its completion without looking the event up.
pub static CLAIMED: Statement = Statement {
    sql: concat!(
        "INSERT INTO webhook.delivery_log (",
        crate::archive::archive_columns!(),
        ", claim_completes)
         VALUES ($4, $1, $2, $3, $5, $6, $7, $8, 'claimed', false, $13, NULL, NULLIF($9 IS NULL, false))"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// `CLAIMED` for the tables of a release before `claim_completes`: between
/// installing this library and `ALTER EXTENSION … UPDATE`.
pub static CLAIMED_UNMARKED: Statement = Statement {
    sql: concat!(
        archive_insert!(),
        "VALUES ($4, $1, $2, $3, $5, $6, $7, $8, 'claimed', false, $13, NULL)"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// The claim of an event that exists (`INSERT_NEW` inserted nothing), in
/// one statement: read its committed state, and archive the delivery with
/// the answer that state gives. An event the delivery may take over
/// (failed, or its lease ran out) has no answer and is left to
/// `TAKE_OVER`, which archives it. Run under the event lock, so no open
/// transaction is changing the event.
pub static ANSWER_EXISTING: Statement = Statement {
    sql: concat!(
        "WITH existing AS (
              SELECT e.status, e.attempts, e.claim_id, e.result, e.payload_hash, ",
        answer!("e.status", "e.lease_expires_at", "false"),
        " AS answer
                FROM webhook.events e
               WHERE e.provider = $1 AND e.event_id = $2
          ), archived AS (",
        archive_insert!(),
        "     SELECT $4, $1, $2, $3, $5, $6, $7, $8, x.answer, x.payload_hash IS DISTINCT FROM $10,
                     $13, NULL
                FROM existing x WHERE x.answer IS NOT NULL
          )
          SELECT x.answer::text, x.status::text, x.attempts, x.claim_id, x.result, x.payload_hash
            FROM existing x"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// A delivery arriving while another transaction holds the event: read the
/// committed state and archive the answer it gives, in one statement. It
/// returns the event, or nothing before the event's first claim commits
/// (answered `in_progress` all the same).
pub static OBSERVE: Statement = Statement {
    sql: concat!(
        "WITH existing AS (
              SELECT e.status, e.attempts, e.claim_id, e.result, e.payload_hash, e.lease_expires_at
                FROM webhook.events e
               WHERE e.provider = $1 AND e.event_id = $2
          ), answer AS (
              SELECT x.*, ",
        answer!("x.status", "x.lease_expires_at", "true"),
        " AS answer
                FROM (VALUES (1)) AS one(x_)
                LEFT JOIN existing x ON true
          ), archived AS (",
        archive_insert!(),
        "     SELECT $4, $1, $2, $3, $5, $6, $7, $8, a.answer,
                     a.payload_hash IS NOT NULL AND a.payload_hash IS DISTINCT FROM $10, $13, NULL
                FROM answer a
          )
          SELECT a.answer::text, a.status::text, a.attempts, NULL::uuid, a.result, a.payload_hash
            FROM answer a WHERE a.status IS NOT NULL"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// The committed state of an event, read without writing anything,
/// answered as `held_elsewhere` says.
macro_rules! inspect {
    ($held_elsewhere:literal) => {
        concat!(
            "SELECT ",
            answer!("status", "lease_expires_at", $held_elsewhere),
            "::text, status::text, attempts, claim_id, result, payload_hash
                FROM webhook.events
               WHERE provider = $1 AND event_id = $2"
        )
    };
}

/// Answered as if another transaction held the event.
pub static INSPECT: Statement = Statement {
    sql: inspect!("true"),
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// For a transaction that holds the event's lock: no answer (NULL) when
/// it may take the event over.
pub static INSPECT_LOCKED: Statement = Statement {
    sql: inspect!("false"),
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Take over a failed or expired event. Runs only under the event lock.
/// An ordered delivery sets the event's entity key and order value (`$5`,
/// `$6`); an unordered one (NULL) leaves them.
pub static TAKE_OVER: Statement = Statement {
    sql: concat!(
        "UPDATE webhook.events
            SET status = ",
        owned_status!("$4 IS NULL"),
        ",
                attempts = attempts + 1,
                claim_id = $3,
                lease_expires_at = pg_catalog.clock_timestamp() + $4,
                processed_at = CASE WHEN $4 IS NULL THEN pg_catalog.now() END,
                entity_key = coalesce($5, entity_key),
                order_value = coalesce($6::numeric, order_value)
          WHERE provider = $1 AND event_id = $2
      RETURNING attempts"
    ),
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::INTERVALOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
    ],
};

/// Park an event that has used up its attempts as dead. Runs only under
/// the event lock.
pub static PARK_AS_DEAD: Statement = Statement {
    sql: "UPDATE webhook.events
             SET status = 'dead',
                 lease_expires_at = NULL,
                 last_error = COALESCE(last_error, $3)
           WHERE provider = $1 AND event_id = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Record that a claim's lease ran out and the event was taken over, so the
/// archive never shows that delivery as PENDING forever.
pub static RECORD_LOST_LEASE: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_failures (delivery_id, error_message)
          SELECT $1, $2 WHERE EXISTS (SELECT FROM webhook.delivery_log WHERE id = $1)
          ON CONFLICT (delivery_id) DO NOTHING",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID],
};

/// Skip an event for good as stale (ordering): insert it, or mark the one
/// that failed or whose lease ran out. Runs only under the event lock.
pub static MARK_STALE: Statement = Statement {
    sql: "INSERT INTO webhook.events AS e
              (provider, event_id, event_type, status, attempts, claim_id, payload_hash,
               entity_key, order_value, last_error, processed_at)
          VALUES ($1, $2, $3, 'stale', 0, $4, $5, $6, $7::numeric, $8, pg_catalog.now())
          ON CONFLICT (provider, event_id) DO UPDATE
             SET status = 'stale', lease_expires_at = NULL, entity_key = $6,
                 order_value = $7::numeric, last_error = $8, processed_at = pg_catalog.now()",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
    ],
};

/// Keep a new event filtered for good (`receive::filters`): inserted only
/// if never seen. Runs only under the event lock.
pub static MARK_FILTERED: Statement = Statement {
    sql: "INSERT INTO webhook.events
              (provider, event_id, event_type, status, attempts, claim_id, payload_hash,
               last_error, processed_at)
          VALUES ($1, $2, $3, 'filtered', 0, $4, $5, $6, pg_catalog.now())
          ON CONFLICT (provider, event_id) DO NOTHING
          RETURNING 1",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
    ],
};
