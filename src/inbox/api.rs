//! The inbox's SQL functions: `webhook_enqueue`, for handlers that verify
//! deliveries themselves, and `webhook_next`, which workers lease events
//! with. (`webhook_receive` queues in inbox mode too; see `receive`.)

use super::heads;
use super::lease;
use crate::claim::api::{checked_payload, delivery, payload_of_body, Claims};
use crate::claim::Outcome;
use crate::composite;
use crate::errors::{PgResult, Result, WebhookError};
use crate::event_lock::EventLock;
use crate::input::{self, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES};
use crate::jsonb::RawJsonb;
use crate::ordering;
use crate::plans::Statement;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;

pub(crate) const ENQUEUE: &str = "webhook_enqueue";
const NEXT: &str = "webhook_next";

/// Most events one `webhook_next` call leases.
const MAX_BATCH: i32 = 1000;

/// Queue a delivery the caller has verified (payload as `jsonb`): `queued`
/// when its event is new, `duplicate` when it was seen before. Either way
/// it is stored once the transaction commits: answer 2xx. `traceparent`:
/// the W3C trace context of the application's request span, which the
/// event's worker gets from `webhook_next` (see `trace`).
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_payload(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    let traceparent = crate::trace::checked(ENQUEUE, traceparent)?;
    let payload = checked_payload(ENQUEUE, payload)?;
    let queued = enqueue(provider, event_id, event_type, payload, None, signature)?;
    Ok(composite::of_call(
        fcinfo,
        queued.traced(traceparent)?.values(),
    )?)
}

/// `webhook_enqueue` with the raw body, archived byte for byte.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_body(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    let traceparent = crate::trace::checked(ENQUEUE, traceparent)?;
    let queued = enqueue_raw(provider, event_id, event_type, body, signature)?;
    Ok(composite::of_call(
        fcinfo,
        queued.traced(traceparent)?.values(),
    )?)
}

/// `webhook_enqueue` with the raw body passed as text.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_body_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body(
        provider,
        event_id,
        event_type,
        body.map(str::as_bytes),
        signature,
        traceparent,
        fcinfo,
    )
}

/// `webhook_enqueue` as the release before trace context declares it (no
/// `traceparent`): its SQL calls this until `ALTER EXTENSION … UPDATE`.
#[pg_extern(sql = false)]
fn enqueue_payload(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_payload(
        provider, event_id, event_type, payload, signature, None, fcinfo,
    )
}

/// The raw-body form as the release before trace context declares it.
#[pg_extern(sql = false)]
fn enqueue_body(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body(
        provider, event_id, event_type, body, signature, None, fcinfo,
    )
}

/// The text form as the release before trace context declares it.
#[pg_extern(sql = false)]
fn enqueue_body_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body_text(
        provider, event_id, event_type, body, signature, None, fcinfo,
    )
}

/// What `webhook_enqueue` answers: the delivery, and whether its event was
/// queued (new) or a duplicate.
pub(crate) struct Queued {
    id: pgrx::Uuid,
    status: crate::status::ClaimStatus,
}

impl Queued {
    /// The trace context kept for a delivery that queued its event.
    fn traced(self, traceparent: Option<&str>) -> Result<Self> {
        if let Some(traceparent) = traceparent {
            if self.status == crate::status::ClaimStatus::Queued {
                Spi::connect_mut(|client| crate::trace::record(client, self.id, traceparent))?;
            }
        }
        Ok(self)
    }

    /// The values of the columns `(id, queued, status)`.
    fn values(self) -> Vec<Option<pg_sys::Datum>> {
        vec![
            composite::value(self.id),
            composite::value(self.status == crate::status::ClaimStatus::Queued),
            composite::value(self.status.as_str()),
        ]
    }
}

/// Queue a delivery given its raw body.
pub(crate) fn enqueue_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
) -> PgResult<Queued> {
    let body = input::required(ENQUEUE, "body", body)?;
    let payload = payload_of_body(ENQUEUE, body)?;
    enqueue(
        provider,
        event_id,
        event_type,
        payload,
        Some(body),
        signature,
    )
}

/// Queue a delivery whose payload is checked.
pub(crate) fn enqueue(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: RawJsonb,
    raw_body: Option<&[u8]>,
    signature: Option<&str>,
) -> PgResult<Queued> {
    // A queued event is leased by workers, not by this call: the default.
    let claims = Claims::leased(ENQUEUE)?;
    let d = delivery(
        ENQUEUE, provider, event_id, event_type, payload, raw_body, signature, claims,
    )?;
    let Outcome { id, status, .. } = Spi::connect_mut(|client| {
        crate::scopes::check_provider(client, ENQUEUE, "provider", d.provider)?;
        let order = crate::ordering::of_payload(client, d.provider, &d.payload)?;
        let d = crate::claim::Delivery {
            order: order.as_ref(),
            ..d
        };
        super::enqueue(client, &d)
    })?;
    Ok(Queued { id, status })
}

