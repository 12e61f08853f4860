//! Idempotency keys for the application's own API.
//!
//! A request carrying an `Idempotency-Key` begins with
//! `idempotency_begin(scope, key, fingerprint)`, which answers one of:
//!
//! * `new` — this request owns the key now, under a lease (as a claim
//!   owns an event). It does its work, records recovery points for
//!   multi-step work (`idempotency_checkpoint`), and ends with
//!   `idempotency_finish` (the response later retries get back) or
//!   `idempotency_fail` (retryable: the key is free again; final: the
//!   failure is what later retries get back). A request that takes over a
//!   key whose earlier attempt crashed or failed retryably is also `new`,
//!   with that attempt's last recovery point, so it resumes there instead
//!   of starting over.
//! * `in_progress` — another request with the key is running: HTTP 409.
//! * `replay` — the key finished before: its stored response.
//! * `mismatch` — the key came with a different request (fingerprint):
//!   HTTP 422.
//!
//! Nothing here waits on another session. Every write to a key row happens
//! under the key's lock (`EventLock::for_idempotency_key`), which
//! `idempotency_begin` only tries: when another transaction is live on the
//! key, the answer is `in_progress` at once. The functions that finish a
//! request take the lock and may wait, as the ones that finish a claim do:
//! the holder is then a competing begin (for one statement) or a request
//! that took the key over after this one's lease ran out, whose outcome
//! decides the answer (55006 once the takeover commits).
//!
//! Every call works in the caller's transaction. In one-transaction use
//! (begin, the request's writes, finish, commit) an abort takes the key
//! row with it and the key is simply free again. In multi-step use each
//! step commits with its recovery point, and a crash leaves the key in
//! progress until its lease runs out; the client's retry then resumes.
//! The request id `new` returns fences each attempt: once another attempt
//! took the key over, the old one's calls are refused with SQLSTATE 55006.

use crate::composite;
use crate::errors::{Owner, PgResult, Result, Standing, WebhookError};
use crate::event_lock::EventLock;
use crate::fence::Fence;
use crate::input;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::status::KeyStatus;
use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Longest scope, key, fingerprint and step name. The IETF draft puts no
/// limit on keys; Stripe's is 255 characters.
const MAX_SCOPE_BYTES: usize = 255;
const MAX_KEY_BYTES: usize = 255;
const MAX_FINGERPRINT_BYTES: usize = 255;
const MAX_STEP_BYTES: usize = 255;
/// An HTTP method is a short token (`POST`, `PATCH`).
const MAX_METHOD_BYTES: usize = 32;
/// A recovery point's output is a step's result (an order id, a charge
/// id), not a document.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Failure messages are kept whole up to this size, then cut.
const MAX_ERROR_BYTES: usize = 2048;

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
pub(crate) type Begun = (
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
pub(crate) fn begin_checked(
    scope: Option<&str>,
    key: Option<&str>,
    fingerprint: Option<&str>,
    lease: Option<Interval>,
) -> PgResult<Begun> {
    const F: &str = "idempotency_begin";
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

/// Record that the request passed `step`, with the step's `output`, in the
/// transaction of the step's own writes; renews the lease. A later attempt
/// that takes the key over gets the last step as `recovery_point` and
/// every step's output in `recovery`.
#[pg_extern(
    volatile,
    security_definer,
    parallel_unsafe,
    name = "idempotency_checkpoint"
)]
#[search_path(pg_catalog, pg_temp)]
fn checkpoint_request(
    request_id: Option<pgrx::Uuid>,
    step: Option<&str>,
    output: default!(Option<RawJsonb>, "NULL"),
) -> PgResult<()> {
    const F: &str = "idempotency_checkpoint";
    let request_id = input::required(F, "request_id", request_id)?;
    let step = input::required_text(F, "step", step, MAX_STEP_BYTES)?;
    if let Some(output) = &output {
        if output.size() > MAX_OUTPUT_BYTES {
            return Err(WebhookError::ArgumentTooLong {
                function: F,
                arg: "output",
                limit: MAX_OUTPUT_BYTES,
                actual: output.size(),
            }
            .into());
        }
    }
    Ok(Spi::connect_mut(|client| {
        update_owned(
            client,
            F,
            request_id,
            &CHECKPOINT,
            &[request_id.into(), step.into(), output.into()],
        )
    })?)
}

