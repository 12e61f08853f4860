//! Finishing a claim: `webhook_complete`, `webhook_fail`, and the lease
//! heartbeat `webhook_extend`; for an inbox lease they hand over to
//! `inbox::lease`.
//!
//! Ownership is the rule for all three: the delivery must have been answered
//! `claimed` or `retry`, must still be PENDING, and must still be the
//! event's current claim. A lease that ran out but was not taken over is
//! not lost: nobody else has done the work, so finishing it is still right.
//! Once another delivery took the event over, every call is refused with
//! SQLSTATE 55006, so the caller's transaction rolls back its business
//! writes instead of committing them a second time.

use crate::claim::owned_status;
use crate::errors::{Owner, PgResult, Result, Standing, WebhookError};
use crate::event_lock::EventLock;
use crate::fence::Fence;
use crate::inbox;
use crate::input;
use crate::jsonb::RawJsonb;
use crate::ordering::{self, Order};
use crate::plans::{Row, Statement};
use crate::status::{ClaimStatus, EventStatus};
use pgrx::datum::{DatumWithOid, Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Mark the delivery's event processed. Call it in the transaction that made
/// the business writes (one-transaction use), or after the side effect
/// succeeded (two-phase use). `result`, if given, is returned to every later
/// duplicate, so it can be answered exactly as the first delivery was.
/// Given a lease from `webhook_next`, it marks that consumer's inbox row
/// processed.
///
/// An ordered event (see `ordering`) moves its entity's watermark here,
/// and is refused with SQLSTATE 40001 if a newer event of the entity
/// completed first.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_complete")]
#[search_path(pg_catalog, pg_temp)]
fn complete_event(
    id: Option<pgrx::Uuid>,
    result: default!(Option<RawJsonb>, "NULL"),
) -> PgResult<()> {
    const F: &str = "webhook_complete";
    crate::standby::refuse_writes(F)?;
    let id = input::required(F, "id", id)?;
    if let Some(result) = &result {
        if result.size() > MAX_RESULT_BYTES {
            return Err(WebhookError::ArgumentTooLong {
                function: F,
                arg: "result",
                limit: MAX_RESULT_BYTES,
                actual: result.size(),
            }
            .into());
        }
    }
    Spi::connect_mut(|client| match take_ownership(client, F, id)? {
        // A claim that completes on commit completed its event already,
        // and moved its watermark: this stores the result.
        Some(owned) if owned.completed_here => finish(
            client,
            F,
            id,
            &owned,
            &COMPLETE,
            vec![result.into()],
            |_| Ok(()),
        ),
        Some(owned) => {
            let order = finish(
                client,
                F,
                id,
                &owned,
                &COMPLETE,
                vec![result.into()],
                |row| {
                    Ok(row
                        .get::<String>(2)?
                        .zip(row.get::<String>(3)?)
                        .map(|(entity_key, value)| Order { entity_key, value }))
                },
            )?;
            match order {
                Some(order) => ordering::advance(
                    client,
                    F,
                    id,
                    &owned.provider,
                    ordering::CLAIM_CONSUMER,
                    &owned.event_id,
                    &order,
                ),
                None => Ok(()),
            }
        }
        None => inbox::lease::complete(client, F, id, result),
    })?;
    crate::session_claims::forget(id);
    Ok(())
}

/// Longest failure message kept; the rest is cut with a marker.
const MAX_ERROR_BYTES: usize = 2048;

/// A stored result is an answer, not an archive: 64 kB is plenty.
const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Record a failed attempt. A claimed delivery's event is released so that
/// its next delivery is answered `retry`: in one-transaction use, roll back
/// to a savepoint taken after the claim first, so the failure is recorded
/// without the failed work. A lease's event is ready again after
/// `retry_in`, or after the backoff (see `inbox::backoff`). `permanent`
/// parks the event as dead at once: retrying cannot help.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_fail")]
#[search_path(pg_catalog, pg_temp)]
pub(crate) fn fail_attempt(
    id: Option<pgrx::Uuid>,
    err: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    permanent: default!(Option<bool>, false),
) -> PgResult<()> {
    const F: &str = "webhook_fail";
    crate::standby::refuse_writes(F)?;
    let id = input::required(F, "id", id)?;
    let err = input::required(F, "err", err)?;
    let permanent = input::required(F, "permanent", permanent)?;
    check_retry_in(F, retry_in)?;
    // Kept forever with the event: cut, not refused, since failing must
    // not fail.
    let err = input::truncated(err, MAX_ERROR_BYTES);
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    Spi::connect_mut(|client| match take_ownership(client, F, id)? {
        Some(_) if retry_in.is_some() => Err(WebhookError::InvalidArgument {
            function: F,
            arg: "retry_in",
            rule: RETRY_IN_CLAIMED,
        }),
        Some(owned) => finish(
            client,
            F,
            id,
            &owned,
            &FAIL,
            vec![err.as_ref().into(), max_attempts.into(), permanent.into()],
            |_| Ok(()),
        ),
        None => inbox::lease::fail(client, F, id, &err, retry_in, permanent),
    })?;
    crate::session_claims::forget(id);
    Ok(())
}

/// Most leases one batch call finishes: as many as `webhook_next` hands
/// out at once.
const MAX_BATCH: usize = 1000;

/// The leases of a batch call: 1 to 1000 ids, none NULL, each once.
fn batch_of_leases(
    function: &'static str,
    ids: Option<Vec<Option<pgrx::Uuid>>>,
) -> Result<Vec<pgrx::Uuid>> {
    let ids = input::required(function, "ids", ids)?;
    if ids.is_empty() || ids.len() > MAX_BATCH {
        return Err(WebhookError::InvalidArgument {
            function,
            arg: "ids",
            rule: "must hold 1 to 1000 leases",
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    let mut leases = Vec::with_capacity(ids.len());
    for id in ids {
        let id = input::required(function, "ids", id)?;
        if seen.insert(*id.as_bytes()) {
            leases.push(id);
        }
    }
    Ok(leases)
}

/// `webhook_complete` for a batch of inbox leases from `webhook_next`, in
/// one call: each is fenced as alone (a lease taken over is refused with
/// 55006, one already finished with 55000, an unknown id with P0002), and
/// one refusal refuses the whole call, so that the transaction holding
/// the batch's work rolls it back. Ordered events move their watermarks.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_complete_batch(ids: Option<Vec<Option<pgrx::Uuid>>>) -> PgResult<()> {
    const F: &str = "webhook_complete_batch";
    crate::standby::refuse_writes(F)?;
    let ids = batch_of_leases(F, ids)?;
    Ok(Spi::connect_mut(|client| {
        inbox::lease::complete_batch(client, F, &ids)
    })?)
}

/// `webhook_fail` for a batch of inbox leases, in one call: each is ready
/// again after `retry_in` or its own backoff, or dead when `permanent` or
/// out of attempts; refused whole like `webhook_complete_batch`.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_fail_batch(
    ids: Option<Vec<Option<pgrx::Uuid>>>,
    err: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    permanent: default!(Option<bool>, false),
) -> PgResult<()> {
    const F: &str = "webhook_fail_batch";
    crate::standby::refuse_writes(F)?;
    let ids = batch_of_leases(F, ids)?;
    let err = input::required(F, "err", err)?;
    let permanent = input::required(F, "permanent", permanent)?;
    check_retry_in(F, retry_in)?;
    let err = input::truncated(err, MAX_ERROR_BYTES);
    Ok(Spi::connect_mut(|client| {
        inbox::lease::fail_batch(client, F, &ids, &err, retry_in, permanent)
    })?)
}

/// `retry_in`: not negative, and at most `webhook.backoff_max`, the
/// longest delay between two attempts, which is the DBA's to set: an
/// application cannot hide an event for a century.
fn check_retry_in(function: &'static str, retry_in: Option<Interval>) -> Result<()> {
    if retry_in.is_some_and(|r| r.as_micros() < 0) {
        return Err(WebhookError::InvalidArgument {
            function,
            arg: "retry_in",
            rule: "must not be negative",
        });
    }
    let longest = i128::from(crate::gucs::BACKOFF_MAX.get()) * 1000;
    if retry_in.is_some_and(|r| r.as_micros() > longest) {
        return Err(WebhookError::InvalidArgument {
            function,
            arg: "retry_in",
            rule: "must not exceed webhook.backoff_max",
        });
    }
    Ok(())
}

/// Why `retry_in` is refused for a claimed delivery.
const RETRY_IN_CLAIMED: &str =
    "applies to inbox leases only: a claimed delivery is retried by its provider's next delivery";

/// Renew the lease of a live claim or inbox lease, measured from now.
/// Returns the new expiry. Long work calls it as a heartbeat.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_extend(
    id: Option<pgrx::Uuid>,
    lease: Option<Interval>,
) -> PgResult<TimestampWithTimeZone> {
    const F: &str = "webhook_extend";
    crate::standby::refuse_writes(F)?;
    let id = input::required(F, "id", id)?;
    let lease = input::lease(F, "lease", Some(input::required(F, "lease", lease)?))?;
    Ok(Spi::connect_mut(|client| {
        match take_ownership(client, F, id)? {
            Some(owned) if owned.completed_here => Err(WebhookError::NoLease {
                function: F,
                id: id.to_string(),
            }),
            Some(owned) => finish(client, F, id, &owned, &EXTEND, vec![lease.into()], |row| {
                row.get::<TimestampWithTimeZone>(1)?
                    .ok_or_else(|| WebhookError::Internal(format!("{F}: empty result")))
            }),
            None => inbox::lease::extend(client, F, id, lease),
        }
    })?)
}

/// Run one of the finishing statements for a delivery that may finish its
/// event (`take_ownership`), with arguments (id, provider, event_id,
/// completed_here, extra…), fenced (see `fence`): it returns one row when
/// it changed the event, read by `read`, and none when the delivery may no
/// longer finish it: then the error says why.
fn finish<T>(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    owned: &Owned,
    statement: &'static Statement,
    extra: Vec<DatumWithOid<'_>>,
    read: impl FnOnce(&Row<'_>) -> Result<T>,
) -> Result<T> {
    let mut args: Vec<DatumWithOid<'_>> = vec![
        id.into(),
        owned.provider.as_str().into(),
        owned.event_id.as_str().into(),
        owned.completed_here.into(),
    ];
    args.extend(extra);
    let fence = Fence {
        function,
        owner: Owner::Delivery,
        id,
    };
    fence.update(client, statement, &args, read, |client| {
        standing(client, id, owned)
    })
}

static LOOKUP: Statement = Statement {
    sql: "SELECT provider, event_id, claim_status::text FROM webhook.delivery_log WHERE id = $1",
    arg_types: &[pg_sys::UUIDOID],
};

// The event row alone says whether a delivery may still finish: it is the
// event's current claim (claim_id) and the event is still processing. A
// failed, superseded or completed delivery fails one of the two. The one
// exception is a claim that completes on commit, in its own transaction:
// its event is processed already, and is still its to finish (`$4`, true).

/// Mark the event processed, returning its entity and order value.
static COMPLETE: Statement = Statement {
    sql: concat!(
        "UPDATE webhook.events
            SET status = 'processed',
                processed_at = pg_catalog.now(),
                lease_expires_at = NULL,
                result = $5
          WHERE provider = $2 AND event_id = $3
            AND claim_id = $1 AND status = ",
        owned_status!("$4"),
        "
      RETURNING true, entity_key, order_value::text"
    ),
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::BOOLOID,
        pg_sys::JSONBOID,
    ],
};

