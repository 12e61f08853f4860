//! What a claim answers, and the states an event goes through: Rust's
//! names for the SQL enums `webhook.claim_status` and `webhook.event_status`
//! (a test checks they match the catalog), and the claim's outcome.
//!
//! Which answer an event's state gives is decided in one place, the
//! `answer!` expression of `statements.rs`, which every claim statement
//! carries; Rust only reads the answer back.

use crate::composite;
use crate::errors::{Result, WebhookError};
use crate::jsonb::RawJsonb;
use crate::plans::Rows;

/// `webhook.claim_status`: what a delivery was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStatus {
    Claimed,
    Retry,
    Duplicate,
    InProgress,
    Dead,
    /// webhook_receive refused the delivery before claiming.
    Rejected,
    /// Stored in the inbox, for a worker to process (inbox mode).
    Queued,
    /// Older than its entity's watermark: nothing to do (ordering).
    Stale,
    /// An endpoint check with no event, answered as its provider expects.
    Handshake,
}

/// `webhook.event_status`: where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    /// Claimed; its lease is running.
    Processing,
    /// Done, for good.
    Processed,
    /// Failed; the next delivery retries it.
    Failed,
    /// Failed `webhook.max_attempts` times; parked for an operator.
    Dead,
    /// Handed to the inbox, where each consumer's progress is kept.
    Queued,
    /// Skipped for good: older than its entity's watermark (ordering).
    Stale,
}

impl ClaimStatus {
    /// In the order of the SQL enum's labels.
    pub const ALL: [ClaimStatus; 9] = [
        Self::Claimed,
        Self::Retry,
        Self::Duplicate,
        Self::InProgress,
        Self::Dead,
        Self::Rejected,
        Self::Queued,
        Self::Stale,
        Self::Handshake,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Retry => "retry",
            Self::Duplicate => "duplicate",
            Self::InProgress => "in_progress",
            Self::Dead => "dead",
            Self::Rejected => "rejected",
            Self::Queued => "queued",
            Self::Stale => "stale",
            Self::Handshake => "handshake",
        }
    }

    pub fn parse(label: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == label)
            .ok_or_else(|| WebhookError::Internal(format!("unknown claim status \"{label}\"")))
    }

    /// The delivery owns its event and must complete or fail it.
    pub fn owns_event(self) -> bool {
        matches!(self, Self::Claimed | Self::Retry)
    }
}

impl EventStatus {
    /// In the order of the SQL enum's labels.
    pub const ALL: [EventStatus; 6] = [
        Self::Processing,
        Self::Processed,
        Self::Failed,
        Self::Dead,
        Self::Queued,
        Self::Stale,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Processed => "processed",
            Self::Failed => "failed",
            Self::Dead => "dead",
            Self::Queued => "queued",
            Self::Stale => "stale",
        }
    }

    pub fn parse(label: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == label)
            .ok_or_else(|| WebhookError::Internal(format!("unknown event status \"{label}\"")))
    }
}

/// What a claim tells its caller.
pub struct Outcome {
    pub id: pgrx::Uuid,
    pub status: ClaimStatus,
    pub attempts: i32,
    /// What webhook_complete stored, for duplicates.
    pub result: Option<RawJsonb>,
    /// An ordered event as new as its entity's watermark: claimed (the
    /// provider processes ties) or stale (it does not).
    pub tie: bool,
}

impl Outcome {
    /// webhook_claim's answer, a `webhook.claim_result`: `(id, claimed,
    /// status, attempts, result)`.
    pub fn into_row(self, fcinfo: pgrx::pg_sys::FunctionCallInfo) -> Result<composite::Row> {
        composite::of_call(fcinfo, self.values())
    }

    /// The values of the columns `(id, claimed, status, attempts, result)`.
    pub fn values(self) -> Vec<Option<pgrx::pg_sys::Datum>> {
        let claimed = self.status.owns_event();
        vec![
            composite::value(self.id),
            composite::value(claimed),
            composite::value(self.status.as_str()),
            composite::value(self.attempts),
            composite::value(self.result),
        ]
    }

    /// The `(id, claimed, status, attempts, result)` row of webhook_claim
    /// up to 0.6.0, a set of one row.
    pub fn row(self) -> (pgrx::Uuid, bool, String, i32, Option<RawJsonb>) {
        (
            self.id,
            self.status.owns_event(),
            self.status.as_str().to_string(),
            self.attempts,
            self.result,
        )
    }
}

/// An event as the claim statements return it, with the answer its
/// committed state gives (None: the delivery may take the event over).
pub struct EventState {
    pub answer: Option<ClaimStatus>,
    pub status: EventStatus,
    pub attempts: i32,
    pub claim_id: Option<pgrx::Uuid>,
    pub result: Option<RawJsonb>,
    pub payload_hash: Option<Vec<u8>>,
}

impl EventState {
    /// The row `(answer, status, attempts, claim_id, result, payload_hash)`
    /// every claim statement returns, if it returned one.
    pub fn read(rows: Rows<'_>) -> Result<Option<Self>> {
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        let answer = row.get::<String>(1)?;
        Ok(Some(EventState {
            answer: answer.as_deref().map(ClaimStatus::parse).transpose()?,
            status: EventStatus::parse(&row.get::<String>(2)?.unwrap_or_default())?,
            attempts: row.get::<i32>(3)?.unwrap_or(0),
            claim_id: row.get::<pgrx::Uuid>(4)?,
            result: row.get::<RawJsonb>(5)?,
            payload_hash: row.get::<Vec<u8>>(6)?,
        }))
    }

    /// The answer to a delivery that does not own the event.
    pub fn outcome(self, id: pgrx::Uuid, answer: ClaimStatus) -> Outcome {
        Outcome {
            id,
            status: answer,
            attempts: self.attempts,
            result: if answer == ClaimStatus::Duplicate {
                self.result
            } else {
                None
            },
            tie: false,
        }
    }

    /// Whether `digest` differs from the first delivery's payload.
    pub fn payload_differs(&self, digest: &[u8]) -> bool {
        matches!(self.payload_hash.as_deref(), Some(first) if first != digest)
    }
}
