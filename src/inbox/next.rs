//! `webhook_next`: lease ready events for a worker, and hand each over
//! with its payload and where it came from.

use super::heads;
use super::pick::{lease_statement, lines};
use crate::errors::{PgResult, Result, WebhookError};
use crate::input::{self, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES};
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;

const NEXT: &str = "webhook_next";

/// Most events one `webhook_next` call leases.
const MAX_BATCH: i32 = 1000;

thread_local! {
    /// This backend's calls of `webhook_next`, for the providers' turns.
    static TURN: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
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
    crate::standby::refuse_writes(NEXT)?;
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

static POLLING: crate::installed::Column =
    crate::installed::Column::new("webhook.polled", "delivery_id");

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
            payloads.insert(
                *id.as_bytes(),
                (row.get::<RawJsonb>(2)?, row.get::<String>(3)?),
            );
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
