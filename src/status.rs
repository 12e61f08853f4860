//! Every status vocabulary of the extension, as Rust enums: Rust's names
//! for the SQL enums `webhook.claim_status`, `webhook.event_status`,
//! `webhook.inbox_status` and `webhook.key_status` (a test checks each
//! against the catalog, label by label and in order).
//!
//! Rust never compares a status as a string: SQL hands a label over as
//! text, `parse` turns it into its variant here, and every decision is a
//! `match` on the variant. On the ground floor: the claim, the archive,
//! the inbox and idempotency keys all import it, and it imports none of
//! them.

use crate::errors::{Result, WebhookError};

/// One enum per SQL enum: its variants in the order of the SQL labels,
/// `ALL`, `as_str` and `parse`.
macro_rules! sql_enum {
    (
        $(#[$meta:meta])*
        $name:ident = $sql:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// The SQL enum this mirrors.
            #[allow(dead_code)]
            pub const SQL_TYPE: &'static str = $sql;

            /// In the order of the SQL enum's labels.
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[ $( Self::$variant, )+ ];

            /// The SQL label.
            #[allow(dead_code)]
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $label, )+
                }
            }

            /// The variant of a label read back from SQL.
            #[allow(dead_code)]
            pub fn parse(label: &str) -> Result<Self> {
                match label {
                    $( $label => Ok(Self::$variant), )+
                    other => Err(WebhookError::Internal(format!(
                        concat!("unknown ", $sql, " label \"{}\""),
                        other
                    ))),
                }
            }
        }
    };
}

sql_enum! {
    /// `webhook.claim_status`: what a delivery was answered.
    ClaimStatus = "webhook.claim_status" {
        Claimed = "claimed",
        Retry = "retry",
        Duplicate = "duplicate",
        InProgress = "in_progress",
        Dead = "dead",
        /// webhook_receive refused the delivery before claiming.
        Rejected = "rejected",
        /// Stored in the inbox, for a worker to process (inbox mode).
        Queued = "queued",
        /// Older than its entity's watermark: nothing to do (ordering).
        Stale = "stale",
        /// An endpoint check with no event, answered as its provider expects.
        Handshake = "handshake",
        /// Not taken by the provider's filter (`webhook.filters`): answered
        /// 2xx, archived, never processed.
        Filtered = "filtered",
    }
}

sql_enum! {
    /// `webhook.event_status`: where an event is in its life.
    EventStatus = "webhook.event_status" {
        /// Claimed; its lease is running.
        Processing = "processing",
        /// Done, for good.
        Processed = "processed",
        /// Failed; the next delivery retries it.
        Failed = "failed",
        /// Failed `webhook.max_attempts` times; parked for an operator.
        Dead = "dead",
        /// Handed to the inbox, where each consumer's progress is kept.
        Queued = "queued",
        /// Skipped for good: older than its entity's watermark (ordering).
        Stale = "stale",
        /// Not taken by the provider's filter; kept in dedup for good.
        Filtered = "filtered",
    }
}

sql_enum! {
    /// `webhook.inbox_status`: where one consumer's copy of a queued event is.
    InboxStatus = "webhook.inbox_status" {
        /// Waiting for its run time, then for a worker.
        Ready = "ready",
        /// A worker holds it under a lease.
        Leased = "leased",
        /// Done, for good.
        Processed = "processed",
        /// Out of attempts, or failed permanently; parked for an operator.
        Dead = "dead",
        /// Skipped for good: older than its entity's watermark (ordering).
        Stale = "stale",
        /// Not taken by a filter (the provider's or this consumer's);
        /// `webhook_replay` can queue it again.
        Filtered = "filtered",
    }
}

sql_enum! {
    /// `webhook.key_status`: where a request under an idempotency key is.
    KeyStatus = "webhook.key_status" {
        /// A request holds the key (until its lease runs out).
        InProgress = "in_progress",
        /// The last request failed in a way that may be retried.
        Retryable = "retryable",
        /// Answered for good: every later request replays the answer.
        Finished = "finished",
    }
}

impl ClaimStatus {
    /// The delivery owns its event and must complete or fail it.
    pub fn owns_event(self) -> bool {
        matches!(self, Self::Claimed | Self::Retry)
    }
}