static FAIL: Statement = Statement {
    sql: concat!(
        "WITH event AS (
              UPDATE webhook.events
                 -- Permanent, or out of attempts: parked as dead, not retried again.
                 SET status = CASE WHEN $7 OR ($6 > 0 AND attempts >= $6) THEN 'dead' ELSE 'failed' END::webhook.event_status,
                     last_error = $5,
                     lease_expires_at = NULL,
                     processed_at = NULL
               WHERE provider = $2 AND event_id = $3
                 AND claim_id = $1 AND status = ",
        owned_status!("$4"),
        "
              RETURNING 1
          )
          INSERT INTO webhook.delivery_failures (delivery_id, error_message)
          SELECT $1, $5 FROM event
       RETURNING true"
    ),
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::BOOLOID,
        pg_sys::TEXTOID,
        pg_sys::INT4OID,
        pg_sys::BOOLOID,
    ],
};

/// Never for a claim that completes on commit (`$4` is false): it holds
/// no lease.
static EXTEND: Statement = Statement {
    sql: "UPDATE webhook.events
             SET lease_expires_at = pg_catalog.clock_timestamp() + $5
           WHERE provider = $2 AND event_id = $3
             AND claim_id = $1 AND status = 'processing' AND NOT $4
       RETURNING lease_expires_at",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::BOOLOID,
        pg_sys::INTERVALOID,
    ],
};

