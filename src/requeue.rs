//! Requeueing, for operators: `webhook_requeue` puts one dead or failed
//! event back, `webhook_requeue_dead` every dead letter matching a filter.
//!
//! A claimed event gets a fresh attempt budget, and its next delivery (the
//! provider's retry, or the operator replaying the archived request) is
//! claimed as a retry. A queued event's dead consumers are ready again at
//! once, with a fresh budget, and listening workers are woken. Every
//! requeue is recorded in `webhook.requeues`: who, when, what it had
//! failed with.
//!
//! A processed event is never requeued: that would process it twice. The
//! event lock is taken as for any other write to an event, so a requeue
//! never races a claim; inbox rows are changed only through row locks.

use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::input::{self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES};
use crate::plans::Statement;
use crate::status::EventStatus;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

const FUNCTION: &str = "webhook_requeue";
const BULK: &str = "webhook_requeue_dead";

/// Requeue a dead or failed event; for a queued event, its dead consumers
/// (or only `consumer`'s).
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_requeue")]
#[search_path(pg_catalog, pg_temp)]
fn requeue_event(
    provider: Option<&str>,
    event_id: Option<&str>,
    consumer: default!(Option<&str>, "NULL"),
) -> std::result::Result<(), pg_sys::panic::ErrorReport> {
    requeue_checked(provider, event_id, consumer)
}

/// `webhook_requeue`'s arguments checked, then the requeue.
fn requeue_checked(
    provider: Option<&str>,
    event_id: Option<&str>,
    consumer: Option<&str>,
) -> std::result::Result<(), pg_sys::panic::ErrorReport> {
    crate::standby::refuse_writes(FUNCTION)?;
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let event_id = input::required_text(FUNCTION, "event_id", event_id, MAX_EVENT_ID_BYTES)?;
    let consumer = input::optional_text(FUNCTION, "consumer", consumer, MAX_PROVIDER_BYTES)?;
    Ok(Spi::connect_mut(|client| {
        requeue(client, provider, event_id, consumer)
    })?)
}

fn requeue(
    client: &mut SpiClient<'_>,
    provider: &str,
    event_id: &str,
    consumer: Option<&str>,
) -> Result<()> {
    EventLock::for_event(provider, event_id).acquire();
    let status = match STATUS
        .run(client, &[provider.into(), event_id.into()])?
        .next()
    {
        Some(row) => EventStatus::parse(&row.get::<String>(1)?.unwrap_or_default())?,
        None => {
            return Err(WebhookError::UnknownEvent {
                function: FUNCTION,
                provider: provider.into(),
                event_id: event_id.into(),
            })
        }
    };
    let requeued = if status == EventStatus::Queued {
        let parked =
            parked_by(REQUEUE_QUEUED.run(client, &one_event(provider, event_id, consumer))?)?;
        let any = !parked.is_empty();
        if any {
            hold_dead_letters(client, parked)?;
            crate::inbox::wake(client)?;
        }
        any
    } else if consumer.is_some() {
        return Err(WebhookError::InvalidArgument {
            function: FUNCTION,
            arg: "consumer",
            rule: "applies to queued events only: this event was claimed, not queued",
        });
    } else {
        let rows = REQUEUE_CLAIMED.run(client, &[provider.into(), event_id.into()])?;
        let any = !rows.is_empty();
        hold_dead_letters(client, parked_by(rows)?)?;
        any
    };
    if requeued {
        return Ok(());
    }
    let status = match status {
        EventStatus::Queued => consumers_standing(client, provider, event_id, consumer)?,
        other => other.as_str().into(),
    };
    Err(WebhookError::NotRequeueable {
        function: FUNCTION,
        status,
    })
}

