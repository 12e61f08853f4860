//! `webhook_claim`: decide, without waiting, who processes a delivery.
//!
//! The outcome of a claim, for the caller:
//!
//! | status        | claimed | caller does                                   |
//! |---------------|---------|-----------------------------------------------|
//! | `claimed`     | true    | the work, then `webhook_complete`             |
//! | `retry`       | true    | the same: an earlier attempt failed or expired |
//! | `duplicate`   | false   | nothing; answer 2xx                           |
//! | `in_progress` | false   | nothing; answer non-2xx (409) so it comes back |
//! | `dead`        | false   | nothing; answer 2xx: the event failed `webhook.max_attempts` times and waits for an operator |
//! | `stale`       | false   | nothing; answer 2xx: a newer event of the same entity was processed (see `ordering`) |
//! | `filtered`    | false   | nothing; answer 2xx: the provider's filter does not take it (`webhook_receive`) |
//!
//! * `api` — the `webhook_claim` SQL functions and their arguments;
//! * `answer` — the outcome, and the event's state as read back;
//! * `statements` — the SQL of the claim path;
//! * here — the state machine: claim a new event, answer one that is
//!   finished or held elsewhere, take over one that failed or expired.

mod answer;
pub(crate) mod api;
mod statements;
pub(crate) use statements::owned_status;

pub use answer::{EventState, Outcome};
pub(crate) use statements::DELIVERY_ARGUMENTS;

use crate::archive::{self, Entry};
use crate::compress::Archived;
use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::jsonb::RawJsonb;
use crate::ordering::{self, Order, Verdict};
use crate::session_claims;
use crate::status::{ClaimStatus, EventStatus};
use pgrx::datum::{DatumWithOid, Interval};
use pgrx::spi::SpiClient;
use statements::{
    ANSWER_EXISTING, CLAIMED, CLAIMED_UNMARKED, INSERT_NEW, INSPECT, INSPECT_LOCKED, MARK_FILTERED,
    MARK_STALE, OBSERVE, PARK_AS_DEAD, RECORD_LOST_LEASE, TAKE_OVER,
};

/// One delivery, validated, as the claim writes it.
pub struct Delivery<'a> {
    /// The SQL function that was called, for errors.
    pub function: &'static str,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub payload: RawJsonb,
    pub raw_body: Option<&'a [u8]>,
    pub signature: Option<&'a str>,
    pub headers: Option<RawJsonb>,
    /// How long the claim owns the event before another delivery may take
    /// it over; None for a claim that completes on commit, which needs no
    /// lease: its transaction holds the event until it ends, and its commit
    /// is the event's completion.
    pub lease: Option<Interval>,
    /// Where the event sits in its entity's order, for a provider
    /// registered with ordering (`webhook_receive` only: it read them
    /// from the body it verified).
    pub order: Option<&'a Order>,
    /// The fingerprint of the key that verified it (`webhook_receive`).
    pub verified_by: Option<&'a str>,
}

impl<'a> Delivery<'a> {
    /// The claim writes the event as processed, so that committing the
    /// claim's transaction completes it.
    pub fn completes_on_commit(&self) -> bool {
        self.lease.is_none()
    }

    /// The arguments of every statement that writes the event and archives
    /// the delivery (`DELIVERY_ARGUMENTS`).
    pub(crate) fn arguments<'b>(
        &'b self,
        id: pgrx::Uuid,
        archived: Archived,
        digest: &'b [u8],
    ) -> [DatumWithOid<'b>; 13] {
        [
            self.provider.into(),
            self.event_id.into(),
            self.event_type.into(),
            id.into(),
            archived.payload.into(),
            archived.raw_body.into(),
            self.signature.into(),
            archived.headers.into(),
            self.lease.into(),
            digest.into(),
            self.order.map(|o| o.entity_key.as_str()).into(),
            self.order.map(|o| o.value.as_str()).into(),
            self.verified_by.into(),
        ]
    }

    /// The delivery's archive row, answered `status`.
    fn entry(&self, id: pgrx::Uuid, archived: Archived, status: ClaimStatus) -> Entry<'a> {
        Entry {
            id,
            provider: self.provider,
            event_id: self.event_id,
            event_type: self.event_type,
            archived,
            signature: self.signature,
            status,
            payload_mismatch: false,
            verified_by: self.verified_by,
        }
    }
}

