//! What `webhook_receive` answers: the claim's outcome, what to send the
//! provider, and what the handler dispatches on.

use crate::claim::Outcome;
use crate::composite;
use crate::errors::Result;
use crate::status::ClaimStatus;
use pgrx::pg_sys;

pub(crate) struct Answer {
    pub outcome: Outcome,
    pub http_status: i32,
    pub reason: &'static str,
    /// What the handler dispatches on; unknown for rejected deliveries.
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// Whether the signature covers the event type (false: it came from
    /// material anyone relaying the delivery could have changed).
    pub event_type_signed: Option<bool>,
    /// What to send the provider instead of an empty 2xx (a handshake's
    /// answer), and its content type.
    pub response: Option<(String, &'static str)>,
}

impl Answer {
    /// A delivery refused before any claim: archived as `rejected` under
    /// `id`.
    pub fn refused(id: pgrx::Uuid, http_status: i32, reason: &'static str) -> Self {
        Answer {
            outcome: Outcome {
                id,
                status: ClaimStatus::Rejected,
                attempts: 0,
                result: None,
                tie: false,
            },
            http_status,
            reason,
            event_id: None,
            event_type: None,
            event_type_signed: None,
            response: None,
        }
    }

    /// webhook_receive's answer, a `webhook.receive_result`.
    pub fn into_row(self, fcinfo: pg_sys::FunctionCallInfo) -> Result<composite::Row> {
        let (response, response_type) = match self.response {
            Some((body, content_type)) => (Some(body), Some(content_type)),
            None => (None, None),
        };
        let mut values = self.outcome.values();
        values.extend([
            composite::value(self.http_status),
            composite::value(self.reason),
            composite::value(self.event_id),
            composite::value(self.event_type),
            composite::value(self.event_type_signed),
            composite::value(response),
            composite::value(response_type),
        ]);
        composite::of_call(fcinfo, values)
    }
}

/// The HTTP status and reason of a claimed, queued or answered event.
/// `unordered`: the provider is ordered, but this event had no entity key
/// or order value.
pub fn of_outcome(outcome: &Outcome, unordered: bool) -> (i32, &'static str) {
    let http_status = match outcome.status {
        // Not done yet: the provider must come back.
        ClaimStatus::InProgress => 409,
        _ => 200,
    };
    let reason = match (outcome.status, outcome.tie) {
        (_, true) => "tie",
        (ClaimStatus::Stale, false) => "older",
        (ClaimStatus::Filtered, _) => "filtered",
        _ if unordered => "unordered",
        _ => "ok",
    };
    (http_status, reason)
}
