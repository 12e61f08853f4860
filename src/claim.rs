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

use crate::compress::ArchivedPayload;
use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

const FUNCTION: &str = "webhook_claim";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStatus {
    Claimed,
    Retry,
    Duplicate,
    InProgress,
    Dead,
    /// webhook_receive refused the delivery before claiming.
    Rejected,
}

impl ClaimStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Retry => "retry",
            Self::Duplicate => "duplicate",
            Self::InProgress => "in_progress",
            Self::Dead => "dead",
            Self::Rejected => "rejected",
        }
    }

    pub fn owns_event(self) -> bool {
        matches!(self, Self::Claimed | Self::Retry)
    }
}

/// One delivery, validated, as the claim writes it.
pub struct Delivery<'a> {
    pub provider: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub payload: RawJsonb,
    pub raw_body: Option<&'a [u8]>,
    pub signature: Option<&'a str>,
    pub headers: Option<RawJsonb>,
    pub lease: Interval,
}

type ClaimRow = TableIterator<
    'static,
    (
        name!(id, pgrx::Uuid),
        name!(claimed, bool),
        name!(status, String),
        name!(attempts, i32),
        name!(result, Option<RawJsonb>),
    ),
>;

/// Claim a delivery whose payload is already `jsonb`.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(claimed, bool),
            name!(status, String),
            name!(attempts, i32),
            name!(result, Option<RawJsonb>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let payload = input::required(FUNCTION, "payload", payload)?;
    input::payload_size(FUNCTION, "payload", payload.size())?;
    if !payload.is_object() {
        return Err(WebhookError::NotAnObject {
            function: FUNCTION,
            arg: "payload",
            found: payload.kind(),
        }
        .into());
    }
    claim_row(
        provider, event_id, event_type, payload, None, signature, lease,
    )
}

/// Claim a delivery given its raw body, kept byte for byte in the archive so
/// its signature can be verified again later.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(claimed, bool),
            name!(status, String),
            name!(attempts, i32),
            name!(result, Option<RawJsonb>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let body = input::required(FUNCTION, "body", body)?;
    input::payload_size(FUNCTION, "body", body.len())?;
    let payload = parse_body(body)?;
    claim_row(
        provider,
        event_id,
        event_type,
        payload,
        Some(body),
        signature,
        lease,
    )
}

/// Text form of the raw-body claim: an untyped literal or a client's string
/// parameter lands here, and its bytes are archived as given.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(claimed, bool),
            name!(status, String),
            name!(attempts, i32),
            name!(result, Option<RawJsonb>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    webhook_claim_raw(
        provider,
        event_id,
        event_type,
        body.map(str::as_bytes),
        signature,
        lease,
    )
}

fn parse_body(body: &[u8]) -> Result<RawJsonb> {
    let (text, _) = input::json_object_body(FUNCTION, "body", body)?;
    jsonb_from_text(text)
}

/// Validated JSON text → a jsonb datum, by PostgreSQL's own parser.
pub fn jsonb_from_text(text: &str) -> Result<RawJsonb> {
    // JSON text never contains a raw NUL byte, so this cannot fail after
    // the check above; stay defensive all the same.
    let cstring = std::ffi::CString::new(text).map_err(|_| WebhookError::InvalidJson {
        function: FUNCTION,
        arg: "body",
        detail: "The body contains a NUL byte.".into(),
    })?;
    // SAFETY: jsonb_in takes a NUL-terminated C string and returns a jsonb
    // datum allocated in the current memory context, or raises an ERROR.
    let datum = unsafe {
        pgrx::direct_function_call_as_datum(
            pg_sys::jsonb_in,
            &[Some(pg_sys::Datum::from(cstring.as_ptr()))],
        )
    }
    .ok_or_else(|| WebhookError::Internal("jsonb_in returned NULL".into()))?;
    // SAFETY: the datum is a freshly built, non-NULL jsonb.
    unsafe { RawJsonb::from_datum(datum) }
        .ok_or_else(|| WebhookError::Internal("jsonb_in returned NULL".into()))
}

fn claim_row(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: RawJsonb,
    raw_body: Option<&[u8]>,
    signature: Option<&str>,
    lease: Option<Interval>,
) -> std::result::Result<ClaimRow, pg_sys::panic::ErrorReport> {
    let delivery = Delivery {
        provider: input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?,
        event_id: input::required_text(FUNCTION, "event_id", event_id, MAX_EVENT_ID_BYTES)?,
        event_type: input::required_text(FUNCTION, "event_type", event_type, MAX_EVENT_TYPE_BYTES)?,
        payload,
        raw_body,
        signature: input::optional_text(FUNCTION, "signature", signature, MAX_SIGNATURE_BYTES)?,
        headers: None,
        lease: input::lease(FUNCTION, "lease", lease)?,
    };
    let outcome = Spi::connect_mut(|client| claim(client, &delivery))?;
    Ok(TableIterator::once(outcome.row()))
}