/// Where a queued event's consumers (all, or `consumer`) stand: whether
/// every one of them finished it (processed it, skipped it as stale, or
/// filtered it out), and whether every one skipped it, or filtered it.
/// Labels compared as text: a release before filters has no `filtered`.
static CONSUMERS_DONE: Statement = Statement {
    sql: "SELECT pg_catalog.bool_and(status::text IN ('processed', 'stale', 'filtered')),
                 pg_catalog.bool_and(status = 'stale'),
                 pg_catalog.bool_and(status::text = 'filtered')
            FROM webhook.inbox
           WHERE delivery_id = (SELECT e.claim_id FROM webhook.events e
                                 WHERE e.provider = $1 AND e.event_id = $2)
             AND provider = $1 AND event_id = $2 AND ($3::text IS NULL OR consumer = $3)",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// A queued event that has no dead consumer to requeue, in words: its own
/// row only says it was queued.
fn consumers_standing(
    client: &mut SpiClient<'_>,
    provider: &str,
    event_id: &str,
    consumer: Option<&str>,
) -> Result<String> {
    let row = CONSUMERS_DONE
        .run(client, &[provider.into(), event_id.into(), consumer.into()])?
        .next();
    let (done, stale, filtered) = match row {
        Some(row) => (
            row.get::<bool>(1)?,
            row.get::<bool>(2)?,
            row.get::<bool>(3)?,
        ),
        None => (None, None, None),
    };
    Ok(match (done, stale, filtered) {
        (Some(true), Some(true), _) => "stale for every consumer".into(),
        (Some(true), _, Some(true)) => "filtered for every consumer".into(),
        (Some(true), _, _) => "processed by every consumer".into(),
        _ => "queued, with no dead consumer (ready or leased)".into(),
    })
}

/// REQUEUE_QUEUED's arguments for one event's dead consumers (all, or
/// `consumer`'s).
fn one_event<'a>(
    provider: &'a str,
    event_id: &'a str,
    consumer: Option<&'a str>,
) -> [pgrx::datum::DatumWithOid<'a>; 7] {
    let (none, no_time): (Option<&str>, Option<TimestampWithTimeZone>) = (None, None);
    [
        provider.into(),
        event_id.into(),
        none.into(),
        none.into(),
        no_time.into(),
        no_time.into(),
        consumer.into(),
    ]
}

