//! The durable inbox: acknowledge first, process later, lose nothing.
//!
//! In inbox mode a verified delivery is archived and queued in one call
//! (`webhook_receive` with inbox mode, or `webhook_enqueue`) and the
//! provider is answered 2xx at once, for a new event and for every
//! duplicate. The event's row in `webhook.events` says `queued` — dedup
//! stays exactly where it was — and `webhook.inbox` gets one row per
//! consumer. Workers in any language lease rows with `webhook_next`, do the
//! work, and finish them with the same `webhook_complete`, `webhook_fail`
//! and `webhook_extend` a claim uses, fenced the same way: a worker whose
//! lease was taken over is refused with SQLSTATE 55006, so its transaction
//! rolls back instead of committing the work twice.
//!
//! * here — queueing an event, and waking workers;
//! * `enqueue` — the SQL function `webhook_enqueue`;
//! * `next` — the SQL function `webhook_next`, and `pick`, the statements
//!   it leases with;
//! * `lease` — finishing, failing and extending a lease;
//! * `flow` — pauses, quarantines, caps, rates and circuit breakers:
//!   what a consumer may lease;
//! * `heads` — where each queue's ready rows start, so that a pick does
//!   not walk the entries its earlier leases left behind;
//! * `backoff` — when a failed attempt is tried again.

pub mod backoff;
pub(crate) mod enqueue;
pub mod flow;
mod heads;
pub mod lease;
mod next;
mod pick;

use crate::archive::archive_insert;
use crate::claim::{Delivery, Outcome, DELIVERY_ARGUMENTS};
use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::plans::Statement;
use crate::status::ClaimStatus;
use pgrx::spi::SpiClient;

/// Queueing an event, first step: insert it if it is new (one row
/// returned). The rest is `QUEUE` for a new event and `DUPLICATE` for one
/// seen before, statements of their own: a statement's executor start-up
/// is paid for every node of its plan, run or not, and the branch a
/// delivery does not take cost more to set up than a statement costs to
/// run (see `claim::statements::INSERT_NEW`). The arguments of all three
/// are a claim's (`Delivery::arguments`); the lease, `$9`, is not used.
static INSERT_QUEUED: Statement = Statement {
    sql: "INSERT INTO webhook.events
              (provider, event_id, event_type, status, attempts, claim_id, payload_hash,
               entity_key, order_value)
          VALUES ($1, $2, $3, 'queued', 0, $4, $10, $11, $12::numeric)
          ON CONFLICT (provider, event_id) DO NOTHING
          RETURNING 1",
    arg_types: DELIVERY_ARGUMENTS,
};

/// A new event's inbox rows, one per consumer of its provider, and the
/// delivery's archive row.
static QUEUE: Statement = Statement {
    sql: concat!(
        "WITH queued AS (
              INSERT INTO webhook.inbox (provider, event_id, consumer, event_type, delivery_id,
                                         entity_key, order_value)
              SELECT $1, $2, c.consumer, $3, $4, $11, $12::numeric
                FROM pg_catalog.unnest(coalesce(
                         (SELECT NULLIF(p.consumers, '{}') FROM webhook.providers p WHERE p.name = $1),
                         '{default}')) AS c(consumer)
          )",
        archive_insert!(),
        "VALUES ($4, $1, $2, $3, $5, $6, $7, $8, 'queued', false, $13, NULL)"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// A delivery of an event seen before: archived as a duplicate. Returns
/// the event in the shape of the claim statements (`EventState::read`).
static DUPLICATE: Statement = Statement {
    sql: concat!(
        "WITH existing AS (
              SELECT e.status, e.attempts, e.claim_id, e.result, e.payload_hash
                FROM webhook.events e
               WHERE e.provider = $1 AND e.event_id = $2
          ), archived AS (",
        archive_insert!(),
        "     SELECT $4, $1, $2, $3, $5, $6, $7, $8, 'duplicate'::webhook.claim_status,
                     x.payload_hash IS DISTINCT FROM $10, $13, NULL
                FROM existing x
          )
          SELECT 'duplicate', x.status::text, x.attempts, x.claim_id, x.result, x.payload_hash
            FROM existing x"
    ),
    arg_types: DELIVERY_ARGUMENTS,
};