/// Why a finishing call found nothing to change, read after the lock:
/// whether the delivery exists (a claim rolled back to a savepoint does
/// not), who owns its event now, and whether this delivery's attempt
/// failed. Planned with the id in hand, so that it reads one day of the
/// archive.
static DIAGNOSE: Statement = Statement {
    sql: "SELECT EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = $1),
                 e.claim_id, e.status::text, e.attempts,
                 EXISTS (SELECT FROM webhook.delivery_failures f WHERE f.delivery_id = $1)
            FROM (VALUES (1)) AS one (x)
            LEFT JOIN webhook.events e ON e.provider = $2 AND e.event_id = $3",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID, pg_sys::TEXTOID],
};

struct Owned {
    provider: String,
    event_id: String,
    /// The delivery's claim completes on commit and wrote its event as
    /// processed in this very transaction.
    completed_here: bool,
}

/// Check the delivery may finish its event, then take the event lock
/// (waiting if a competing claim holds it, so its outcome is seen). None:
/// `id` is no delivery, so it may be an inbox lease.
fn take_ownership(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
) -> Result<Option<Owned>> {
    if let Some(claimed) = crate::session_claims::get(id) {
        // Claimed by this session, maybe as another role (SET ROLE).
        crate::scopes::check_provider(client, function, "id", &claimed.provider)?;
        EventLock::for_event(&claimed.provider, &claimed.event_id).acquire();
        return Ok(Some(Owned {
            completed_here: claimed.completes_in_this_transaction(),
            provider: claimed.provider,
            event_id: claimed.event_id,
        }));
    }
    if !crate::uuid::may_be_delivery(&id) {
        return Ok(None);
    }
    let rows = LOOKUP.run_pruned(client, &[id.into()])?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    let provider: String = row.get(1)?.unwrap_or_default();
    let event_id: String = row.get(2)?.unwrap_or_default();
    let claim_status = ClaimStatus::parse(&row.get::<String>(3)?.unwrap_or_default())?;
    crate::scopes::check_provider(client, function, "id", &provider)?;
    if !claim_status.owns_event() {
        return Err(WebhookError::NotOwner {
            function,
            id: id.to_string(),
            claim_status: claim_status.as_str().into(),
        });
    }
    EventLock::for_event(&provider, &event_id).acquire();
    // A claim that completes on commit is finished in its own transaction
    // only, by this session, which remembers it (`session_claims`): found
    // here, it is finished already.
    Ok(Some(Owned {
        provider,
        event_id,
        completed_here: false,
    }))
}