pub struct Outcome {
    pub id: pgrx::Uuid,
    pub status: ClaimStatus,
    pub attempts: i32,
    /// What webhook_complete stored, for duplicates.
    pub result: Option<RawJsonb>,
}

impl Outcome {
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

/// The whole claim of a new event, or of an existing one it does not take
/// over, in one statement: insert the event if it is new, and archive the
/// delivery with the answer its event's committed state gives (the final
/// SELECT and the archive read the snapshot taken before the INSERT, so
/// they see the existing row and nothing of the insert). Only a failed or
/// expired event — a takeover — is left for further statements, which the
/// caller recognises by `archived` being false.
static CLAIM: Statement = Statement {
    sql: "WITH new_event AS (
              INSERT INTO webhook.events AS e
                  (provider, event_id, event_type, status, attempts, claim_id, lease_expires_at, payload_hash)
              VALUES ($1, $2, $3, 'processing', 1, $4, pg_catalog.clock_timestamp() + $8, $10)
              ON CONFLICT (provider, event_id) DO NOTHING
              RETURNING 1
          ), existing AS (
              SELECT e.status, e.attempts, e.claim_id, e.result, e.payload_hash,
                     CASE WHEN e.status = 'processed' THEN 'duplicate'
                          WHEN e.status = 'dead' THEN 'dead'
                          WHEN e.status = 'processing' AND e.lease_expires_at > pg_catalog.clock_timestamp()
                              THEN 'in_progress'
                     END AS answer
                FROM webhook.events e
               WHERE e.provider = $1 AND e.event_id = $2 AND NOT EXISTS (SELECT FROM new_event)
          ), archived AS (
              INSERT INTO webhook.delivery_log
                  (id, provider, event_id, event_type, payload, raw_body, signature, headers,
                   claim_status, payload_mismatch)
              SELECT $4, $1, $2, $3, $5, $6, $7, $9, 'claimed'::webhook.claim_status, false FROM new_event
              UNION ALL
              SELECT $4, $1, $2, $3, $5, $6, $7, $9, x.answer::webhook.claim_status,
                     x.payload_hash IS DISTINCT FROM $10
                FROM existing x WHERE x.answer IS NOT NULL
          )
          SELECT true, true, NULL::text, 1, NULL::uuid, NULL::jsonb, NULL::bytea FROM new_event
          UNION ALL
          SELECT false, x.answer IS NOT NULL, x.status::text, x.attempts, x.claim_id, x.result, x.payload_hash
            FROM existing x",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
    ],
};

/// A delivery arriving while another transaction holds the event: read the
/// committed state and archive the answer it gives, in one statement. It
/// returns the event's row in the shape CLAIM does, or none before the
/// event's first claim commits.
static OBSERVE: Statement = Statement {
    sql: "WITH existing AS (
              SELECT e.status, e.attempts, e.result, e.payload_hash
                FROM webhook.events e
               WHERE e.provider = $1 AND e.event_id = $2
          ), answer AS (
              SELECT x.*,
                     CASE x.status WHEN 'processed' THEN 'duplicate' WHEN 'dead' THEN 'dead'
                                   ELSE 'in_progress' END AS answer
                FROM (VALUES (1)) AS one(x_)
                LEFT JOIN existing x ON true
          ), archived AS (
              INSERT INTO webhook.delivery_log
                  (id, provider, event_id, event_type, payload, raw_body, signature, headers,
                   claim_status, payload_mismatch)
              SELECT $3, $1, $2, $4, $5, $6, $7, $8, a.answer::webhook.claim_status,
                     a.payload_hash IS NOT NULL AND a.payload_hash IS DISTINCT FROM $9
                FROM answer a
          )
          SELECT false, true, x.status::text, x.attempts, NULL::uuid, x.result, x.payload_hash
            FROM existing x",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
    ],
};

/// The committed state of an event, read without locking anything.
static INSPECT: Statement = Statement {
    sql: "SELECT false, false, status::text, attempts, claim_id, result, payload_hash
            FROM webhook.events
           WHERE provider = $1 AND event_id = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Take over a failed or expired event. Runs only under the event lock.
static RETAKE: Statement = Statement {
    sql: "UPDATE webhook.events
             SET status = 'processing',
                 attempts = attempts + 1,
                 claim_id = $3,
                 lease_expires_at = pg_catalog.clock_timestamp() + $4
           WHERE provider = $1 AND event_id = $2
       RETURNING attempts",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::INTERVALOID,
    ],
};