static CHECKPOINT: Statement = Statement {
    sql: "UPDATE webhook.idempotency_keys
             SET recovery_point = $2,
                 recovery = recovery || pg_catalog.jsonb_build_object($2, $3),
                 locked_until = pg_catalog.clock_timestamp() + lease,
                 updated_at = pg_catalog.now()
           WHERE request_id = $1 AND status = 'in_progress'
       RETURNING 1",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID, pg_sys::JSONBOID],
};

/// Finish the request with the response every later request with the key
/// gets back (`replay`).
#[pg_extern(
    volatile,
    security_definer,
    parallel_unsafe,
    name = "idempotency_finish"
)]
#[search_path(pg_catalog, pg_temp)]
fn finish_request(
    request_id: Option<pgrx::Uuid>,
    response_status: Option<i32>,
    response_body: default!(Option<&str>, "NULL"),
    response_headers: default!(Option<RawJsonb>, "NULL"),
) -> PgResult<()> {
    const F: &str = "idempotency_finish";
    let request_id = input::required(F, "request_id", request_id)?;
    let response = Response::checked(F, response_status, response_body, response_headers)?;
    Ok(Spi::connect_mut(|client| {
        response.store(client, F, request_id, None)
    })?)
}

/// Store the response (and, for a final failure, the error) and free the
/// lease: the key is finished.
static FINISH: Statement = Statement {
    sql: "UPDATE webhook.idempotency_keys
             SET status = 'finished', response_status = $2, response_headers = $3,
                 response_body = $4, last_error = coalesce($5, last_error),
                 locked_until = NULL, finished_at = pg_catalog.now(),
                 updated_at = pg_catalog.now()
           WHERE request_id = $1 AND status = 'in_progress'
       RETURNING 1",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::INT4OID,
        pg_sys::JSONBOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
    ],
};

/// Record that the request failed. Retryable (the default): the key is
/// free again, and the next request with it resumes from the last recovery
/// point. Final: the response given is stored, and every later request
/// with the key gets it back.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "idempotency_fail")]
#[search_path(pg_catalog, pg_temp)]
fn fail_request(
    request_id: Option<pgrx::Uuid>,
    error: Option<&str>,
    retryable: default!(Option<bool>, true),
    response_status: default!(Option<i32>, "NULL"),
    response_body: default!(Option<&str>, "NULL"),
    response_headers: default!(Option<RawJsonb>, "NULL"),
) -> PgResult<()> {
    const F: &str = "idempotency_fail";
    let request_id = input::required(F, "request_id", request_id)?;
    let error = input::required(F, "error", error)?;
    let error = input::truncated(error, MAX_ERROR_BYTES);
    let retryable = input::required(F, "retryable", retryable)?;
    let response = if retryable {
        if response_status.is_some() || response_body.is_some() || response_headers.is_some() {
            return Err(WebhookError::InvalidArgument {
                function: F,
                arg: "response_status",
                rule: "must be NULL for a retryable failure: nothing is replayed, the next request runs again",
            }
            .into());
        }
        None
    } else {
        Some(Response::checked(
            F,
            response_status,
            response_body,
            response_headers,
        )?)
    };
    Ok(Spi::connect_mut(|client| match response {
        None => update_owned(
            client,
            F,
            request_id,
            &RELEASE,
            &[request_id.into(), error.as_ref().into()],
        ),
        Some(response) => response.store(client, F, request_id, Some(&error)),
    })?)
}