/// Where a delivery stands whose finishing statement changed nothing.
fn standing(client: &mut SpiClient<'_>, id: pgrx::Uuid, owned: &Owned) -> Result<Standing> {
    let rows = DIAGNOSE.run_pruned(
        client,
        &[
            id.into(),
            owned.provider.as_str().into(),
            owned.event_id.as_str().into(),
        ],
    )?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| WebhookError::Internal("diagnosis returned no row".into()))?;
    if row.get::<bool>(1)? != Some(true) {
        // Claimed in this session, then rolled back (to a savepoint).
        return Ok(Standing::Unknown);
    }
    let owner: Option<pgrx::Uuid> = row.get(2)?;
    let Some(status) = row.get::<String>(3)? else {
        return Ok(Standing::Lost {
            detail: "The event row no longer exists.".into(),
        });
    };
    let status = EventStatus::parse(&status)?;
    let attempts = row.get::<i32>(4)?.unwrap_or(0);
    let failed = row.get::<bool>(5)?.unwrap_or(false);
    if owner != Some(id) {
        return Ok(Standing::Lost {
            // Never the new owner's id: a claim id is all it takes to
            // complete or fail that claim.
            detail: format!(
                "Another delivery took the event over (attempt {attempts}, status {}).",
                status.as_str()
            ),
        });
    }
    // Still the event's claim: it finished, in the archive's words
    // (`webhook.deliveries.processing_status`).
    let finished = match status {
        _ if failed => "FAILED",
        EventStatus::Processed => "PROCESSED",
        other => other.as_str(),
    };
    Ok(Standing::Finished {
        status: finished.into(),
    })
}