/// Requeue every dead letter matching all the filters given: provider,
/// event type, error text (an ILIKE pattern), when the event arrived, and
/// for queued events the consumer. Returns how many were requeued.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_requeue_dead(
    provider: default!(Option<&str>, "NULL"),
    event_type: default!(Option<&str>, "NULL"),
    error_like: default!(Option<&str>, "NULL"),
    received_after: default!(Option<TimestampWithTimeZone>, "NULL"),
    received_before: default!(Option<TimestampWithTimeZone>, "NULL"),
    consumer: default!(Option<&str>, "NULL"),
) -> std::result::Result<i64, pg_sys::panic::ErrorReport> {
    crate::standby::refuse_writes(BULK)?;
    let provider = input::optional_text(BULK, "provider", provider, MAX_PROVIDER_BYTES)?;
    let event_type = input::optional_text(BULK, "event_type", event_type, MAX_EVENT_TYPE_BYTES)?;
    let consumer = input::optional_text(BULK, "consumer", consumer, MAX_PROVIDER_BYTES)?;
    Ok(Spi::connect_mut(|client| -> Result<i64> {
        let none: Option<&str> = None;
        let rows = REQUEUE_QUEUED.run(
            client,
            &[
                provider.into(),
                none.into(),
                event_type.into(),
                error_like.into(),
                received_after.into(),
                received_before.into(),
                consumer.into(),
            ],
        )?;
        let parked = parked_by(rows)?;
        let queued = parked.len() as i64;
        hold_dead_letters(client, parked)?;
        if queued > 0 {
            crate::inbox::wake(client)?;
        }
        if consumer.is_some() {
            return Ok(queued);
        }
        // Claimed events, one at a time under each one's event lock.
        let dead: Vec<(String, String)> = DEAD_CLAIMED
            .run(
                client,
                &[
                    provider.into(),
                    event_type.into(),
                    error_like.into(),
                    received_after.into(),
                    received_before.into(),
                ],
            )?
            .map(|row| {
                Ok((
                    row.get(1)?.unwrap_or_default(),
                    row.get(2)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<_>>()?;
        let mut claimed = 0;
        for (provider, event_id) in &dead {
            EventLock::for_event(provider, event_id).acquire();
            let rows = REQUEUE_CLAIMED.run(
                client,
                &[provider.as_str().into(), event_id.as_str().into()],
            )?;
            let parked = parked_by(rows)?;
            claimed += parked.len() as i64;
            hold_dead_letters(client, parked)?;
        }
        Ok(queued + claimed)
    })?)
}

/// The attempts whose failure parked what a requeue statement put back
/// (one row per event or inbox row requeued; NULL for a claimed event
/// that had failed without being parked).
fn parked_by(rows: crate::plans::Rows<'_>) -> Result<Vec<Option<pgrx::Uuid>>> {
    rows.map(|row| row.get::<pgrx::Uuid>(1)).collect()
}

/// The metrics count a dead letter off the dead row its failure parked,
/// which a requeue puts back to work: keep those no rollup counted yet.
/// (Skipped against the SQL of a release before it: that release counted
/// this way too.)
fn hold_dead_letters(client: &mut SpiClient<'_>, parked: Vec<Option<pgrx::Uuid>>) -> Result<()> {
    let ids: Vec<pgrx::Uuid> = parked.into_iter().flatten().collect();
    if ids.is_empty() || !METRICS_HOLD.present(client)? {
        return Ok(());
    }
    HOLD_DEAD_LETTERS.run(client, &[ids.into()])?;
    Ok(())
}

static METRICS_HOLD: crate::installed::Function =
    crate::installed::Function::new("webhook._metrics_hold(text, uuid[])");

static HOLD_DEAD_LETTERS: Statement = Statement {
    sql: "SELECT webhook._metrics_hold('dead_letter', $1)",
    arg_types: &[pg_sys::UUIDARRAYOID],
};

static STATUS: Statement = Statement {
    sql: "SELECT status::text FROM webhook.events WHERE provider = $1 AND event_id = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// A dead or failed claimed event back to failed, with a fresh budget,
/// recorded. Runs under the event lock.
static REQUEUE_CLAIMED: Statement = Statement {
    sql: "WITH old AS (
              SELECT provider, event_id, attempts, last_error,
                     CASE WHEN status = 'dead' THEN claim_id END AS parked_by
                FROM webhook.events
               WHERE provider = $1 AND event_id = $2 AND status IN ('dead', 'failed')
          ), requeued AS (
              UPDATE webhook.events e
                 SET status = 'failed', attempts = 0, requeues = e.requeues + 1
               WHERE e.provider = $1 AND e.event_id = $2 AND e.status IN ('dead', 'failed')
          )
          , logged AS (
              INSERT INTO webhook.requeues (provider, event_id, consumer, attempts, last_error)
              SELECT provider, event_id, NULL, attempts, last_error FROM old
          )
          SELECT parked_by FROM old",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Dead inbox rows matching every filter given (provider, event id, event
/// type, error ILIKE, arrival after / before, consumer), ready again now
/// in the order first queued, with a fresh budget, each requeue recorded.
static REQUEUE_QUEUED: Statement = Statement {
    sql: "WITH old AS (
              SELECT ctid AS row_id, provider, event_id, consumer, attempts, last_error, claim_id,
                     queued_at, order_value, delivery_id
                FROM webhook.inbox
               WHERE status = 'dead'
                 AND ($1::text IS NULL OR provider = $1)
                 AND ($2::text IS NULL OR event_id = $2)
                 AND ($3::text IS NULL OR event_type = $3)
                 AND ($4::text IS NULL OR last_error ILIKE $4)
                 AND ($5::timestamptz IS NULL OR queued_at >= $5)
                 AND ($6::timestamptz IS NULL OR queued_at < $6)
                 AND ($7::text IS NULL OR consumer = $7)
                 FOR UPDATE
          ), requeued AS (
              -- By row id: a join back on the key could be planned as a
              -- scan of the whole inbox. Due in the order first queued.
              UPDATE webhook.inbox i
                 SET status = 'ready', attempts = 0, requeues = i.requeues + 1,
                     run_at = webhook._due_in_turn((SELECT pg_catalog.clock_timestamp()), o.n, interval '0')
                FROM (SELECT row_id, pg_catalog.row_number() OVER (ORDER BY queued_at, order_value, delivery_id, consumer) AS n
                        FROM old) o
               WHERE i.ctid = ANY (ARRAY(SELECT old.row_id FROM old)) AND i.ctid = o.row_id
          )
          , logged AS (
              INSERT INTO webhook.requeues (provider, event_id, consumer, attempts, last_error)
              SELECT provider, event_id, consumer, attempts, last_error FROM old
          )
          SELECT claim_id FROM old",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TEXTOID,
    ],
};

/// Dead claimed events matching the filters.
static DEAD_CLAIMED: Statement = Statement {
    sql: "SELECT provider, event_id
            FROM webhook.events
           WHERE status = 'dead'
             AND ($1::text IS NULL OR provider = $1)
             AND ($2::text IS NULL OR event_type = $2)
             AND ($3::text IS NULL OR last_error ILIKE $3)
             AND ($4::timestamptz IS NULL OR first_seen_at >= $4)
             AND ($5::timestamptz IS NULL OR first_seen_at < $5)",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TIMESTAMPTZOID,
    ],
};