static RELEASE: Statement = Statement {
    sql: "UPDATE webhook.idempotency_keys
             SET status = 'retryable', last_error = $2, locked_until = NULL,
                 updated_at = pg_catalog.now()
           WHERE request_id = $1 AND status = 'in_progress'
       RETURNING 1",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID],
};

/// A response to store: a real HTTP status, and a body and headers within
/// `webhook.idempotency_max_response`.
struct Response<'a> {
    status: i32,
    body: Option<&'a str>,
    headers: Option<RawJsonb>,
}

impl<'a> Response<'a> {
    fn checked(
        function: &'static str,
        status: Option<i32>,
        body: Option<&'a str>,
        headers: Option<RawJsonb>,
    ) -> Result<Self> {
        let status = input::required(function, "response_status", status)?;
        if !(100..=599).contains(&status) {
            return Err(WebhookError::InvalidArgument {
                function,
                arg: "response_status",
                rule: "must be an HTTP status code, 100 to 599",
            });
        }
        if let Some(headers) = &headers {
            if !headers.is_object() {
                return Err(WebhookError::NotAnObject {
                    function,
                    arg: "response_headers",
                    found: headers.kind(),
                });
            }
        }
        let size = body.map_or(0, str::len) + headers.as_ref().map_or(0, RawJsonb::size);
        let limit = crate::gucs::idempotency_max_response_bytes();
        if size > limit {
            return Err(WebhookError::ArgumentTooLong {
                function,
                arg: "response_body",
                limit,
                actual: size,
            });
        }
        Ok(Self {
            status,
            body,
            headers,
        })
    }

    /// Finish the request with this response (and, for a final failure,
    /// its error).
    fn store(
        self,
        client: &mut SpiClient<'_>,
        function: &'static str,
        request_id: pgrx::Uuid,
        error: Option<&str>,
    ) -> Result<()> {
        update_owned(
            client,
            function,
            request_id,
            &FINISH,
            &[
                request_id.into(),
                self.status.into(),
                self.headers.into(),
                self.body.into(),
                error.into(),
            ],
        )
    }
}

static OWNER: Statement = Statement {
    sql: "SELECT scope, key, status::text FROM webhook.idempotency_keys WHERE request_id = $1",
    arg_types: &[pg_sys::UUIDOID],
};

