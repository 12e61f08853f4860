//! What the request that owns a key does next: record a recovery point,
//! finish, or fail. Each is one UPDATE fenced by the request id under the
//! key's lock (see `fence`).

use super::{MAX_ERROR_BYTES, MAX_OUTPUT_BYTES, MAX_RECOVERY_BYTES, MAX_STEP_BYTES};
use crate::errors::{Owner, PgResult, Result, Standing, WebhookError};
use crate::event_lock::EventLock;
use crate::fence::Fence;
use crate::input;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::status::KeyStatus;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

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
    crate::standby::refuse_writes(F)?;
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
            |row| {
                // Every step's output is rewritten with each checkpoint:
                // bounded, so that a request with many steps cannot make
                // each one cost more than the last without end. Over the
                // bound, the error rolls the checkpoint back.
                let size = row.get::<i32>(1)?.unwrap_or(0);
                let size = usize::try_from(size).unwrap_or(0);
                if size > MAX_RECOVERY_BYTES {
                    return Err(WebhookError::ArgumentTooLong {
                        function: F,
                        arg: "output",
                        limit: MAX_RECOVERY_BYTES,
                        actual: size,
                    });
                }
                Ok(())
            },
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
       RETURNING pg_catalog.pg_column_size(recovery)",
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
    crate::standby::refuse_writes(F)?;
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
    crate::standby::refuse_writes(F)?;
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
            |_| Ok(()),
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
    read: impl FnOnce(&crate::plans::Row<'_>) -> Result<()>,
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
    fence.update(client, statement, args, read, |client| {
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
    })
}

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
            |_| Ok(()),
        )
    }
}
