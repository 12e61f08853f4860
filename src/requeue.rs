//! `webhook_requeue`: an operator puts a dead or failed event back, so the
//! next delivery of it (the provider's retry, or the operator replaying the
//! archived request) is claimed as a retry with a fresh attempt budget.
//!
//! A processed event is never requeued: that would process it twice. The
//! event lock is taken as for any other write to an event, so a requeue
//! never races a claim.

use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::input::{self, MAX_EVENT_ID_BYTES, MAX_PROVIDER_BYTES};
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::prelude::*;

const FUNCTION: &str = "webhook_requeue";

/// Requeue a dead or failed event.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_requeue(
    provider: Option<&str>,
    event_id: Option<&str>,
) -> std::result::Result<(), pg_sys::panic::ErrorReport> {
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let event_id = input::required_text(FUNCTION, "event_id", event_id, MAX_EVENT_ID_BYTES)?;
    EventLock::for_event(provider, event_id).acquire();
    Ok(Spi::connect_mut(|client| -> Result<()> {
        let requeued = REQUEUE.run(client, &[provider.into(), event_id.into()])?;
        if !requeued.is_empty() {
            return Ok(());
        }
        let status = STATUS.run(client, &[provider.into(), event_id.into()])?;
        match status.into_iter().next() {
            None => Err(WebhookError::UnknownEvent {
                function: FUNCTION,
                provider: provider.into(),
                event_id: event_id.into(),
            }),
            Some(row) => Err(WebhookError::NotRequeueable {
                function: FUNCTION,
                status: row.get::<String>(1)?.unwrap_or_default(),
            }),
        }
    })?)
}

static REQUEUE: Statement = Statement {
    sql: "UPDATE webhook.events
             SET status = 'failed',
                 attempts = 0,
                 requeues = requeues + 1
           WHERE provider = $1 AND event_id = $2 AND status IN ('dead', 'failed')
       RETURNING 1",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

static STATUS: Statement = Statement {
    sql: "SELECT status::text FROM webhook.events WHERE provider = $1 AND event_id = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};
