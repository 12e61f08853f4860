//! How `webhook_next` picks and leases rows: one statement per shape of
//! call (a provider or all, an event type or any, steered or not), and
//! the FIFO lines of ordered providers, each planned once per backend.

use super::lease;
use crate::errors::Result;
use crate::event_lock::EventLock;
use crate::ordering;
use crate::plans::Statement;
use pgrx::pg_sys;

/// Lease ready rows: pick them without waiting (`SKIP LOCKED`), record a
/// lease that ran out as a failed attempt, park a row whose expired lease
/// was its last attempt, and lease the rest, each with a fresh id of `$10`
/// (`uuid::new_lease_id`, one per row the batch may take). The
/// picked rows are updated by their row ids (a TID scan): a join back on
/// the key would be planned blind (the pick's row count is a parameter)
/// and could scan the whole inbox. `SET` reads each row as it was.
///
/// The pick reads one queue at a time, each an index range
/// (`inbox_pending_idx`, or `inbox_pending_type_idx` with an event type):
/// the given provider's (`one_queue!`), or, without one, every provider's
/// with unfinished rows for the consumer (`every_queue!`). Another
/// provider's backlog, and another type's, is never walked past; the pick
/// stops reading (and locking) once the batch is full.
///
/// Ordering: each row's entity's watermark is `w`; for providers with
/// `fifo`, only the head of each entity's line is picked; a row older than
/// its watermark (or as old, where ties are stale) is parked as stale.
macro_rules! lease {
    ($queues:expr, $type_filter:literal) => {
        lease!(
            $queues,
            $type_filter,
            "",
            "",
            "$4",
            "",
            "",
            "p.verdict",
            "pg_catalog.clock_timestamp() + $5",
            replay_returning!(),
            replay_columns!()
        )
    };
    // The tables of the release before replays and trace context, between
    // installing this library and `ALTER EXTENSION … UPDATE`.
    ($queues:expr, $type_filter:literal, before_replays) => {
        lease!(
            $queues,
            $type_filter,
            "",
            "",
            "$4",
            "",
            "",
            "p.verdict",
            "pg_catalog.clock_timestamp() + $5",
            "",
            ", NULL::uuid, NULL::text"
        )
    };
    // Steered (see `flow`): providers left out ($13), quotas per provider
    // ($14, $15: providers and counts, pairwise), providers whose
    // quarantines the call applies ($16). A quarantined entity's
    // row is set aside: ready, at run_at 'infinity', out of every pick's
    // range until released. Quarantines are read here, in the statement's
    // snapshot, taken after `flow` took their lock: a release committed
    // by then is seen.
    ($queues:expr, $type_filter:literal, steered) => {
        lease!(
            $queues,
            $type_filter,
            ", coalesce((SELECT l.quota FROM unnest($14::text[], $15::int4[]) AS l (provider, quota)
                           WHERE l.provider = q.provider), $4) AS quota",
            " WHERE q.provider <> ALL ($13::text[])",
            "q.quota",
            concat!(
                "WHEN i.entity_key IS NOT NULL AND (i.provider, i.entity_key) IN (",
                quarantined!(),
                ") THEN 'held' "
            ),
            // Set aside wherever it stands in a FIFO line, not only at its
            // head: the whole entity waits for its release.
            concat!(
                "
              OR (i.provider, i.entity_key) IN (",
                quarantined!(),
                ")"
            ),
            "CASE WHEN p.verdict = 'held' THEN 'ready' ELSE p.verdict END",
            "CASE WHEN p.verdict = 'held' THEN 'infinity'
                               ELSE pg_catalog.clock_timestamp() + $5 END",
            replay_returning!(),
            replay_columns!()
        )
    };
    ($queues:expr, $type_filter:literal, $quota:expr, $excluded:literal, $limit:literal,
     $held:expr, $held_anywhere:expr, $status:literal, $run_at:literal,
     $returning:expr, $columns:expr) => {
        concat!(
            "WITH RECURSIVE ",
            $queues,
            ", picked AS (
                  SELECT c.*
                    FROM (SELECT q.provider,
                                 -- Where the queue's ready rows start, as
                                 -- this backend last found them (see
                                 -- `heads`); a FIFO queue from its start.
                                 CASE WHEN EXISTS (SELECT FROM webhook.providers f
                                                    WHERE f.name = q.provider AND f.fifo)
                                      THEN '-infinity'::timestamptz
                                      ELSE coalesce((SELECT h.since
                                                       FROM unnest($11::text[], $12::timestamptz[])
                                                            AS h (provider, since)
                                                      WHERE h.provider = q.provider),
                                                    '-infinity')
                                 END AS since",
            $quota,
            "
                            FROM queues q",
            $excluded,
            " ORDER BY q.place) q
                   CROSS JOIN LATERAL (
                  SELECT i.ctid AS row_id, i.provider, i.event_id, i.consumer, i.status AS was,
                         i.claim_id AS previous, i.attempts, i.run_at AS due,
                         CASE ",
            $held,
            "WHEN ",
            "(w.order_value > i.order_value
          OR (w.order_value = i.order_value
              AND EXISTS (SELECT FROM webhook.providers t WHERE t.name = i.provider AND t.ties = 'stale')))",
            " THEN 'stale'
                              WHEN i.status = 'leased' AND $6 > 0 AND i.attempts >= $6 THEN 'dead'
                              ELSE 'leased'
                         END AS verdict, ",
            ordering::stale_reason!("i.order_value", "i.entity_key", "w.order_value", "w.event_id"),
            " AS stale_reason
                    FROM webhook.inbox i ",
            "LEFT JOIN webhook.watermarks w
                ON w.provider = i.provider AND w.consumer = i.consumer
               AND w.entity_key = i.entity_key AND w.event_id <> i.event_id",
            "
                   WHERE i.consumer = $1 AND i.provider = q.provider ",
            $type_filter,
            "
                     AND i.status IN ('ready', 'leased')
                     -- The index range: from the queue's head, up to now
                     -- (read once, an init plan), so that entries leased
                     -- before, rows backing off and leased ones are never read.
                     AND i.run_at >= q.since
                     AND i.run_at <= (SELECT pg_catalog.clock_timestamp()) ",
            "AND (i.entity_key IS NULL
              OR NOT EXISTS (SELECT FROM webhook.providers f WHERE f.name = i.provider AND f.fifo)
              OR ((i.provider, i.entity_key) IN (SELECT * FROM unnest($7::text[], $8::text[]))
                  AND ",
            fifo_head!(),
            ")",
            $held_anywhere,
            ")",
            "
                   ORDER BY i.run_at
                   LIMIT ",
            $limit,
            "
                     FOR UPDATE OF i SKIP LOCKED
                  ) c
                   LIMIT $4
              ), lost AS (
                  INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message,
                                                      lease_expired)
                  SELECT p.previous, p.provider, p.event_id, p.consumer, p.attempts, '",
            lease::lease_expired!(),
            "', true
                    FROM picked p
                   WHERE p.was = 'leased'
                  ON CONFLICT (claim_id) DO NOTHING
              ), leased AS (
                  UPDATE webhook.inbox i
                     SET status = (",
            $status,
            ")::webhook.inbox_status,
                         attempts = CASE WHEN p.verdict = 'leased' THEN i.attempts + 1 ELSE i.attempts END,
                         claim_id = CASE WHEN p.verdict = 'leased' THEN ($10::uuid[])[p.n]
                                         ELSE i.claim_id END,
                         run_at = ",
            $run_at,
            ",
                         last_error = CASE WHEN p.verdict = 'stale' THEN p.stale_reason
                                           WHEN i.status = 'leased' THEN '",
            lease::lease_expired!(),
            "' ELSE i.last_error END,
                         processed_at = CASE WHEN p.verdict = 'stale' THEN pg_catalog.now()
                                             ELSE i.processed_at END
                    FROM (SELECT q.*, pg_catalog.row_number() OVER () AS n FROM picked q) p
                   WHERE i.ctid = ANY (ARRAY(SELECT q.row_id FROM picked q)) AND i.ctid = p.row_id
               RETURNING i.claim_id, i.provider, i.event_id, i.event_type, i.attempts, i.consumer,
                         i.delivery_id, i.queued_at, i.run_at, i.status, p.due",
            $returning,
            "
              )
              SELECT l.claim_id, l.provider, l.event_id, l.event_type, NULL::jsonb, l.attempts, l.consumer,
                     l.delivery_id, l.queued_at, l.run_at, l.status = 'leased', l.due",
            $columns,
            "
                FROM leased l
               ORDER BY l.queued_at, l.due"
        )
    };
}

