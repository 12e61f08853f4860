//! `idempotency_begin`: take a key, or say why not, without waiting.

use super::{MAX_FINGERPRINT_BYTES, MAX_KEY_BYTES, MAX_SCOPE_BYTES};
use crate::composite;
use crate::errors::{PgResult, Result, WebhookError};
use crate::event_lock::EventLock;
use crate::input;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::status::KeyStatus;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// What `idempotency_begin` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    New,
    InProgress,
    Replay,
    Mismatch,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::InProgress => "in_progress",
            Self::Replay => "replay",
            Self::Mismatch => "mismatch",
        }
    }
}

/// One row of `idempotency_begin`.
type Begun = (
    String,
    Option<pgrx::Uuid>,
    Option<i32>,
    Option<String>,
    Option<RawJsonb>,
    Option<RawJsonb>,
    Option<String>,
);

/// Begin a request that carries an idempotency key: `new` (this request
/// owns the key; `recovery_point` and `recovery` say where an earlier
/// attempt got to), `in_progress` (409), `replay` (the stored response) or
/// `mismatch` (422).
#[pg_extern(
    volatile,
    security_definer,
    parallel_unsafe,
    name = "idempotency_begin"
)]
#[search_path(pg_catalog, pg_temp)]
fn begin_keyed_request(
    scope: Option<&str>,
    key: Option<&str>,
    fingerprint: Option<&str>,
    lease: default!(Option<Interval>, "'1 minute'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.idempotency_begin_result"),
    pg_sys::panic::ErrorReport,
> {
    let (outcome, request_id, http_status, recovery_point, recovery, headers, body) =
        begin_checked(scope, key, fingerprint, lease)?;
    Ok(composite::of_call(
        fcinfo,
        vec![
            composite::value(outcome),
            composite::value(request_id),
            composite::value(http_status),
            composite::value(recovery_point),
            composite::value(recovery),
            composite::value(headers),
            composite::value(body),
        ],
    )?)
}

/// `idempotency_begin`'s arguments checked, and the request begun.
fn begin_checked(
    scope: Option<&str>,
    key: Option<&str>,
    fingerprint: Option<&str>,
    lease: Option<Interval>,
) -> PgResult<Begun> {
    const F: &str = "idempotency_begin";
    crate::standby::refuse_writes(F)?;
    let scope = input::required_text(F, "scope", scope, MAX_SCOPE_BYTES)?;
    let key = input::required_text(F, "key", key, MAX_KEY_BYTES)?;
    let fingerprint = input::required_text(F, "fingerprint", fingerprint, MAX_FINGERPRINT_BYTES)?;
    let lease = match lease {
        None => {
            return Err(WebhookError::NullArgument {
                function: F,
                arg: "lease",
            }
            .into())
        }
        given => input::lease(F, "lease", given)?,
    };
    Ok(Spi::connect_mut(|client| {
        begin(client, scope, key, fingerprint, lease)
    })?)
}

/// The key's row as `begin` reads it.
static READ_KEY: Statement = Statement {
    sql: "SELECT fingerprint, status::text,
                 coalesce(locked_until > pg_catalog.clock_timestamp(), false),
                 created_at < pg_catalog.now() - $3,
                 response_status, response_headers, response_body
            FROM webhook.idempotency_keys
           WHERE scope = $1 AND key = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::INTERVALOID],
};

static INSERT_KEY: Statement = Statement {
    sql: "INSERT INTO webhook.idempotency_keys
                 (scope, key, fingerprint, status, request_id, lease, locked_until)
          VALUES ($1, $2, $3, 'in_progress', $4, $5, pg_catalog.clock_timestamp() + $5)
          ON CONFLICT DO NOTHING
          RETURNING 1",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::INTERVALOID,
    ],
};

/// A new owner for an existing key: a takeover keeps the recovery points
/// of the attempts before it; an expired key ($6) starts from nothing.
static TAKE_KEY: Statement = Statement {
    sql: "UPDATE webhook.idempotency_keys
             SET fingerprint = $3, status = 'in_progress', request_id = $4, lease = $5,
                 locked_until = pg_catalog.clock_timestamp() + $5,
                 attempts = CASE WHEN $6 THEN 1 ELSE attempts + 1 END,
                 recovery_point = CASE WHEN $6 THEN NULL ELSE recovery_point END,
                 recovery = CASE WHEN $6 THEN '{}'::jsonb ELSE recovery END,
                 last_error = CASE WHEN $6 THEN NULL ELSE last_error END,
                 created_at = CASE WHEN $6 THEN pg_catalog.now() ELSE created_at END,
                 response_status = NULL, response_headers = NULL, response_body = NULL,
                 finished_at = NULL, updated_at = pg_catalog.now()
           WHERE scope = $1 AND key = $2
       RETURNING recovery_point, NULLIF(recovery, '{}'::jsonb)",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::UUIDOID,
        pg_sys::INTERVALOID,
        pg_sys::BOOLOID,
    ],
};

