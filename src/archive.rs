//! The archive: one row per delivery in `webhook.delivery_log`, written
//! once and never updated.
//!
//! Every writer lists the archive's columns in the one order
//! `archive_insert!` gives: the claim and queueing statements, which
//! archive a delivery in the statement that answers it, and `record`, for
//! everything else. Rejections and handshakes, which carry no event,
//! have statements of their own.

use crate::compress::Archived;
use crate::errors::Result;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::status::ClaimStatus;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The columns of a claimed (or answered) delivery, in the order every
/// writer gives them. `secret_fingerprint` (which key verified it) is
/// known to `webhook_receive` only, `reject_reason` only for a delivery
/// skipped as stale; both are NULL otherwise.
macro_rules! archive_columns {
    () => {
        "id, provider, event_id, event_type, payload, raw_body, signature, headers,
         claim_status, payload_mismatch, secret_fingerprint, reject_reason"
    };
}

/// `INSERT INTO webhook.delivery_log (…columns…) `, for `concat!`.
macro_rules! archive_insert {
    () => {
        concat!(
            "INSERT INTO webhook.delivery_log (",
            $crate::archive::archive_columns!(),
            ") "
        )
    };
}
pub(crate) use {archive_columns, archive_insert};

/// Whether a claim's archive row may say that it completes on commit
/// (`claim_completes`, which the releases before 0.11.0 lack).
pub static MARKS_COMPLETION: crate::installed::Column =
    crate::installed::Column::new("webhook.delivery_log", "claim_completes");

/// The arguments of `record` and `record_skipped`, in `archive_columns!`'s
/// order.
const ENTRY_TYPES: [pg_sys::Oid; 12] = [
    pg_sys::UUIDOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::JSONBOID,
    pg_sys::BYTEAOID,
    pg_sys::TEXTOID,
    pg_sys::JSONBOID,
    pg_sys::TEXTOID,
    pg_sys::BOOLOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
];

static RECORD: Statement = Statement {
    sql: concat!(
        archive_insert!(),
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::webhook.claim_status, $10, $11, $12)"
    ),
    arg_types: &ENTRY_TYPES,
};

/// A rejection: the same columns, then why, and the whole body's size and
/// SHA-256 (the row keeps only a prefix of it).
static RECORD_REJECTION: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_log
              (id, provider, event_id, raw_body, signature, headers, claim_status,
               reject_reason, body_size, body_sha256)
          VALUES ($1, $2, $3, $4, $5, $6, 'rejected', $7, $8, $9)",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::TEXTOID,
        pg_sys::INT4OID,
        pg_sys::BYTEAOID,
    ],
};

/// One archived delivery that reached a claim.
pub struct Entry<'a> {
    pub id: pgrx::Uuid,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    /// Payload, raw body and headers, compressed for the archive.
    pub archived: Archived,
    pub signature: Option<&'a str>,
    pub status: ClaimStatus,
    pub payload_mismatch: bool,
    /// The fingerprint of the key that verified the delivery
    /// (`webhook_receive` only).
    pub verified_by: Option<&'a str>,
}

impl<'a> Entry<'a> {
    fn arguments<'b>(&'b self, reason: Option<&'b str>) -> [pgrx::datum::DatumWithOid<'b>; 12] {
        [
            self.id.into(),
            self.provider.into(),
            self.event_id.into(),
            self.event_type.into(),
            self.archived.payload.into(),
            self.archived.raw_body.into(),
            self.signature.into(),
            self.archived.headers.into(),
            self.status.as_str().into(),
            self.payload_mismatch.into(),
            self.verified_by.into(),
            reason.into(),
        ]
    }
}

pub fn record(client: &mut SpiClient<'_>, entry: Entry<'_>) -> Result<()> {
    RECORD.run(client, &entry.arguments(None))?;
    Ok(())
}

/// A delivery answered without processing, with the reason the archive
/// shows for it (`webhook.deliveries.error_message`).
pub fn record_skipped(client: &mut SpiClient<'_>, entry: Entry<'_>, reason: &str) -> Result<()> {
    RECORD.run(client, &entry.arguments(Some(reason)))?;
    Ok(())
}

/// The archive row of a delivery just queued whose event the provider's
/// filter does not take (`receive::filters`): filtered, with the reason.
static MARK_FILTERED: Statement = Statement {
    sql: "UPDATE webhook.delivery_log SET claim_status = 'filtered', reject_reason = $2 WHERE id = $1",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID],
};

pub fn mark_filtered(client: &mut SpiClient<'_>, id: pgrx::Uuid, reason: &str) -> Result<()> {
    MARK_FILTERED.run_pruned(client, &[id.into(), reason.into()])?;
    Ok(())
}

/// A verified endpoint check (`schemes::handshake`): no event, archived
/// whole with what it was.
pub struct Handshake<'a> {
    pub id: pgrx::Uuid,
    pub provider: &'a str,
    pub kind: &'a str,
    pub payload: RawJsonb,
    pub raw_body: &'a [u8],
    pub signature: Option<&'a str>,
    pub headers: Option<RawJsonb>,
    pub verified_by: Option<&'a str>,
}

static RECORD_HANDSHAKE: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_log
              (id, provider, event_type, payload, raw_body, signature, headers, claim_status,
               secret_fingerprint)
          VALUES ($1, $2, $3, $4, $5, $6, $7, 'handshake', $8)",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::TEXTOID,
    ],
};

pub fn record_handshake(client: &mut SpiClient<'_>, h: Handshake<'_>) -> Result<()> {
    let archived =
        crate::compress::for_archive(client, &h.payload, Some(h.raw_body), h.headers.as_ref())?;
    RECORD_HANDSHAKE.run(
        client,
        &[
            h.id.into(),
            h.provider.into(),
            h.kind.into(),
            archived.payload.into(),
            archived.raw_body.into(),
            h.signature.into(),
            archived.headers.into(),
            h.verified_by.into(),
        ],
    )?;
    Ok(())
}

/// One refused delivery: `body` is kept up to `kept` bytes.
pub struct Rejection<'a> {
    pub id: pgrx::Uuid,
    pub provider: &'a str,
    /// The id it claimed to carry, when it was read (a replay's).
    pub event_id: Option<&'a str>,
    pub body: &'a [u8],
    pub kept: usize,
    pub signature: Option<&'a str>,
    pub headers: Option<RawJsonb>,
    pub reason: &'a str,
}

pub fn record_rejection(client: &mut SpiClient<'_>, r: Rejection<'_>) -> Result<()> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(r.body);
    let size = i32::try_from(r.body.len()).unwrap_or(i32::MAX);
    let kept = crate::compress::raw_body_for_archive(client, &r.body[..r.kept.min(r.body.len())])?;
    let headers = crate::compress::headers_for_archive(client, r.headers.as_ref())?;
    RECORD_REJECTION.run(
        client,
        &[
            r.id.into(),
            r.provider.into(),
            r.event_id.into(),
            kept.into(),
            r.signature.into(),
            headers.into(),
            r.reason.into(),
            size.into(),
            digest.as_slice().into(),
        ],
    )?;
    Ok(())
}
