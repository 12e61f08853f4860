//! What a claim answers: its outcome, and the event's state as the claim
//! statements return it (the statuses themselves are in `status`).
//!
//! Which answer an event's state gives is decided in one place, the
//! `answer!` expression of `statements.rs`, which every claim statement
//! carries; Rust only reads the answer back.

use crate::composite;
use crate::errors::Result;
use crate::jsonb::RawJsonb;
use crate::plans::Rows;
use crate::status::{ClaimStatus, EventStatus};

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