fn begin(
    client: &mut SpiClient<'_>,
    scope: &str,
    key: &str,
    fingerprint: &str,
    lease: Interval,
) -> Result<Begun> {
    let lock = EventLock::for_idempotency_key(scope, key);
    let locked = lock.try_acquire();
    let retention = crate::gucs::idempotency_retention();
    let existing = READ_KEY
        .run(client, &[scope.into(), key.into(), retention.into()])?
        .next()
        .map(|row| -> Result<_> {
            Ok(Existing {
                fingerprint: row.get::<String>(1)?.unwrap_or_default(),
                status: KeyStatus::parse(&row.get::<String>(2)?.unwrap_or_default())?,
                live: row.get::<bool>(3)?.unwrap_or(false),
                expired: row.get::<bool>(4)?.unwrap_or(false),
                response_status: row.get::<i32>(5)?,
                response_headers: row.get::<RawJsonb>(6)?,
                response_body: row.get::<String>(7)?,
            })
        })
        .transpose()?;

    let decision = decide(locked, existing.as_ref(), fingerprint);
    if decision != Decision::Own && locked {
        // Answered without taking the key: a duplicate's open transaction
        // must not make the key look busy to the requests after it.
        lock.release();
    }
    let answer = |outcome: Outcome, http_status: Option<i32>| -> Begun {
        (
            outcome.as_str().into(),
            None,
            http_status,
            None,
            None,
            None,
            None,
        )
    };
    match decision {
        Decision::InProgress => Ok(answer(Outcome::InProgress, Some(409))),
        Decision::Mismatch => Ok(answer(Outcome::Mismatch, Some(422))),
        Decision::Replay => {
            let existing =
                existing.ok_or_else(|| WebhookError::Internal("replay of no key".into()))?;
            Ok((
                Outcome::Replay.as_str().into(),
                None,
                existing.response_status,
                None,
                None,
                existing.response_headers,
                existing.response_body,
            ))
        }
        Decision::Own => {
            let request_id = crate::uuid::new_v7();
            let (recovery_point, recovery) = match &existing {
                None => {
                    let inserted = !INSERT_KEY
                        .run(
                            client,
                            &[
                                scope.into(),
                                key.into(),
                                fingerprint.into(),
                                request_id.into(),
                                lease.into(),
                            ],
                        )?
                        .is_empty();
                    if !inserted {
                        // Only possible when this transaction's snapshot
                        // predates the row (REPEATABLE READ): someone
                        // else has the key.
                        return Ok(answer(Outcome::InProgress, Some(409)));
                    }
                    (None, None)
                }
                Some(existing) => {
                    let row = TAKE_KEY
                        .run(
                            client,
                            &[
                                scope.into(),
                                key.into(),
                                fingerprint.into(),
                                request_id.into(),
                                lease.into(),
                                existing.expired.into(),
                            ],
                        )?
                        .next()
                        .ok_or_else(|| WebhookError::Internal("idempotency key vanished".into()))?;
                    (row.get::<String>(1)?, row.get::<RawJsonb>(2)?)
                }
            };
            Ok((
                Outcome::New.as_str().into(),
                Some(request_id),
                None,
                recovery_point,
                recovery,
                None,
                None,
            ))
        }
    }
}

struct Existing {
    fingerprint: String,
    status: KeyStatus,
    live: bool,
    expired: bool,
    response_status: Option<i32>,
    response_headers: Option<RawJsonb>,
    response_body: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Take the key: insert it, take it over, or start an expired one anew.
    Own,
    InProgress,
    Mismatch,
    Replay,
}

/// The state machine of `idempotency_begin`, apart from the database.
/// `locked`: this transaction got the key's lock (nobody else is live on
/// it); `existing`: the key's committed row.
fn decide(locked: bool, existing: Option<&Existing>, fingerprint: &str) -> Decision {
    let Some(row) = existing else {
        // No committed row: free, unless another transaction is inserting
        // it right now.
        return if locked {
            Decision::Own
        } else {
            Decision::InProgress
        };
    };
    let running = row.status == KeyStatus::InProgress && row.live;
    if row.expired && !running {
        // Past the retention the key means nothing any more (a purge may
        // simply not have run yet).
        return if locked {
            Decision::Own
        } else {
            Decision::InProgress
        };
    }
    if row.fingerprint != fingerprint {
        return Decision::Mismatch;
    }
    if !locked || running {
        return Decision::InProgress;
    }
    match row.status {
        KeyStatus::Finished => Decision::Replay,
        // Failed retryably, or its lease ran out: resume it.
        KeyStatus::Retryable | KeyStatus::InProgress => Decision::Own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str, live: bool, expired: bool, fingerprint: &str) -> Existing {
        Existing {
            fingerprint: fingerprint.into(),
            status: KeyStatus::parse(status).unwrap(),
            live,
            expired,
            response_status: None,
            response_headers: None,
            response_body: None,
        }
    }

    #[test]
    fn a_free_key_is_owned_unless_someone_is_inserting_it() {
        assert_eq!(decide(true, None, "f"), Decision::Own);
        assert_eq!(decide(false, None, "f"), Decision::InProgress);
    }

    #[test]
    fn a_finished_key_replays_the_same_request_only() {
        let r = row("finished", false, false, "f");
        assert_eq!(decide(true, Some(&r), "f"), Decision::Replay);
        assert_eq!(decide(true, Some(&r), "g"), Decision::Mismatch);
        assert_eq!(decide(false, Some(&r), "g"), Decision::Mismatch);
    }

    #[test]
    fn a_running_key_is_in_progress_and_a_crashed_one_resumes() {
        let running = row("in_progress", true, false, "f");
        assert_eq!(decide(true, Some(&running), "f"), Decision::InProgress);
        let crashed = row("in_progress", false, false, "f");
        assert_eq!(decide(true, Some(&crashed), "f"), Decision::Own);
        assert_eq!(decide(false, Some(&crashed), "f"), Decision::InProgress);
        let failed = row("retryable", false, false, "f");
        assert_eq!(decide(true, Some(&failed), "f"), Decision::Own);
    }

    #[test]
    fn an_expired_key_starts_anew_unless_it_is_running() {
        let old = row("finished", false, true, "f");
        assert_eq!(decide(true, Some(&old), "other"), Decision::Own);
        let running = row("in_progress", true, true, "f");
        assert_eq!(decide(true, Some(&running), "f"), Decision::InProgress);
    }
}