/// What a leased row adds to LEASE's columns (13, 14): the replay that
/// queued it again, if one did, read off the row the lease updates, and
/// the trace context its request came with (`trace`), one key probe.
macro_rules! replay_returning {
    () => {
        ", i.replay_id"
    };
}
macro_rules! replay_columns {
    () => {
        ", l.replay_id,
                     (SELECT t.traceparent FROM webhook.trace_contexts t WHERE t.delivery_id = l.delivery_id)"
    };
}

/// The entities quarantined for consumer `$1`, of the providers whose
/// quarantine lock the call holds (`$16`): providers and keys.
macro_rules! quarantined {
    () => {
        "SELECT s.provider, s.entity_key FROM webhook.pauses s
          WHERE s.entity_key <> '' AND s.consumer IN ('', $1) AND s.provider = ANY ($16::text[])"
    };
}

/// The queue of the given provider (`$2`): a statement of its own, so
/// that a worker pool serving one provider plans and starts none of the
/// loose scan below on every call.
macro_rules! one_queue {
    () => {
        "queues (provider, place) AS (SELECT $2::text, 0::int8)"
    };
}

/// Without a provider: every provider with unfinished rows for the
/// consumer, in turns that rotate from call to call (`$9`), so that a
/// provider with a million queued events does not starve one with ten.
/// The providers are those whose heads this backend knows for the filter
/// (`$11`, see `heads`), or, when it knows none, those a loose scan finds
/// (one probe each): each probe lands at the head of a provider's index
/// range, where the entries of its leased rows stay until a vacuum, so
/// it runs only when the picks start from the start of every range.
macro_rules! every_queue {
    () => {
        "found (provider) AS (
             (SELECT i.provider FROM webhook.inbox i
               WHERE i.consumer = $1 AND i.status IN ('ready', 'leased')
                 AND pg_catalog.cardinality($11::text[]) = 0
               ORDER BY i.provider LIMIT 1)
             UNION ALL
             SELECT (SELECT i.provider FROM webhook.inbox i
                      WHERE i.consumer = $1 AND i.status IN ('ready', 'leased')
                        AND i.provider > f.provider
                      ORDER BY i.provider LIMIT 1)
               FROM found f WHERE f.provider IS NOT NULL
         ), queues (provider, place) AS (
             SELECT q.provider, (q.n + $9) % q.total
               FROM (SELECT f.provider, pg_catalog.row_number() OVER (ORDER BY f.provider) AS n,
                            pg_catalog.count(*) OVER () AS total
                       FROM (SELECT f.provider FROM found f WHERE f.provider IS NOT NULL
                             UNION ALL
                             SELECT h.provider FROM unnest($11::text[]) AS h (provider)) f) q
         )"
    };
}