/// Park an event that has used up its attempts. Runs only under the lock.
static BURY: Statement = Statement {
    sql: "UPDATE webhook.events
             SET status = 'dead',
                 lease_expires_at = NULL,
                 last_error = COALESCE(last_error, $3)
           WHERE provider = $1 AND event_id = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Record that a claim's lease ran out and the event was taken over, so the
/// archive never shows that delivery as PENDING forever.
static SUPERSEDE: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_failures (delivery_id, error_message)
          SELECT $1, $2 WHERE EXISTS (SELECT FROM webhook.delivery_log WHERE id = $1)
          ON CONFLICT (delivery_id) DO NOTHING",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID],
};

/// Archive a delivery that did not create its event.
static ARCHIVE: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_log
              (id, provider, event_id, event_type, payload, raw_body, signature, headers,
               claim_status, payload_mismatch)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $9, $8::webhook.claim_status, $10)",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BOOLOID,
    ],
};

struct EventState {
    status: String,
    attempts: i32,
    claim_id: Option<pgrx::Uuid>,
    result: Option<RawJsonb>,
    payload_hash: Option<Vec<u8>>,
}

/// Read the (inserted, archived, status, attempts, claim_id, result,
/// payload_hash) row CLAIM and INSPECT return.
fn event_state(rows: crate::plans::Rows<'_>) -> Result<Option<(bool, bool, EventState)>> {
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some((
        row.get::<bool>(1)?.unwrap_or(false),
        row.get::<bool>(2)?.unwrap_or(false),
        EventState {
            status: row.get::<String>(3)?.unwrap_or_default(),
            attempts: row.get::<i32>(4)?.unwrap_or(0),
            claim_id: row.get::<pgrx::Uuid>(5)?,
            result: row.get::<RawJsonb>(6)?,
            payload_hash: row.get::<Vec<u8>>(7)?,
        },
    )))
}