/// Store a validated delivery in the inbox: `queued` when its event is
/// new, `duplicate` for any event seen before (queued, or claimed in the
/// one-transaction mode). Either way the delivery is stored durably once
/// the caller commits, so the provider may be answered 2xx.
///
/// It waits for a concurrent claim or intake of the same event to end
/// rather than answering at once: only after that transaction commits is
/// a duplicate safe to acknowledge (had it rolled back, acknowledging the
/// duplicate would lose the event). Intake transactions are short.
pub fn enqueue(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Outcome> {
    let id = crate::uuid::new_v7();
    if !crate::gucs::ARCHIVE_DUPLICATES.get() {
        // A committed event row is stored for good: safe to acknowledge.
        if let Some(state) = crate::claim::committed_state(client, d.provider, d.event_id)? {
            return Ok(state.outcome(id, ClaimStatus::Duplicate));
        }
    }
    let digest = d.payload.digest();
    let archived =
        crate::compress::for_archive(client, &d.payload, d.raw_body, d.headers.as_ref())?;
    // Every write to an event row happens under its lock (see event_lock):
    // a claim that holds it then never meets this insert uncommitted.
    crate::event_lock::check_budget(d.function)?;
    EventLock::for_event(d.provider, d.event_id).acquire();
    // Ordered events are judged when a worker would lease them: each
    // consumer has its own watermark.
    let args = d.arguments(id, archived, &digest);
    if !INSERT_QUEUED.run(client, &args)?.is_empty() {
        QUEUE.run(client, &args)?;
        wake(client)?;
        return Ok(Outcome {
            id,
            status: ClaimStatus::Queued,
            attempts: 0,
            result: None,
            tie: false,
        });
    }
    let state = crate::claim::EventState::read(DUPLICATE.run(client, &args)?)?
        .ok_or_else(|| WebhookError::Internal("a queued event vanished under its lock".into()))?;
    Ok(state.outcome(id, ClaimStatus::Duplicate))
}

/// Set aside as filtered the rows of an event just queued that a filter
/// does not take (`receive::filters`): every consumer's, with the
/// provider's reason ($2), or those named ($3) with theirs ($4).
/// `webhook_replay(statuses => '{filtered}')` can queue them again.
static FILTER: Statement = Statement {
    sql: "UPDATE webhook.inbox i
             SET status = 'filtered', processed_at = pg_catalog.now(),
                 last_error = coalesce($2, ($4::text[])[pg_catalog.array_position($3::text[], i.consumer)])
           WHERE i.delivery_id = $1 AND ($2 IS NOT NULL OR i.consumer = ANY ($3::text[]))",
    arg_types: &[
        pgrx::pg_sys::UUIDOID,
        pgrx::pg_sys::TEXTOID,
        pgrx::pg_sys::TEXTARRAYOID,
        pgrx::pg_sys::TEXTARRAYOID,
    ],
};

/// `enqueue`, for a delivery some filter does not take: the provider's
/// (`event`: why; then the event is answered and archived `filtered`) or
/// some consumers' (with why). A duplicate is answered as usual: its rows
/// stay as the first delivery left them.
pub fn enqueue_filtered(
    client: &mut SpiClient<'_>,
    d: &Delivery<'_>,
    event: Option<&str>,
    consumers: &[(String, String)],
) -> Result<Outcome> {
    let outcome = enqueue(client, d)?;
    if outcome.status != ClaimStatus::Queued {
        return Ok(outcome);
    }
    let (names, reasons): (Vec<&str>, Vec<&str>) = consumers
        .iter()
        .map(|(consumer, reason)| (consumer.as_str(), reason.as_str()))
        .unzip();
    FILTER.run(
        client,
        &[
            outcome.id.into(),
            event.into(),
            names.into(),
            reasons.into(),
        ],
    )?;
    match event {
        Some(reason) => {
            crate::archive::mark_filtered(client, outcome.id, reason)?;
            Ok(Outcome {
                status: ClaimStatus::Filtered,
                ..outcome
            })
        }
        None => Ok(outcome),
    }
}

/// Wake workers that `LISTEN webhook_inbox`: one notification, without a
/// payload, from at most one transaction at a time.
///
/// A notifying transaction takes a database-wide lock at commit that
/// serializes it with every other notifying transaction, WAL flush
/// included. So only the transaction that wins a try-lock notifies; the
/// others commit in parallel, their events found by the next `webhook_next`
/// of a worker woken by the winner or by its poll. PostgreSQL folds a
/// transaction's identical notifications into one.
pub fn wake(client: &mut SpiClient<'_>) -> Result<()> {
    if !crate::gucs::INBOX_NOTIFY.get() || !EventLock::for_wake_up().try_acquire() {
        return Ok(());
    }
    NOTIFY.run(client, &[])?;
    Ok(())
}

static NOTIFY: Statement = Statement {
    sql: "SELECT pg_catalog.pg_notify('webhook_inbox', '')",
    arg_types: &[],
};