/// LEASE from one provider's queue or every provider's, of any event type
/// or of one (`$3`).
static LEASE_ONE_QUEUE: Statement = Statement {
    sql: lease!(one_queue!(), ""),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_ONE_QUEUE_OF_TYPE: Statement = Statement {
    sql: lease!(one_queue!(), "AND i.event_type = $3"),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_EVERY_QUEUE: Statement = Statement {
    sql: lease!(every_queue!(), ""),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_EVERY_QUEUE_OF_TYPE: Statement = Statement {
    sql: lease!(every_queue!(), "AND i.event_type = $3"),
    arg_types: LEASE_ARGUMENTS,
};

/// LEASE on the tables of the release before replays and trace context
/// (which also had nothing to steer with).
static LEASE_ONE_QUEUE_BEFORE_REPLAYS: Statement = Statement {
    sql: lease!(one_queue!(), "", before_replays),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_ONE_QUEUE_OF_TYPE_BEFORE_REPLAYS: Statement = Statement {
    sql: lease!(one_queue!(), "AND i.event_type = $3", before_replays),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_EVERY_QUEUE_BEFORE_REPLAYS: Statement = Statement {
    sql: lease!(every_queue!(), "", before_replays),
    arg_types: LEASE_ARGUMENTS,
};
static LEASE_EVERY_QUEUE_OF_TYPE_BEFORE_REPLAYS: Statement = Statement {
    sql: lease!(every_queue!(), "AND i.event_type = $3", before_replays),
    arg_types: LEASE_ARGUMENTS,
};

/// LEASE under a consumer's controls (`flow`).
static STEERED_LEASE_ONE_QUEUE: Statement = Statement {
    sql: lease!(one_queue!(), "", steered),
    arg_types: STEERED_LEASE_ARGUMENTS,
};
static STEERED_LEASE_ONE_QUEUE_OF_TYPE: Statement = Statement {
    sql: lease!(one_queue!(), "AND i.event_type = $3", steered),
    arg_types: STEERED_LEASE_ARGUMENTS,
};
static STEERED_LEASE_EVERY_QUEUE: Statement = Statement {
    sql: lease!(every_queue!(), "", steered),
    arg_types: STEERED_LEASE_ARGUMENTS,
};
static STEERED_LEASE_EVERY_QUEUE_OF_TYPE: Statement = Statement {
    sql: lease!(every_queue!(), "AND i.event_type = $3", steered),
    arg_types: STEERED_LEASE_ARGUMENTS,
};

/// Whether the installed tables know replays (and trace context, which
/// came with them).
static REPLAYS: crate::installed::Column =
    crate::installed::Column::new("webhook.inbox", "replay_id");

/// The lease statement for a call: of one provider's queue or every
/// provider's, of one event type or any, steered or not; on the tables of
/// the release before replays until `ALTER EXTENSION … UPDATE` (nothing
/// can be steered there).
pub(super) fn lease_statement(
    client: &mut pgrx::spi::SpiClient<'_>,
    provider: bool,
    event_type: bool,
    steered: bool,
) -> Result<&'static Statement> {
    Ok(match (provider, event_type, steered) {
        (true, false, true) => &STEERED_LEASE_ONE_QUEUE,
        (true, true, true) => &STEERED_LEASE_ONE_QUEUE_OF_TYPE,
        (false, false, true) => &STEERED_LEASE_EVERY_QUEUE,
        (false, true, true) => &STEERED_LEASE_EVERY_QUEUE_OF_TYPE,
        _ if !REPLAYS.present(client)? => match (provider, event_type) {
            (true, false) => &LEASE_ONE_QUEUE_BEFORE_REPLAYS,
            (true, true) => &LEASE_ONE_QUEUE_OF_TYPE_BEFORE_REPLAYS,
            (false, false) => &LEASE_EVERY_QUEUE_BEFORE_REPLAYS,
            (false, true) => &LEASE_EVERY_QUEUE_OF_TYPE_BEFORE_REPLAYS,
        },
        (true, false, false) => &LEASE_ONE_QUEUE,
        (true, true, false) => &LEASE_ONE_QUEUE_OF_TYPE,
        (false, false, false) => &LEASE_EVERY_QUEUE,
        (false, true, false) => &LEASE_EVERY_QUEUE_OF_TYPE,
    })
}

/// The arguments of LEASE: consumer, provider, event type, batch, lease,
/// webhook.max_attempts, the FIFO lines this transaction holds
/// (providers and entity keys, pairwise), the turn (which provider's
/// queue is read first, without a provider filter), the new lease ids,
/// and where the queues' ready rows start (providers and points in time,
/// pairwise: `heads`).
const LEASE_ARGUMENTS: &[pg_sys::Oid] = STEERED_LEASE_ARGUMENTS.split_at(12).0;

/// LEASE_ARGUMENTS, then the providers left out, the quotas (providers
/// and counts, pairwise) and the providers whose quarantines apply.
const STEERED_LEASE_ARGUMENTS: &[pg_sys::Oid] = &[
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::INT4OID,
    pg_sys::INTERVALOID,
    pg_sys::INT4OID,
    pg_sys::TEXTARRAYOID,
    pg_sys::TEXTARRAYOID,
    pg_sys::INT8OID,
    pg_sys::UUIDARRAYOID,
    pg_sys::TEXTARRAYOID,
    pg_sys::TIMESTAMPTZARRAYOID,
    // Steered only.
    pg_sys::TEXTARRAYOID,
    pg_sys::TEXTARRAYOID,
    pg_sys::INT4ARRAYOID,
    pg_sys::TEXTARRAYOID,
];

/// Whether inbox row `i` is the head of its entity's FIFO line: no
/// earlier event of the entity is ready, backing off or leased, and no
/// other event of it is under a live lease, whatever its order (an older
/// event can arrive while a newer one is being processed). The status
/// test stands on its own, outside the OR: only then does the planner
/// see that the entity's line index (`inbox_entity_line_idx`, partial on
/// those statuses) answers it, and read the one line rather than the
/// whole queue for each row it checks.
macro_rules! fifo_head {
    () => {
        "NOT EXISTS (SELECT FROM webhook.inbox j
                      WHERE j.provider = i.provider AND j.consumer = i.consumer
                        AND j.entity_key = i.entity_key AND j.event_id <> i.event_id
                        AND j.status IN ('ready', 'leased')
                        AND ((j.order_value, j.queued_at, j.event_id)
                                 < (i.order_value, i.queued_at, i.event_id)
                          OR (j.status = 'leased' AND j.run_at > pg_catalog.clock_timestamp())))"
    };
}
use fifo_head;

/// The FIFO lines whose heads LEASE would pick: what `lines` locks before
/// LEASE runs. Read per FIFO provider, each from its own queue.
macro_rules! fifo_heads {
    ($type_filter:literal) => {
        concat!(
            "SELECT h.provider, h.entity_key
               FROM webhook.providers f
              CROSS JOIN LATERAL (
                    SELECT i.provider, i.entity_key, i.run_at
                      FROM webhook.inbox i
                     WHERE i.consumer = $1 AND i.provider = f.name ",
            $type_filter,
            "
                       AND i.status IN ('ready', 'leased') AND i.run_at <= (SELECT pg_catalog.clock_timestamp())
                       AND i.entity_key IS NOT NULL AND ",
            fifo_head!(),
            "
                     ORDER BY i.run_at
                     LIMIT $4) h
              WHERE f.fifo AND ($2::text IS NULL OR f.name = $2)
              ORDER BY h.run_at
              LIMIT $4"
        )
    };
}

static FIFO_HEADS_ANY_TYPE: Statement = Statement {
    sql: fifo_heads!(""),
    arg_types: FIFO_HEADS_ARGUMENTS,
};
static FIFO_HEADS_OF_TYPE: Statement = Statement {
    sql: fifo_heads!("AND i.event_type = $3"),
    arg_types: FIFO_HEADS_ARGUMENTS,
};

/// consumer, provider, event type, batch.
const FIFO_HEADS_ARGUMENTS: &[pg_sys::Oid] = &[
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::INT4OID,
];

/// The FIFO lines this transaction may lease from: "never two events of
/// an entity at once" cannot be decided from one statement's snapshot,
/// because another worker's lease of the same line may commit after the
/// snapshot was taken. So every FIFO lease is made under its line's lock
/// (`EventLock::for_fifo_line`), tried without waiting and held until the
/// transaction ends, and LEASE runs after the locks are taken: its
/// snapshot sees every lease committed by an earlier holder, and a line
/// whose lock another open transaction holds is skipped.
pub(super) fn lines(
    client: &mut pgrx::spi::SpiClient<'_>,
    consumer: &str,
    provider: Option<&str>,
    event_type: Option<&str>,
    batch: i32,
) -> Result<(Vec<String>, Vec<String>)> {
    let mut held = (Vec::new(), Vec::new());
    if !crate::registry::any_fifo(client)? {
        return Ok(held);
    }
    let heads = match event_type {
        None => &FIFO_HEADS_ANY_TYPE,
        Some(_) => &FIFO_HEADS_OF_TYPE,
    }
    .run(
        client,
        &[
            consumer.into(),
            provider.into(),
            event_type.into(),
            batch.into(),
        ],
    )?;
    for row in heads {
        let (Some(line_provider), Some(entity_key)) =
            (row.get::<String>(1)?, row.get::<String>(2)?)
        else {
            continue;
        };
        if EventLock::for_fifo_line(&line_provider, consumer, &entity_key).try_acquire() {
            held.0.push(line_provider);
            held.1.push(entity_key);
        }
    }
    Ok(held)
}
