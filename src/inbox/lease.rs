//! Finishing an inbox lease: what `webhook_complete`, `webhook_fail` and
//! `webhook_extend` do when their id is a lease from `webhook_next` rather
//! than a claimed delivery.
//!
//! The fence is the row's `claim_id`: each lease gets a new one, so a
//! worker whose lease ran out and was taken over matches nothing and is
//! refused (SQLSTATE 55006), and its transaction rolls back its work. A
//! lease that ran out but was not taken over yet is still the event's: no
//! one else has done the work, so finishing it is still right. No advisory
//! lock is needed: every change to an inbox row is one UPDATE that checks
//! the fence, and `webhook_next` never touches a row another transaction
//! holds.

use super::flow;
use crate::errors::{Owner, Result, Standing, WebhookError};
use crate::fence::Fence;
use crate::jsonb::RawJsonb;
use crate::ordering::{self, Order};
use crate::plans::Statement;
use crate::status::InboxStatus;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The message recorded for a lease that ran out and was taken over; the
/// row's `lease_expired` says so for code.
macro_rules! lease_expired {
    () => {
        "lease expired"
    };
}
pub(crate) use lease_expired;

/// Mark a lease's row processed, returning what moves its entity's
/// watermark.
static COMPLETE: Statement = Statement {
    sql: "UPDATE webhook.inbox
             SET status = 'processed', processed_at = pg_catalog.now(), result = $2
           WHERE claim_id = $1 AND status = 'leased'
       RETURNING provider, consumer, event_id, entity_key, order_value::text",
    arg_types: &[pg_sys::UUIDOID, pg_sys::JSONBOID],
};

/// The attempt a live lease is on.
static ATTEMPT: Statement = Statement {
    sql: "SELECT attempts FROM webhook.inbox WHERE claim_id = $1 AND status = 'leased'",
    arg_types: &[pg_sys::UUIDOID],
};

static FAIL: Statement = Statement {
    sql: "WITH failed AS (
              UPDATE webhook.inbox
                 SET status = CASE WHEN $4 THEN 'dead' ELSE 'ready' END::webhook.inbox_status,
                     run_at = pg_catalog.clock_timestamp() + $3,
                     last_error = $2
               WHERE claim_id = $1 AND status = 'leased'
           RETURNING provider, event_id, consumer, attempts
          )
          INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message)
          SELECT $1, provider, event_id, consumer, attempts, $2 FROM failed
       RETURNING provider, consumer",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::BOOLOID,
    ],
};

static EXTEND: Statement = Statement {
    sql: "UPDATE webhook.inbox
             SET run_at = pg_catalog.clock_timestamp() + $2
           WHERE claim_id = $1 AND status = 'leased'
       RETURNING run_at",
    arg_types: &[pg_sys::UUIDOID, pg_sys::INTERVALOID],
};

/// Where a lease id stands, when it could not be finished: the row it
/// still names, and whether its recorded failure is its lease running out.
static DIAGNOSE: Statement = Statement {
    sql: "SELECT (SELECT status::text FROM webhook.inbox WHERE claim_id = $1),
                 (SELECT lease_expired FROM webhook.inbox_failures WHERE claim_id = $1)
           WHERE EXISTS (SELECT FROM webhook.inbox WHERE claim_id = $1)
              OR EXISTS (SELECT FROM webhook.inbox_failures WHERE claim_id = $1)",
    arg_types: &[pg_sys::UUIDOID],
};

/// Whose events a lease id names, live or failed.
static PROVIDER_AND_CONSUMER: Statement = Statement {
    sql: "SELECT provider, consumer FROM webhook.inbox WHERE claim_id = $1
          UNION ALL
          SELECT provider, consumer FROM webhook.inbox_failures WHERE claim_id = $1
          LIMIT 1",
    arg_types: &[pg_sys::UUIDOID],
};

/// Refuse leases of a provider or consumer outside the session's scope
/// (see `scopes`), before anything is changed or diagnosed. Looked up
/// only when the session is scoped.
fn in_scope(client: &mut SpiClient<'_>, function: &'static str, ids: &[pgrx::Uuid]) -> Result<()> {
    let scope = crate::scopes::of_session(client)?;
    if !scope.is_bound() {
        return Ok(());
    }
    for id in ids {
        let Some(row) = PROVIDER_AND_CONSUMER.run(client, &[(*id).into()])?.next() else {
            // No such lease: refused as unknown, as for anyone.
            continue;
        };
        let provider = row.get::<String>(1)?.unwrap_or_default();
        let consumer = row.get::<String>(2)?.unwrap_or_default();
        scope.consumer(function, ("id", "id"), &provider, &consumer)?;
    }
    Ok(())
}