/// Claim a validated delivery: the shared core of webhook_claim and
/// webhook_receive.
pub fn claim(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Outcome> {
    let id = crate::uuid::new_v7();
    if !crate::gucs::ARCHIVE_DUPLICATES.get() {
        // Processed is final (requeue refuses it), so a committed
        // 'processed' needs no lock to be answered, and nothing is written.
        if let Some(state) = committed_state(client, d.provider, d.event_id)? {
            if state.answer == Some(ClaimStatus::Duplicate) {
                return Ok(state.outcome(id, ClaimStatus::Duplicate));
            }
        }
    }
    let digest = d.payload.digest();
    let archived =
        crate::compress::for_archive(client, &d.payload, d.raw_body, d.headers.as_ref())?;
    crate::event_lock::check_budget(d.function)?;
    let lock = EventLock::for_event(d.provider, d.event_id);

    if !lock.try_acquire() {
        // Another transaction is working on this event right now. Its
        // committed state still tells a finished or dead event apart.
        let rows = OBSERVE.run(client, &d.arguments(id, archived, &digest))?;
        return Ok(match EventState::read(rows)? {
            Some(state) => {
                let answer = state.answer.unwrap_or(ClaimStatus::InProgress);
                state.outcome(id, answer)
            }
            None => Outcome {
                id,
                status: ClaimStatus::InProgress,
                attempts: 0,
                result: None,
                tie: false,
            },
        });
    }

    // An ordered event is judged against its entity's watermark first.
    let mut tie = false;
    if let Some(order) = d.order {
        match ordering::judge(
            client,
            d.provider,
            ordering::CLAIM_CONSUMER,
            d.event_id,
            order,
        )? {
            Verdict::Fresh => {}
            Verdict::Tie => tie = true,
            Verdict::Stale { tie, reason } => {
                if let Some(outcome) = skip_stale(client, d, id, archived, &digest, tie, &reason)? {
                    return Ok(outcome);
                }
            }
        }
    }

    let args = d.arguments(id, archived, &digest);
    if !INSERT_NEW.run(client, &args)?.is_empty() {
        let archive = if crate::archive::MARKS_COMPLETION.present(client)? {
            &CLAIMED
        } else {
            &CLAIMED_UNMARKED
        };
        archive.run(client, &args)?;
        owned(client, d, id)?;
        return Ok(Outcome {
            id,
            status: ClaimStatus::Claimed,
            attempts: 1,
            result: None,
            tie,
        });
    }
    // The event exists, and since we hold its lock, no open transaction is
    // changing it: its committed state decides.
    let state = EventState::read(ANSWER_EXISTING.run(client, &args)?)?
        .ok_or_else(|| WebhookError::Internal("event vanished while its lock was held".into()))?;
    match state.answer {
        // Duplicate, dead, or live elsewhere: answered and archived already.
        Some(answer) => {
            lock.release();
            Ok(state.outcome(id, answer))
        }
        None => {
            let outcome = take_over(client, d, id, archived, &digest, state)?;
            Ok(Outcome { tie, ..outcome })
        }
    }
}

/// The delivery `id` now owns its event, under the event's lock, which it
/// keeps until its transaction ends. A claim that completes on commit
/// wrote the event as processed: an ordered event moves its entity's
/// watermark now, as `webhook_complete` would (refused with SQLSTATE 40001
/// if a newer event of the entity completed first).
fn owned(client: &mut SpiClient<'_>, d: &Delivery<'_>, id: pgrx::Uuid) -> Result<()> {
    if d.completes_on_commit() {
        if let Some(order) = d.order {
            ordering::advance(
                client,
                d.function,
                id,
                d.provider,
                ordering::CLAIM_CONSUMER,
                d.event_id,
                order,
            )?;
        }
    }
    session_claims::remember(id, d.provider, d.event_id, d.completes_on_commit());
    Ok(())
}

/// A stale delivery, under its event's lock: an event never seen, or one
/// that failed or whose lease ran out, is skipped for good (status
/// `stale`) and the delivery archived as `stale` with the reason. None: the
/// event is processed, dead or live, and the claim answers it as usual.
#[allow(clippy::too_many_arguments)]
fn skip_stale(
    client: &mut SpiClient<'_>,
    d: &Delivery<'_>,
    id: pgrx::Uuid,
    archived: Archived,
    digest: &[u8],
    tie: bool,
    reason: &str,
) -> Result<Option<Outcome>> {
    // We hold the lock: no other transaction is working on the event.
    let state =
        EventState::read(INSPECT_LOCKED.run(client, &[d.provider.into(), d.event_id.into()])?)?;
    let attempts = match &state {
        None => 0,
        Some(state) if state.answer.is_none() => state.attempts,
        Some(_) => return Ok(None),
    };
    let order = d.order.expect("only ordered deliveries are stale");
    if let Some(previous) = state
        .as_ref()
        .filter(|state| state.status == EventStatus::Processing)
        .and_then(|state| state.claim_id)
    {
        let note = format!("lease expired; event skipped as stale by delivery {id}");
        RECORD_LOST_LEASE.run_pruned(client, &[previous.into(), note.as_str().into()])?;
    }
    MARK_STALE.run(
        client,
        &[
            d.provider.into(),
            d.event_id.into(),
            d.event_type.into(),
            id.into(),
            digest.into(),
            order.entity_key.as_str().into(),
            order.value.as_str().into(),
            reason.into(),
        ],
    )?;
    // The event row is written: the lock stays until commit, so that a
    // concurrent delivery is answered `in_progress` at once instead of
    // waiting on the uncommitted row.
    archive::record_skipped(
        client,
        Entry {
            payload_mismatch: state.is_some_and(|s| s.payload_differs(digest)),
            ..d.entry(id, archived, ClaimStatus::Stale)
        },
        reason,
    )?;
    Ok(Some(Outcome {
        id,
        status: ClaimStatus::Stale,
        attempts,
        result: None,
        tie,
    }))
}

/// A delivery the provider's filter does not take (`receive::filters`):
/// an event never seen is kept filtered for good, and the delivery
/// archived as `filtered` with the reason. An event seen before is
/// answered as it stands (a redelivery of a filtered one is a duplicate),
/// as is one another transaction is working on.
pub fn filter_out(client: &mut SpiClient<'_>, d: &Delivery<'_>, reason: &str) -> Result<Outcome> {
    crate::event_lock::check_budget(d.function)?;
    let lock = EventLock::for_event(d.provider, d.event_id);
    if !lock.try_acquire() {
        return claim(client, d);
    }
    let id = crate::uuid::new_v7();
    let digest = d.payload.digest();
    let inserted = MARK_FILTERED
        .run(
            client,
            &[
                d.provider.into(),
                d.event_id.into(),
                d.event_type.into(),
                id.into(),
                digest.as_slice().into(),
                reason.into(),
            ],
        )?
        .next()
        .is_some();
    if !inserted {
        lock.release();
        return claim(client, d);
    }
    // Written: the lock stays until commit, as for a stale skip.
    let archived =
        crate::compress::for_archive(client, &d.payload, d.raw_body, d.headers.as_ref())?;
    archive::record_skipped(client, d.entry(id, archived, ClaimStatus::Filtered), reason)?;
    Ok(Outcome {
        id,
        status: ClaimStatus::Filtered,
        attempts: 0,
        result: None,
        tie: false,
    })
}

/// The committed state of an event, read without locking or writing
/// anything, with the answer a delivery would get if another transaction
/// held the event; None for an event never seen.
pub fn committed_state(
    client: &mut SpiClient<'_>,
    provider: &str,
    event_id: &str,
) -> Result<Option<EventState>> {
    EventState::read(INSPECT.run(client, &[provider.into(), event_id.into()])?)
}

/// A claim that found its event failed, or its lease run out: retry it, or
/// park it as dead once it has used up its attempts.
fn take_over(
    client: &mut SpiClient<'_>,
    d: &Delivery<'_>,
    id: pgrx::Uuid,
    archived: Archived,
    digest: &[u8],
    state: EventState,
) -> Result<Outcome> {
    let mismatch = state.payload_differs(digest);
    if state.status == EventStatus::Processing {
        if let Some(previous) = state.claim_id {
            let note = format!("lease expired; event taken over by delivery {id}");
            RECORD_LOST_LEASE.run_pruned(client, &[previous.into(), note.as_str().into()])?;
        }
    }
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    if max_attempts > 0 && state.attempts >= max_attempts {
        // Out of attempts (the last one expired): park it for an operator.
        let note = format!("gave up after {} attempts", state.attempts);
        PARK_AS_DEAD.run(
            client,
            &[d.provider.into(), d.event_id.into(), note.as_str().into()],
        )?;
        // Written: the event's lock stays until commit, as for a stale
        // skip above.
        archive::record(
            client,
            Entry {
                payload_mismatch: mismatch,
                ..d.entry(id, archived, ClaimStatus::Dead)
            },
        )?;
        return Ok(state.outcome(id, ClaimStatus::Dead));
    }

    let args: [DatumWithOid<'_>; 6] = [
        d.provider.into(),
        d.event_id.into(),
        id.into(),
        d.lease.into(),
        d.order.map(|o| o.entity_key.as_str()).into(),
        d.order.map(|o| o.value.as_str()).into(),
    ];
    let attempts = TAKE_OVER
        .run(client, &args)?
        .next()
        .and_then(|row| row.get::<i32>(1).ok().flatten())
        .ok_or_else(|| WebhookError::Internal("take-over updated no event".into()))?;
    archive::record(
        client,
        Entry {
            payload_mismatch: mismatch,
            ..d.entry(id, archived, ClaimStatus::Retry)
        },
    )?;
    owned(client, d, id)?;
    Ok(Outcome {
        id,
        status: ClaimStatus::Retry,
        attempts,
        result: None,
        tie: false,
    })
}

/// Answer `in_progress` without touching the event: another open
/// transaction is receiving the same signed bytes right now.
pub fn observe_in_progress(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Outcome> {
    let id = crate::uuid::new_v7();
    let archived =
        crate::compress::for_archive(client, &d.payload, d.raw_body, d.headers.as_ref())?;
    archive::record(client, d.entry(id, archived, ClaimStatus::InProgress))?;
    Ok(Outcome {
        id,
        status: ClaimStatus::InProgress,
        attempts: 0,
        result: None,
        tie: false,
    })
}