/// Run `statement`, an UPDATE of the request's row that only its owner
/// may make while it is in progress (`WHERE request_id = $1 AND status =
/// 'in_progress' RETURNING 1`), fenced (see `fence`) under the key's lock:
/// held until the transaction ends, so nobody takes the key over before
/// this transaction's writes are committed or gone.
fn update_owned(
    client: &mut SpiClient<'_>,
    function: &'static str,
    request_id: pgrx::Uuid,
    statement: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Result<()> {
    let fence = Fence {
        function,
        owner: Owner::Request,
        id: request_id,
    };
    let key = OWNER
        .run(client, &[request_id.into()])?
        .next()
        .map(|row| -> Result<_> { Ok(row.get::<String>(1)?.zip(row.get::<String>(2)?)) })
        .transpose()?
        .flatten();
    // A request that was taken over leaves no trace of its id: the key's
    // row names its successor. So an id no key names is refused as lost,
    // which rolls its caller back, as a taken-over request must be.
    let gone = || Standing::Lost {
        detail: "No idempotency key names this request: another request with the key took it \
                 over after its lease ran out, or it never began one."
            .into(),
    };
    let Some((scope, key)) = key else {
        return Err(fence.refused(gone()));
    };
    EventLock::for_idempotency_key(&scope, &key).acquire();
    fence.update(
        client,
        statement,
        args,
        |_| Ok(()),
        |client| {
            let status = OWNER
                .run(client, &[request_id.into()])?
                .next()
                .map(|row| row.get::<String>(3))
                .transpose()?
                .flatten()
                .map(|label| KeyStatus::parse(&label))
                .transpose()?;
            Ok(match status {
                Some(KeyStatus::Finished) => Standing::Finished {
                    status: "finished".into(),
                },
                Some(KeyStatus::Retryable) => Standing::Finished {
                    status: "failed".into(),
                },
                // Still this request's and in progress, yet not changed:
                // a takeover committed meanwhile; or taken over already.
                Some(KeyStatus::InProgress) | None => gone(),
            })
        },
    )
}

/// A hash of what makes two requests "the same request" for a key: the
/// method, the path and the body. Send it as `idempotency_begin`'s
/// fingerprint, or compute one of your own (a canonical form of the
/// parameters that matter).
#[pg_extern(immutable, parallel_safe, name = "idempotency_fingerprint")]
fn fingerprint_bytes(
    method: Option<&str>,
    path: Option<&str>,
    body: default!(Option<&[u8]>, "NULL"),
) -> PgResult<String> {
    Ok(fingerprint(method, path, body.unwrap_or_default())?)
}

/// `idempotency_fingerprint` for a body passed as text.
#[pg_extern(immutable, parallel_safe, name = "idempotency_fingerprint")]
fn fingerprint_text(
    method: Option<&str>,
    path: Option<&str>,
    body: Option<&str>,
) -> PgResult<String> {
    Ok(fingerprint(
        method,
        path,
        body.unwrap_or_default().as_bytes(),
    )?)
}

fn fingerprint(method: Option<&str>, path: Option<&str>, body: &[u8]) -> Result<String> {
    const F: &str = "idempotency_fingerprint";
    let method = input::required_text(F, "method", method, MAX_METHOD_BYTES)?.to_ascii_uppercase();
    let path = input::required_text(F, "path", path, input::MAX_URL_BYTES)?;
    let digest = super::digest_of(&[
        b"pg_webhook_inbox request fingerprint v1",
        method.as_bytes(),
        path.as_bytes(),
        body,
    ]);
    Ok(format!("sha256:{}", hex::encode(digest)))
}

/// Expire keys first used longer ago than `older_than`
/// (`webhook.idempotency_retention` by default; Stripe keeps keys 24
/// hours). A key whose request is still in progress (its lease running) is
/// never removed; one whose lease ran out was abandoned by a crashed
/// request and goes like the others. Schedule it like `webhook_purge`.
/// Returns how many keys were removed.
#[pg_extern(
    volatile,
    security_definer,
    parallel_unsafe,
    name = "idempotency_purge"
)]
#[search_path(pg_catalog, pg_temp)]
fn purge_keys(older_than: default!(Option<Interval>, "NULL")) -> PgResult<i64> {
    const F: &str = "idempotency_purge";
    let older_than = match older_than {
        None => crate::gucs::idempotency_retention(),
        Some(iv) if iv.as_micros() <= 0 => {
            return Err(WebhookError::NonPositiveInterval {
                function: F,
                arg: "older_than",
            }
            .into())
        }
        Some(iv) => iv,
    };
    Ok(Spi::connect_mut(|client| {
        let removed = PURGE.run(client, &[older_than.into()])?.next();
        Ok::<_, WebhookError>(match removed {
            Some(row) => row.get::<i64>(1)?.unwrap_or(0),
            None => 0,
        })
    })?)
}

static PURGE: Statement = Statement {
    sql: "WITH removed AS (
              DELETE FROM webhook.idempotency_keys
               WHERE created_at < pg_catalog.now() - $1
                 AND NOT (status = 'in_progress' AND locked_until > pg_catalog.clock_timestamp())
           RETURNING 1)
          SELECT pg_catalog.count(*) FROM removed",
    arg_types: &[pg_sys::INTERVALOID],
};

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

    #[test]
    fn fingerprints_cover_method_path_and_body() {
        let base = fingerprint(Some("POST"), Some("/orders"), b"{}").unwrap();
        assert_eq!(
            base,
            fingerprint(Some("post"), Some("/orders"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("PUT"), Some("/orders"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("POST"), Some("/orders/1"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("POST"), Some("/orders"), b"{ }").unwrap()
        );
        assert!(base.starts_with("sha256:") && base.len() == 71);
    }
}