/// `webhook_complete` of a lease: an ordered event moves its entity's
/// watermark for the lease's consumer (see `ordering::advance`).
pub fn complete(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    result: Option<RawJsonb>,
) -> Result<()> {
    in_scope(client, function, &[id])?;
    let (provider, consumer, ordered) = fence(function, id).update(
        client,
        &COMPLETE,
        &[id.into(), result.into()],
        |row| {
            // An unordered event moves no watermark.
            let ordered = match row.get::<String>(4)?.zip(row.get::<String>(5)?) {
                Some((entity_key, value)) => Some((
                    row.get::<String>(3)?.unwrap_or_default(),
                    Order { entity_key, value },
                )),
                None => None,
            };
            Ok((
                row.get::<String>(1)?.unwrap_or_default(),
                row.get::<String>(2)?.unwrap_or_default(),
                ordered,
            ))
        },
        |client| standing(client, id),
    )?;
    flow::succeeded(client, &consumer, &provider)?;
    let Some((event_id, order)) = ordered else {
        return Ok(());
    };
    ordering::advance(
        client, function, id, &provider, &consumer, &event_id, &order,
    )
}

/// Mark a batch of leases' rows processed, returning what moves their
/// entities' watermarks.
static COMPLETE_BATCH: Statement = Statement {
    sql: "UPDATE webhook.inbox
             SET status = 'processed', processed_at = pg_catalog.now(), result = NULL
           WHERE claim_id = ANY ($1) AND status = 'leased'
       RETURNING claim_id, provider, consumer, event_id, entity_key, order_value::text",
    arg_types: &[pg_sys::UUIDARRAYOID],
};

/// `webhook_complete_batch`: every lease as `complete` would, in one
/// statement. One lease that may not finish refuses the whole call, with
/// its own error (the first in `ids` order), so the caller's transaction
/// rolls back the batch's work rather than commit one event's twice.
pub fn complete_batch(
    client: &mut SpiClient<'_>,
    function: &'static str,
    ids: &[pgrx::Uuid],
) -> Result<()> {
    in_scope(client, function, ids)?;
    let mut finished = std::collections::HashSet::with_capacity(ids.len());
    let mut ordered = Vec::new();
    let mut succeeded = std::collections::BTreeSet::new();
    for row in COMPLETE_BATCH.run(client, &[ids.to_vec().into()])? {
        let id = row
            .get::<pgrx::Uuid>(1)?
            .ok_or_else(|| WebhookError::Internal(format!("{function}: a lease without id")))?;
        finished.insert(*id.as_bytes());
        succeeded.insert((
            row.get::<String>(3)?.unwrap_or_default(),
            row.get::<String>(2)?.unwrap_or_default(),
        ));
        if let Some((entity_key, value)) = row.get::<String>(5)?.zip(row.get::<String>(6)?) {
            ordered.push((
                id,
                row.get::<String>(2)?.unwrap_or_default(),
                row.get::<String>(3)?.unwrap_or_default(),
                row.get::<String>(4)?.unwrap_or_default(),
                Order { entity_key, value },
            ));
        }
    }
    refuse_unfinished(client, function, ids, &finished)?;
    for (consumer, provider) in succeeded {
        flow::succeeded(client, &consumer, &provider)?;
    }
    for (id, provider, consumer, event_id, order) in ordered {
        ordering::advance(
            client, function, id, &provider, &consumer, &event_id, &order,
        )?;
    }
    Ok(())
}

/// The first of `ids` that a batch statement did not finish, refused
/// with where it stands.
fn refuse_unfinished(
    client: &mut SpiClient<'_>,
    function: &'static str,
    ids: &[pgrx::Uuid],
    finished: &std::collections::HashSet<[u8; 16]>,
) -> Result<()> {
    match ids.iter().find(|id| !finished.contains(id.as_bytes())) {
        Some(id) => Err(fence(function, *id).refused(standing(client, *id)?)),
        None => Ok(()),
    }
}

/// The attempts live leases are on.
static ATTEMPTS: Statement = Statement {
    sql: "SELECT claim_id, attempts FROM webhook.inbox WHERE claim_id = ANY ($1) AND status = 'leased'",
    arg_types: &[pg_sys::UUIDARRAYOID],
};

/// FAIL for a batch: each lease with its own delay (microseconds) and
/// verdict (dead or not).
static FAIL_BATCH: Statement = Statement {
    sql: "WITH given AS (
              SELECT * FROM unnest($1::uuid[], $2::int8[], $3::bool[]) AS g (claim_id, delay, dead)
          ), failed AS (
              UPDATE webhook.inbox i
                 SET status = CASE WHEN g.dead THEN 'dead' ELSE 'ready' END::webhook.inbox_status,
                     run_at = pg_catalog.clock_timestamp() + g.delay * interval '1 microsecond',
                     last_error = $4
                FROM given g
               WHERE i.claim_id = g.claim_id AND i.status = 'leased'
           RETURNING i.claim_id, i.provider, i.event_id, i.consumer, i.attempts
          )
          INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message)
          SELECT claim_id, provider, event_id, consumer, attempts, $4 FROM failed
       RETURNING claim_id, provider, consumer",
    arg_types: &[
        pg_sys::UUIDARRAYOID,
        pg_sys::INT8ARRAYOID,
        pg_sys::BOOLARRAYOID,
        pg_sys::TEXTOID,
    ],
};

