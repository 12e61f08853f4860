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

use crate::errors::{Result, WebhookError};
use crate::jsonb::RawJsonb;
use crate::legacy::Sql;
use crate::ordering::{self, Order};
use crate::plans::Statement;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The error recorded for a lease that ran out and was taken over.
macro_rules! lease_expired {
    () => {
        "lease expired"
    };
}
pub(crate) use lease_expired;

/// Mark a lease's row processed, returning what moves its entity's
/// watermark (`$ordering`: SQL for the entity key and order value, NULL
/// when the tables have none).
macro_rules! complete {
    ($ordering:literal) => {
        concat!(
            "UPDATE webhook.inbox
                SET status = 'processed', processed_at = pg_catalog.now(), result = $2
              WHERE claim_id = $1 AND status = 'leased'
          RETURNING provider, consumer, event_id, ",
            $ordering
        )
    };
}

static COMPLETE: Statement = Statement {
    sql: complete!("entity_key, order_value::text"),
    arg_types: &[pg_sys::UUIDOID, pg_sys::JSONBOID],
};

/// For 0.3.0's tables, which hold no order.
static COMPLETE_UNORDERED: Statement = Statement {
    sql: complete!("NULL::text, NULL::text"),
    arg_types: COMPLETE.arg_types,
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
       RETURNING true",
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
/// still names, or the failure recorded when it was failed or taken over.
static DIAGNOSE: Statement = Statement {
    sql: "SELECT (SELECT status::text FROM webhook.inbox WHERE claim_id = $1),
                 (SELECT error_message FROM webhook.inbox_failures WHERE claim_id = $1)
           WHERE EXISTS (SELECT FROM webhook.inbox WHERE claim_id = $1)
              OR EXISTS (SELECT FROM webhook.inbox_failures WHERE claim_id = $1)",
    arg_types: &[pg_sys::UUIDOID],
};

/// `webhook_complete` of a lease: an ordered event moves its entity's
/// watermark for the lease's consumer (see `ordering::advance`).
pub fn complete(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    result: Option<RawJsonb>,
    sql: Sql,
) -> Result<()> {
    let statement = match sql {
        Sql::Current | Sql::Release0_6 | Sql::Release0_4 => &COMPLETE,
        Sql::Release0_3 | Sql::Release0_2 => &COMPLETE_UNORDERED,
    };
    let Some(row) = statement.run(client, &[id.into(), result.into()])?.next() else {
        return Err(refusal(client, function, id)?);
    };
    let (Some(entity_key), Some(value)) = (row.get::<String>(4)?, row.get::<String>(5)?) else {
        return Ok(());
    };
    let provider: String = row.get(1)?.unwrap_or_default();
    let consumer: String = row.get(2)?.unwrap_or_default();
    let event_id: String = row.get(3)?.unwrap_or_default();
    ordering::advance(
        client,
        function,
        id,
        &provider,
        &consumer,
        &event_id,
        &Order { entity_key, value },
    )
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
    let attempt = match ATTEMPT.run(client, &[id.into()])?.next() {
        Some(row) => row.get::<i32>(1)?.unwrap_or(0),
        None => return Err(refusal(client, function, id)?),
    };
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    let dead = permanent || (max_attempts > 0 && attempt >= max_attempts);
    let delay =
        retry_in.unwrap_or_else(|| Interval::from_micros(super::backoff::delay_after(attempt, id)));
    // The fence is checked again by the UPDATE: a lease taken over since
    // the read above changes nothing.
    if FAIL
        .run(client, &[id.into(), err.into(), delay.into(), dead.into()])?
        .is_empty()
    {
        return Err(refusal(client, function, id)?);
    }
    Ok(())
}

/// `webhook_extend` of a lease: the new expiry.
pub fn extend(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    lease: Interval,
) -> Result<TimestampWithTimeZone> {
    match EXTEND.run(client, &[id.into(), lease.into()])?.next() {
        Some(row) => row
            .get::<TimestampWithTimeZone>(1)?
            .ok_or_else(|| WebhookError::Internal(format!("{function}: empty result"))),
        None => Err(refusal(client, function, id)?),
    }
}

/// Why a lease could not be finished. An id that is no lease either (nor a
/// delivery, which the caller looked for first) is unknown.
fn refusal(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
) -> Result<WebhookError> {
    let Some(row) = DIAGNOSE.run(client, &[id.into()])?.next() else {
        return Ok(WebhookError::UnknownDelivery {
            function,
            id: id.to_string(),
        });
    };
    let status: Option<String> = row.get(1)?;
    let error: Option<String> = row.get(2)?;
    Ok(match (status, error) {
        (_, Some(error)) if error == lease_expired!() => WebhookError::LeaseLost {
            function,
            id: id.to_string(),
            detail:
                "Its lease ran out: the event was leased again, or parked once out of attempts."
                    .into(),
        },
        (Some(status), _) => WebhookError::AlreadyFinished {
            function,
            id: id.to_string(),
            processing_status: match status.as_str() {
                // Failed, waiting for its next attempt.
                "ready" => "failed".into(),
                _ => status,
            },
        },
        (None, _) => WebhookError::AlreadyFinished {
            function,
            id: id.to_string(),
            processing_status: "failed".into(),
        },
    })
}