fn inspect(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Option<EventState>> {
    let rows = INSPECT.run(client, &[d.provider.into(), d.event_id.into()])?;
    Ok(event_state(rows)?.map(|(_, _, state)| state))
}

/// What a delivery that does not own its event is answered, from the
/// event's committed state.
fn bystander(id: pgrx::Uuid, state: Option<EventState>) -> Outcome {
    match state {
        Some(s) if s.status == "processed" => Outcome {
            id,
            status: ClaimStatus::Duplicate,
            attempts: s.attempts,
            result: s.result,
        },
        Some(s) if s.status == "dead" => Outcome {
            id,
            status: ClaimStatus::Dead,
            attempts: s.attempts,
            result: None,
        },
        Some(s) => Outcome {
            id,
            status: ClaimStatus::InProgress,
            attempts: s.attempts,
            result: None,
        },
        None => Outcome {
            id,
            status: ClaimStatus::InProgress,
            attempts: 0,
            result: None,
        },
    }
}

/// Claim a validated delivery: the shared core of webhook_claim and
/// webhook_receive.
pub fn claim(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Outcome> {
    let id = crate::uuid::new_v7();
    if !crate::gucs::ARCHIVE_DUPLICATES.get() {
        // Processed is final (requeue refuses it), so a committed
        // 'processed' needs no lock to be answered, and nothing is written.
        if let Some(state) = inspect(client, d)?.filter(|s| s.status == "processed") {
            return Ok(bystander(id, Some(state)));
        }
    }
    let digest = d.payload.digest();
    let payload = crate::compress::for_archive(client, &d.payload)?;
    let lock = EventLock::for_event(d.provider, d.event_id);

    if !lock.try_acquire() {
        // Another transaction is working on this event right now. Its
        // committed state still tells a finished or dead event apart.
        let rows = OBSERVE.run(
            client,
            &[
                d.provider.into(),
                d.event_id.into(),
                id.into(),
                d.event_type.into(),
                payload.into(),
                d.raw_body.into(),
                d.signature.into(),
                d.headers.into(),
                digest.as_slice().into(),
            ],
        )?;
        return Ok(bystander(id, event_state(rows)?.map(|(_, _, state)| state)));
    }

    let rows = CLAIM.run(
        client,
        &[
            d.provider.into(),
            d.event_id.into(),
            d.event_type.into(),
            id.into(),
            payload.into(),
            d.raw_body.into(),
            d.signature.into(),
            d.lease.into(),
            d.headers.into(),
            digest.as_slice().into(),
        ],
    )?;
    // The event exists unless we just inserted it, and since we hold its
    // lock, no open transaction is changing it: its committed state decides.
    let (inserted, archived, state) = event_state(rows)?
        .ok_or_else(|| WebhookError::Internal("event vanished while its lock was held".into()))?;
    if inserted {
        owned_claims::remember(id, d.provider, d.event_id);
        return Ok(Outcome {
            id,
            status: ClaimStatus::Claimed,
            attempts: 1,
            result: None,
        });
    }
    if archived {
        // Duplicate, dead, or live elsewhere: answered and archived already.
        lock.release();
        return Ok(bystander(id, Some(state)));
    }

    // A takeover: the event failed, or its lease ran out.
    let mismatch = payload_differs(Some(&state), &digest);
    if state.status == "processing" {
        if let Some(previous) = state.claim_id {
            let note = format!("lease expired; event taken over by delivery {id}");
            SUPERSEDE.run(client, &[previous.into(), note.as_str().into()])?;
        }
    }
    let max_attempts = crate::gucs::MAX_ATTEMPTS.get();
    if max_attempts > 0 && state.attempts >= max_attempts {
        // Out of attempts (the last one expired): park it for an operator.
        let note = format!("gave up after {} attempts", state.attempts);
        BURY.run(
            client,
            &[d.provider.into(), d.event_id.into(), note.as_str().into()],
        )?;
        lock.release();
        archive(client, d, payload, id, ClaimStatus::Dead, mismatch)?;
        return Ok(Outcome {
            id,
            status: ClaimStatus::Dead,
            attempts: state.attempts,
            result: None,
        });
    }

    let retaken = RETAKE.run(
        client,
        &[
            d.provider.into(),
            d.event_id.into(),
            id.into(),
            d.lease.into(),
        ],
    )?;
    let attempts = retaken
        .into_iter()
        .next()
        .and_then(|row| row.get::<i32>(1).ok().flatten())
        .ok_or_else(|| WebhookError::Internal("retake updated no event".into()))?;
    archive(client, d, payload, id, ClaimStatus::Retry, mismatch)?;
    owned_claims::remember(id, d.provider, d.event_id);
    Ok(Outcome {
        id,
        status: ClaimStatus::Retry,
        attempts,
        result: None,
    })
}

/// Answer `in_progress` without touching the event: another open
/// transaction is receiving the same signed bytes right now.
pub fn observe_in_progress(client: &mut SpiClient<'_>, d: &Delivery<'_>) -> Result<Outcome> {
    let id = crate::uuid::new_v7();
    let payload = crate::compress::for_archive(client, &d.payload)?;
    archive(client, d, payload, id, ClaimStatus::InProgress, false)?;
    Ok(Outcome {
        id,
        status: ClaimStatus::InProgress,
        attempts: 0,
        result: None,
    })
}

fn payload_differs(state: Option<&EventState>, digest: &[u8]) -> bool {
    matches!(state.and_then(|s| s.payload_hash.as_deref()), Some(first) if first != digest)
}

fn archive(
    client: &mut SpiClient<'_>,
    d: &Delivery<'_>,
    payload: ArchivedPayload,
    id: pgrx::Uuid,
    status: ClaimStatus,
    payload_mismatch: bool,
) -> Result<()> {
    ARCHIVE.run(
        client,
        &[
            id.into(),
            d.provider.into(),
            d.event_id.into(),
            d.event_type.into(),
            payload.into(),
            d.raw_body.into(),
            d.signature.into(),
            status.as_str().into(),
            d.headers.into(),
            payload_mismatch.into(),
        ],
    )?;
    Ok(())
}

/// Claims this backend made that own their event, so that finishing them in
/// the same session skips looking the delivery up. Only a shortcut: the
/// finishing statement itself checks ownership, so a stale entry changes
/// nothing but the speed of the refusal.
pub mod owned_claims {
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// A session that claims without ever finishing must not grow this
    /// without bound; past this many entries it starts over.
    const CAPACITY: usize = 1024;

    thread_local! {
        static OWNED: RefCell<HashMap<pgrx::Uuid, (String, String)>> = RefCell::new(HashMap::new());
    }

    pub fn remember(id: pgrx::Uuid, provider: &str, event_id: &str) {
        OWNED.with(|owned| {
            let mut owned = owned.borrow_mut();
            if owned.len() >= CAPACITY {
                owned.clear();
            }
            owned.insert(id, (provider.to_string(), event_id.to_string()));
        });
    }

    /// The event a claim of this session owns.
    pub fn get(id: pgrx::Uuid) -> Option<(String, String)> {
        OWNED.with(|owned| owned.borrow().get(&id).cloned())
    }

    pub fn forget(id: pgrx::Uuid) {
        OWNED.with(|owned| owned.borrow_mut().remove(&id));
    }
}