/// `webhook_fail_batch`: every lease as `fail` would (each with its own
/// backoff), in one statement; refused whole like `complete_batch`.
pub fn fail_batch(
    client: &mut SpiClient<'_>,
    function: &'static str,
    ids: &[pgrx::Uuid],
    err: &str,
    retry_in: Option<Interval>,
    permanent: bool,
) -> Result<()> {
    in_scope(client, function, ids)?;
    let mut attempts = std::collections::HashMap::with_capacity(ids.len());
    for row in ATTEMPTS.run(client, &[ids.to_vec().into()])? {
        if let Some(id) = row.get::<pgrx::Uuid>(1)? {
            attempts.insert(*id.as_bytes(), row.get::<i32>(2)?.unwrap_or(0));
        }
    }
    let live: std::collections::HashSet<[u8; 16]> = attempts.keys().copied().collect();
    refuse_unfinished(client, function, ids, &live)?;
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    let (mut delays, mut dead) = (Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len()));
    for id in ids {
        let attempt = attempts[id.as_bytes()];
        dead.push(permanent || (max_attempts > 0 && attempt >= max_attempts));
        delays.push(match retry_in {
            Some(delay) => delay.as_micros() as i64,
            None => super::backoff::delay_after(attempt, *id),
        });
    }
    let mut failed = std::collections::HashSet::with_capacity(ids.len());
    let mut failures = std::collections::BTreeMap::new();
    for row in FAIL_BATCH.run(
        client,
        &[ids.to_vec().into(), delays.into(), dead.into(), err.into()],
    )? {
        if let Some(id) = row.get::<pgrx::Uuid>(1)? {
            failed.insert(*id.as_bytes());
        }
        let whose = (
            row.get::<String>(3)?.unwrap_or_default(),
            row.get::<String>(2)?.unwrap_or_default(),
        );
        *failures.entry(whose).or_insert(0) += 1;
    }
    // A lease taken over between the read and the UPDATE.
    refuse_unfinished(client, function, ids, &failed)?;
    for ((consumer, provider), n) in failures {
        flow::failed(client, &consumer, &provider, n)?;
    }
    Ok(())
}

/// `webhook_fail` of a lease: ready again after `retry_in` (default: the
/// backoff), or dead when `permanent` or out of `webhook.max_attempts`.
pub fn fail(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    err: &str,
    retry_in: Option<Interval>,
    permanent: bool,
) -> Result<()> {
    in_scope(client, function, &[id])?;
    let fence = fence(function, id);
    let attempt = match ATTEMPT.run(client, &[id.into()])?.next() {
        Some(row) => row.get::<i32>(1)?.unwrap_or(0),
        None => return Err(fence.refused(standing(client, id)?)),
    };
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    let dead = permanent || (max_attempts > 0 && attempt >= max_attempts);
    let delay =
        retry_in.unwrap_or_else(|| Interval::from_micros(super::backoff::delay_after(attempt, id)));
    // The fence is checked again by the UPDATE: a lease taken over since
    // the read above changes nothing.
    let (provider, consumer) = fence.update(
        client,
        &FAIL,
        &[id.into(), err.into(), delay.into(), dead.into()],
        |row| {
            Ok((
                row.get::<String>(1)?.unwrap_or_default(),
                row.get::<String>(2)?.unwrap_or_default(),
            ))
        },
        |client| standing(client, id),
    )?;
    flow::failed(client, &consumer, &provider, 1)
}

/// `webhook_extend` of a lease: the new expiry.
pub fn extend(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    lease: Interval,
) -> Result<TimestampWithTimeZone> {
    in_scope(client, function, &[id])?;
    fence(function, id).update(
        client,
        &EXTEND,
        &[id.into(), lease.into()],
        |row| {
            row.get::<TimestampWithTimeZone>(1)?
                .ok_or_else(|| WebhookError::Internal(format!("{function}: empty result")))
        },
        |client| standing(client, id),
    )
}

fn fence(function: &'static str, id: pgrx::Uuid) -> Fence {
    Fence {
        function,
        owner: Owner::Lease,
        id,
    }
}

/// Where a lease stands that could not be finished. An id that is no
/// lease either (nor a delivery, which the caller looked for first) is
/// unknown.
fn standing(client: &mut SpiClient<'_>, id: pgrx::Uuid) -> Result<Standing> {
    let Some(row) = DIAGNOSE.run(client, &[id.into()])?.next() else {
        return Ok(Standing::Unknown);
    };
    let status = row
        .get::<String>(1)?
        .map(|label| InboxStatus::parse(&label))
        .transpose()?;
    let expired = row.get::<bool>(2)?.unwrap_or(false);
    Ok(match status {
        _ if expired => Standing::Lost {
            detail:
                "Its lease ran out: the event was leased again, or parked once out of attempts."
                    .into(),
        },
        // Failed, and ready for its next attempt under a new lease.
        Some(InboxStatus::Ready) | None => Standing::Finished {
            status: "failed".into(),
        },
        Some(status) => Standing::Finished {
            status: status.as_str().into(),
        },
    })
}
