//! The archive: one row per delivery in `webhook.delivery_log`, written
//! once and never updated.
//!
//! Every writer lists the archive's columns in the one order
//! `archive_insert!` gives: the claim statements, which archive inside
//! the statement that decides (one statement per claim), and `record`,
//! for everything else. Deliveries that reach a claim write the columns
//! every release has had, so that a database whose SQL is still a release
//! behind (between installing a new library and `ALTER EXTENSION … UPDATE`)
//! keeps claiming; only rejections write the columns that came later.

use crate::claim::ClaimStatus;
use crate::compress::ArchivedPayload;
use crate::errors::Result;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// `INSERT INTO webhook.delivery_log (…columns…) `, for `concat!`: the
/// columns of a claimed (or answered) delivery.
macro_rules! archive_insert {
    () => {
        "INSERT INTO webhook.delivery_log
             (id, provider, event_id, event_type, payload, raw_body, signature, headers,
              claim_status, payload_mismatch) "
    };
}
pub(crate) use archive_insert;

static RECORD: Statement = Statement {
    sql: concat!(
        archive_insert!(),
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::webhook.claim_status, $10)"
    ),
    arg_types: &[
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
    ],
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
    pub payload: ArchivedPayload,
    pub raw_body: Option<&'a [u8]>,
    pub signature: Option<&'a str>,
    pub headers: Option<RawJsonb>,
    pub status: ClaimStatus,
    pub payload_mismatch: bool,
}

pub fn record(client: &mut SpiClient<'_>, entry: Entry<'_>) -> Result<()> {
    RECORD.run(
        client,
        &[
            entry.id.into(),
            entry.provider.into(),
            entry.event_id.into(),
            entry.event_type.into(),
            entry.payload.into(),
            entry.raw_body.into(),
            entry.signature.into(),
            entry.headers.into(),
            entry.status.as_str().into(),
            entry.payload_mismatch.into(),
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
    RECORD_REJECTION.run(
        client,
        &[
            r.id.into(),
            r.provider.into(),
            r.event_id.into(),
            r.body[..r.kept.min(r.body.len())].into(),
            r.signature.into(),
            r.headers.into(),
            r.reason.into(),
            size.into(),
            digest.as_slice().into(),
        ],
    )?;
    Ok(())
}