/// Lease up to `batch` ready events of `consumer` for `lease` (default
/// `webhook.lease_timeout`), oldest run time first, optionally only one
/// provider's or one event type's. Never waits for another worker: rows
/// another transaction is leasing are skipped. Each row's `id` is the
/// lease: finish it with `webhook_complete(id)` or `webhook_fail(id, err)`,
/// renew it with `webhook_extend(id, lease)`. An event whose lease ran out
/// is ready again, its attempt counted; one that ran out of
/// `webhook.max_attempts` that way is parked as dead instead.
///
/// For a provider registered with ordering, an event older than its
/// entity's watermark (for this consumer) is parked as `stale` instead of
/// leased; with `fifo`, an event is not leased while an earlier event of
/// its entity is leased or backing off.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_next")]
#[search_path(pg_catalog, pg_temp)]
fn lease_next(
    batch: default!(Option<i32>, 1),
    consumer: default!(Option<&str>, "'default'"),
    provider: default!(Option<&str>, "NULL"),
    event_type: default!(Option<&str>, "NULL"),
    lease: default!(Option<Interval>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(provider, String),
            name!(event_id, String),
            name!(event_type, String),
            name!(payload, Option<RawJsonb>),
            name!(attempts, i32),
            name!(consumer, String),
            name!(delivery_id, pgrx::Uuid),
            name!(queued_at, TimestampWithTimeZone),
            name!(lease_expires_at, TimestampWithTimeZone),
            name!(replay_id, Option<pgrx::Uuid>),
            name!(traceparent, Option<String>),
            name!(origin, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    Ok(TableIterator::new(next(
        batch, consumer, provider, event_type, lease,
    )?))
}

/// One leased event, in `webhook_next`'s columns.
type LeasedRow = (
    pgrx::Uuid,
    String,
    String,
    String,
    Option<RawJsonb>,
    i32,
    String,
    pgrx::Uuid,
    TimestampWithTimeZone,
    TimestampWithTimeZone,
    Option<pgrx::Uuid>,
    Option<String>,
    Option<String>,
);

fn next(
    batch: Option<i32>,
    consumer: Option<&str>,
    provider: Option<&str>,
    event_type: Option<&str>,
    lease: Option<Interval>,
) -> PgResult<Vec<LeasedRow>> {
    let batch = input::required(NEXT, "batch", batch)?;
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(WebhookError::InvalidArgument {
            function: NEXT,
            arg: "batch",
            rule: "must be between 1 and 1000",
        }
        .into());
    }
    let consumer = input::required_text(NEXT, "consumer", consumer, MAX_PROVIDER_BYTES)?;
    let provider = input::optional_text(NEXT, "provider", provider, MAX_PROVIDER_BYTES)?;
    let event_type = input::optional_text(NEXT, "event_type", event_type, MAX_EVENT_TYPE_BYTES)?;
    let lease = input::lease(NEXT, "lease", lease)?;
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    let rows = Spi::connect_mut(|client| -> Result<Vec<_>> {
        let scope = crate::scopes::of_session(client)?;
        match provider {
            Some(provider) => scope.consumer(NEXT, ("provider", "consumer"), provider, consumer)?,
            None => scope.every_provider(NEXT, "provider")?,
        }
        // What the consumer's controls allow, if anything steers it.
        let controls = crate::registry::controls(client, consumer)?;
        let allowance = match &controls {
            None => None,
            Some(controls) => {
                match super::flow::allowance(client, controls, consumer, provider, batch)? {
                    Some(allowance) => Some(allowance),
                    None => return Ok(Vec::new()),
                }
            }
        };
        let batch = allowance.as_ref().map_or(batch, |a| a.batch);
        // A round that only parked rows (stale, or out of attempts) says
        // nothing about what is ready behind them, least of all in a FIFO
        // line whose head it parked: try again rather than answer "none".
        let mut from_start = false;
        for _ in 0..MAX_PARKING_ROUNDS {
            let (line_providers, line_keys) = lines(client, consumer, provider, event_type, batch)?;
            let lease_statement = lease_statement(
                client,
                provider.is_some(),
                event_type.is_some(),
                allowance.is_some(),
            )?;
            let turn = TURN.get();
            TURN.set(turn.wrapping_add(1) & i64::MAX);
            let lease_ids: Vec<pgrx::Uuid> =
                (0..batch).map(|_| crate::uuid::new_lease_id()).collect();
            let (start_providers, starts) = match from_start {
                true => Default::default(),
                false => heads::starts(consumer, provider, event_type),
            };
            let from_heads = !starts.is_empty();
            let mut args = vec![
                consumer.into(),
                provider.into(),
                event_type.into(),
                batch.into(),
                lease.into(),
                max_attempts.into(),
                line_providers.into(),
                line_keys.into(),
                turn.into(),
                lease_ids.into(),
                start_providers.into(),
                starts.into(),
            ];
            if let Some(allowance) = &allowance {
                args.extend([
                    allowance.excluded.clone().into(),
                    allowance.quotas.0.clone().into(),
                    allowance.quotas.1.clone().into(),
                    allowance.quarantining.clone().into(),
                ]);
            }
            let rows = lease_statement.run(client, &args)?;
            let mut picked = Vec::with_capacity(rows.len());
            let mut leased = Vec::with_capacity(rows.len());
            for row in rows {
                let missing =
                    || WebhookError::Internal("webhook_next: NULL in a picked row".into());
                picked.push((
                    row.get::<String>(2)?.ok_or_else(missing)?,
                    row.get::<TimestampWithTimeZone>(12)?.ok_or_else(missing)?,
                ));
                if row.get::<bool>(11)? == Some(true) {
                    leased.push(leased_row(&row)?);
                }
            }
            heads::record(
                consumer,
                provider,
                event_type,
                &picked,
                picked.len() == batch as usize,
            );
            if picked.is_empty() && from_heads {
                // Nothing after the heads: look once from the start, past
                // whatever appeared before them, before answering "none".
                from_start = true;
                continue;
            }
            if !leased.is_empty() || picked.is_empty() {
                if let Some(allowance) = &allowance {
                    let made: Vec<(pgrx::Uuid, &str)> =
                        leased.iter().map(|row| (row.0, row.1.as_str())).collect();
                    super::flow::record(client, allowance, consumer, &made)?;
                }
                read_payloads(client, &mut leased)?;
                return Ok(leased);
            }
        }
        Ok(Vec::new())
    })?;
    Ok(rows)
}

/// The leased events' payloads, and where each came from, from the
/// archive rows that brought them. A statement of its own rather than a
/// join in LEASE: planned with the ids in hand, it reads only the archive
/// partitions holding them (see `plans`), where the join would open every
/// partition on each call.
///
/// Where it came from: `verified` (`webhook_receive` checked its
/// signature: the archive row names the secret), `polled`
/// (`webhook_enqueue_polled`, from the provider's API) or `enqueued` (the
/// application's `webhook_enqueue`, which trusts its caller). A worker
/// that must act only on what the provider signed can tell them apart.
static PAYLOADS: Statement = Statement {
    sql: "SELECT l.id, l.payload,
                 CASE WHEN l.secret_fingerprint IS NOT NULL THEN 'verified'
                      WHEN EXISTS (SELECT FROM webhook.polled p WHERE p.delivery_id = l.id) THEN 'polled'
                      ELSE 'enqueued' END
            FROM webhook.delivery_log l WHERE l.id = ANY ($1)",
    arg_types: &[pg_sys::UUIDARRAYOID],
};

/// The release before polling (and origins) reads the payload alone.
static PAYLOADS_BEFORE_POLLING: Statement = Statement {
    sql: "SELECT id, payload, NULL::text FROM webhook.delivery_log WHERE id = ANY ($1)",
    arg_types: &[pg_sys::UUIDARRAYOID],
};

static POLLING: crate::installed::Column = crate::installed::Column::new("webhook.polled", "delivery_id");

fn read_payloads(client: &mut pgrx::spi::SpiClient<'_>, leased: &mut [LeasedRow]) -> Result<()> {
    if leased.is_empty() {
        return Ok(());
    }
    let ids: Vec<pgrx::Uuid> = leased.iter().map(|row| row.7).collect();
    let statement = if POLLING.present(client)? {
        &PAYLOADS
    } else {
        &PAYLOADS_BEFORE_POLLING
    };
    let mut payloads = std::collections::HashMap::with_capacity(ids.len());
    for row in statement.run_pruned(client, &[ids.into()])? {
        if let Some(id) = row.get::<pgrx::Uuid>(1)? {
            payloads.insert(*id.as_bytes(), (row.get::<RawJsonb>(2)?, row.get::<String>(3)?));
        }
    }
    for row in leased.iter_mut() {
        let (payload, origin) = payloads.remove(row.7.as_bytes()).unwrap_or((None, None));
        (row.4, row.12) = (payload, origin);
    }
    Ok(())
}

/// How many times `webhook_next` tries again after a round that leased
/// nothing but parked rows.
const MAX_PARKING_ROUNDS: usize = 100;

fn leased_row(row: &crate::plans::Row<'_>) -> Result<LeasedRow> {
    let missing = || WebhookError::Internal("webhook_next: NULL in a leased row".into());
    Ok((
        row.get::<pgrx::Uuid>(1)?.ok_or_else(missing)?,
        row.get::<String>(2)?.ok_or_else(missing)?,
        row.get::<String>(3)?.ok_or_else(missing)?,
        row.get::<String>(4)?.ok_or_else(missing)?,
        row.get::<RawJsonb>(5)?,
        row.get::<i32>(6)?.ok_or_else(missing)?,
        row.get::<String>(7)?.ok_or_else(missing)?,
        row.get::<pgrx::Uuid>(8)?.ok_or_else(missing)?,
        row.get::<TimestampWithTimeZone>(9)?.ok_or_else(missing)?,
        row.get::<TimestampWithTimeZone>(10)?.ok_or_else(missing)?,
        row.get::<pgrx::Uuid>(13)?,
        row.get::<String>(14)?,
        // Read with the payload (read_payloads).
        None,
    ))
}

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
               ORDER BY l.queued_at"
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
fn lease_statement(
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

thread_local! {
    /// This backend's calls of `webhook_next`, for the providers' turns.
    static TURN: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

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
fn lines(
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
