//! Every error the extension raises, each with its own SQLSTATE.
//!
//! Handlers in any language branch on the SQLSTATE, not on the message text,
//! so each kind of failure maps to exactly one code and keeps it across
//! releases. The message always names the offending argument.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgSqlErrorCode;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookError {
    /// A required argument was NULL.
    NullArgument {
        function: &'static str,
        arg: &'static str,
    },
    /// A text argument that identifies something was the empty string.
    EmptyArgument {
        function: &'static str,
        arg: &'static str,
    },
    /// A text argument exceeded its documented byte limit.
    ArgumentTooLong {
        function: &'static str,
        arg: &'static str,
        limit: usize,
        actual: usize,
    },
    /// A payload or raw body larger than `webhook.max_payload_size`.
    PayloadTooLarge {
        function: &'static str,
        arg: &'static str,
        limit: usize,
        actual: usize,
    },
    /// An interval argument was zero or negative.
    NonPositiveInterval {
        function: &'static str,
        arg: &'static str,
    },
    /// An argument outside what the function accepts; `rule` says what it
    /// accepts.
    InvalidArgument {
        function: &'static str,
        arg: &'static str,
        rule: &'static str,
    },
    /// A lease longer than `webhook.max_lease`.
    LeaseTooLong {
        function: &'static str,
        arg: &'static str,
        limit_seconds: i32,
    },
    /// A raw body was not valid UTF-8.
    InvalidUtf8 {
        function: &'static str,
        arg: &'static str,
        detail: String,
    },
    /// A body or payload was not parseable JSON.
    InvalidJson {
        function: &'static str,
        arg: &'static str,
        detail: String,
    },
    /// A body or payload was JSON, but not a JSON object.
    NotAnObject {
        function: &'static str,
        arg: &'static str,
        found: &'static str,
    },
    /// No delivery with this id exists.
    UnknownDelivery { function: &'static str, id: String },
    /// The delivery exists but never owned its event (it was answered
    /// `duplicate` or `in_progress`), so there is nothing to finish.
    NotOwner {
        function: &'static str,
        id: String,
        claim_status: String,
    },
    /// webhook_extend on a claim that completes on commit: it holds no
    /// lease, its transaction holds the event.
    NoLease { function: &'static str, id: String },
    /// A fenced update (see `fence`) changed nothing: its owner lost what
    /// it owned, finished it already, or never existed.
    Fenced {
        function: &'static str,
        owner: Owner,
        id: String,
        standing: Standing,
    },
    /// A completion of an ordered event whose entity's watermark moved past
    /// it while it was processed: a newer event of the entity completed
    /// first, so committing this one's work would overwrite newer state.
    Stale {
        function: &'static str,
        id: String,
        detail: String,
    },
    /// The library is newer than the installed SQL, and what was asked
    /// needs a table of the newer release: `ALTER EXTENSION … UPDATE` has
    /// not run yet.
    SchemaNotUpdated {
        function: &'static str,
        needs: &'static str,
    },
    /// One transaction claiming or queueing more events than the lock
    /// table can hold locks for (see `event_lock::budget`).
    TooManyEventsInTransaction {
        function: &'static str,
        limit: usize,
    },
    /// webhook_requeue was given an event that does not exist.
    UnknownEvent {
        function: &'static str,
        provider: String,
        event_id: String,
    },
    /// webhook_requeue on an event that is processing or processed.
    NotRequeueable {
        function: &'static str,
        status: String,
    },
    /// A provider nobody registered.
    UnknownProvider {
        function: &'static str,
        arg: &'static str,
        given: String,
    },
    /// A signature scheme nobody knows; `known` lists the ones that exist.
    UnknownScheme {
        function: &'static str,
        arg: &'static str,
        given: String,
        known: String,
    },
    /// A generic `hmac;…` scheme string with a bad option.
    BadSchemeOption {
        function: &'static str,
        arg: &'static str,
        given: String,
        detail: String,
    },
    /// An HMAC algorithm that is not implemented.
    UnknownAlgorithm {
        function: &'static str,
        arg: &'static str,
        given: String,
    },
    /// A signature that is neither hex nor base64 of the digest's length.
    MalformedSignature {
        function: &'static str,
        arg: &'static str,
        detail: String,
    },
    /// The session's role is scoped (`scopes`) and what was asked lies
    /// outside its scope.
    OutOfScope {
        function: &'static str,
        arg: &'static str,
        role: String,
        denied: Denied,
        /// What the role's scopes allow, for the detail.
        allowed: String,
    },
    /// `webhook.slot` and `webhook.slots` do not name one slot of a
    /// power-of-two number of them.
    BadSlotSettings {
        function: &'static str,
        slot: i32,
        slots: i32,
    },
    /// A delivery whose route key hashes to another slot than the one
    /// this database holds (`route`): a proxy's cluster map is out of date.
    Misrouted {
        function: &'static str,
        holding: i32,
        slots: i32,
        routes_to: i32,
        key: String,
    },
    /// A function that writes, called on a standby (see `standby`).
    OnStandby { function: &'static str },
    /// An SPI failure: a bug or a broken installation, never the caller's input.
    Internal(String),
}

/// What a scoped role was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Events of this provider.
    Provider(String),
    /// This provider's events for this consumer.
    Consumer { provider: String, consumer: String },
    /// Every provider's events at once (`webhook_next` without one).
    AnyProvider,
}

/// Who a fenced update (see `fence`) names as the owner of what it
/// changes: what the error calls it, and who takes over from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A claimed delivery (`webhook_claim`, `webhook_receive`): owns its
    /// row of `webhook.events`.
    Delivery,
    /// A lease from `webhook_next`: owns its row of `webhook.inbox`. The
    /// finishing functions take either id, so an unknown one is neither.
    Lease,
    /// A request under an idempotency key (`idempotency_begin`): owns its
    /// row of `webhook.idempotency_keys`.
    Request,
}

impl Owner {
    fn argument(self) -> &'static str {
        match self {
            Owner::Delivery | Owner::Lease => "id",
            Owner::Request => "request_id",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Owner::Delivery => "delivery",
            Owner::Lease => "delivery or lease",
            Owner::Request => "request",
        }
    }

    fn rival(self) -> &'static str {
        match self {
            Owner::Delivery => "another claim",
            Owner::Lease => "another worker",
            Owner::Request => "another request with the same idempotency key",
        }
    }

    fn hint_when_lost(self) -> &'static str {
        match self {
            Owner::Delivery | Owner::Lease => {
                "Roll back this transaction: another worker owns the event now. \
                 Use a longer lease or webhook_extend() for long work."
            }
            Owner::Request => {
                "Roll back this transaction: another request with the same key took it over after \
                 this one's lease ran out. Use a longer lease, or record recovery points more often."
            }
        }
    }
}

/// Where an owner stands when its fenced update changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Its lease ran out and another owner took over (55006): the caller
    /// rolls back, so its work is not committed twice.
    Lost { detail: String },
    /// It finished already, as `status` says (55000).
    Finished { status: String },
    /// No such owner (P0002).
    Unknown,
}

impl WebhookError {
    pub fn sqlstate(&self) -> PgSqlErrorCode {
        use PgSqlErrorCode::*;
        match self {
            Self::NullArgument { .. } => ERRCODE_NULL_VALUE_NOT_ALLOWED, // 22004
            Self::EmptyArgument { .. } => ERRCODE_ZERO_LENGTH_CHARACTER_STRING, // 2200F
            Self::ArgumentTooLong { .. } => ERRCODE_STRING_DATA_RIGHT_TRUNCATION, // 22001
            Self::PayloadTooLarge { .. } => ERRCODE_PROGRAM_LIMIT_EXCEEDED, // 54000
            Self::NonPositiveInterval { .. } => ERRCODE_INVALID_PARAMETER_VALUE, // 22023
            Self::LeaseTooLong { .. } => ERRCODE_INVALID_PARAMETER_VALUE, // 22023
            Self::InvalidArgument { .. } => ERRCODE_INVALID_PARAMETER_VALUE, // 22023
            Self::InvalidUtf8 { .. } => ERRCODE_CHARACTER_NOT_IN_REPERTOIRE, // 22021
            Self::InvalidJson { .. } => ERRCODE_INVALID_JSON_TEXT,       // 22032
            Self::NotAnObject { .. } => ERRCODE_SQL_JSON_OBJECT_NOT_FOUND, // 2203C
            Self::UnknownDelivery { .. } => ERRCODE_NO_DATA_FOUND,       // P0002
            Self::NotOwner { .. } => ERRCODE_INSUFFICIENT_PRIVILEGE,     // 42501
            Self::OutOfScope { .. } => ERRCODE_INSUFFICIENT_PRIVILEGE,   // 42501
            Self::Fenced { standing, .. } => match standing {
                Standing::Lost { .. } => ERRCODE_OBJECT_IN_USE, // 55006
                Standing::Finished { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, // 55000
                Standing::Unknown => ERRCODE_NO_DATA_FOUND,     // P0002
            },
            Self::NoLease { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, // 55000
            Self::Stale { .. } => ERRCODE_T_R_SERIALIZATION_FAILURE,          // 40001
            Self::UnknownAlgorithm { .. } => ERRCODE_UNDEFINED_OBJECT,        // 42704
            Self::UnknownScheme { .. } => ERRCODE_UNDEFINED_OBJECT,           // 42704
            Self::UnknownProvider { .. } => ERRCODE_UNDEFINED_OBJECT,         // 42704
            Self::UnknownEvent { .. } => ERRCODE_NO_DATA_FOUND,               // P0002
            Self::NotRequeueable { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, // 55000
            Self::SchemaNotUpdated { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, // 55000
            Self::TooManyEventsInTransaction { .. } => ERRCODE_PROGRAM_LIMIT_EXCEEDED, // 54000
            Self::BadSchemeOption { .. } => ERRCODE_SYNTAX_ERROR,             // 42601
            Self::MalformedSignature { .. } => ERRCODE_INVALID_TEXT_REPRESENTATION, // 22P02
            Self::BadSlotSettings { .. } => ERRCODE_INVALID_PARAMETER_VALUE,  // 22023
            Self::Misrouted { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, // 55000
            Self::OnStandby { .. } => ERRCODE_READ_ONLY_SQL_TRANSACTION,      // 25006
            Self::Internal(_) => ERRCODE_INTERNAL_ERROR,                      // XX000
        }
    }

    fn detail(&self) -> Option<String> {
        match self {
            Self::ArgumentTooLong { limit, actual, .. }
            | Self::PayloadTooLarge { limit, actual, .. } => Some(format!(
                "The limit is {limit} bytes; {actual} bytes were given."
            )),
            Self::InvalidUtf8 { detail, .. }
            | Self::InvalidJson { detail, .. }
            | Self::Stale { detail, .. }
            | Self::MalformedSignature { detail, .. }
            | Self::BadSchemeOption { detail, .. } => Some(detail.clone()),
            Self::OutOfScope { allowed, .. } => Some(format!("Its scope allows {allowed}.")),
            Self::Misrouted { key, .. } => Some(format!("Its route key is {key}.")),
            Self::Fenced {
                standing: Standing::Lost { detail },
                ..
            } => Some(detail.clone()),
            _ => None,
        }
    }

    fn hint(&self) -> Option<&'static str> {
        match self {
            Self::PayloadTooLarge { .. } => Some("The limit is the setting webhook.max_payload_size."),
            Self::LeaseTooLong { .. } => Some(
                "Long work renews a short lease with webhook_extend(); a superuser may raise webhook.max_lease.",
            ),
            Self::NoLease { .. } => Some(
                "Its transaction holds the event until it ends, however long that takes: there is \
                 nothing to extend.",
            ),
            Self::NotOwner { .. } => Some(
                "Only a delivery answered \"claimed\" or \"retry\", or a lease from webhook_next, \
                 may be completed, failed or extended.",
            ),
            Self::Fenced {
                owner,
                standing: Standing::Lost { .. },
                ..
            } => Some(owner.hint_when_lost()),
            Self::Stale { .. } => Some(
                "Roll back this transaction, as after any serialization failure: a newer event of the \
                 same entity was processed first. The event's next delivery is answered \"stale\", and \
                 an inbox lease of it is parked as stale.",
            ),
            Self::UnknownAlgorithm { .. } => Some("Use one of: sha256, sha1, sha512."),
            Self::OutOfScope {
                denied: Denied::AnyProvider,
                ..
            } => Some("Name one of them: webhook_next(provider => '<name>', ...)."),
            Self::OutOfScope { .. } => Some(
                "A DBA sets application roles' scopes with webhook_scope_app(role, providers, consumers); \
                 webhook.app_scopes lists them.",
            ),
            Self::TooManyEventsInTransaction { .. } => Some(
                "Each event holds a lock until its transaction commits: commit in batches, or queue \
                 a backfill with CALL webhook_enqueue_batches(provider, events), which commits every \
                 batch_size events.",
            ),
            Self::SchemaNotUpdated { .. } => Some(
                "Run ALTER EXTENSION pg_webhook_inbox UPDATE: the library was updated, its tables not yet. \
                 Until then the provider's retries bring the delivery again.",
            ),
            Self::NotRequeueable { .. } => {
                Some("A processed event is never requeued: that would process it twice.")
            }
            Self::UnknownProvider { .. } => {
                Some("Register it first: SELECT * FROM webhook_register_provider('<name>', secret => '...').")
            }
            Self::BadSchemeOption { .. } => Some(
                "Options are for the generic hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>] and for paypal;webhook_id=<id>; other schemes take none.",
            ),
            Self::BadSlotSettings { .. } => Some(
                "SELECT webhook_set_slot(slot, slots) sets both: slots a power of two, slot below it.",
            ),
            Self::Misrouted { .. } => Some(
                "The proxy's cluster map sends this slot's deliveries elsewhere, or this database was moved: \
                 check the tier's partitions (docs/scale-out.md). The provider retries the delivery.",
            ),
            Self::OnStandby { .. } => Some(STANDBY_HINT),
            Self::MalformedSignature { .. } => Some(
                "Give the digest as hex or base64, optionally prefixed with the algorithm (\"sha256=...\").",
            ),
            _ => None,
        }
    }
}

impl fmt::Display for WebhookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NullArgument { function, arg } => {
                write!(f, "{function}: argument \"{arg}\" must not be NULL")
            }
            Self::EmptyArgument { function, arg } => {
                write!(f, "{function}: argument \"{arg}\" must not be empty")
            }
            Self::ArgumentTooLong { function, arg, limit, .. } => {
                write!(f, "{function}: argument \"{arg}\" is longer than {limit} bytes")
            }
            Self::PayloadTooLarge { function, arg, .. } => {
                write!(f, "{function}: argument \"{arg}\" is larger than webhook.max_payload_size")
            }
            Self::NonPositiveInterval { function, arg } => {
                write!(f, "{function}: argument \"{arg}\" must be a positive interval")
            }
            Self::InvalidArgument { function, arg, rule } => {
                write!(f, "{function}: argument \"{arg}\" {rule}")
            }
            Self::LeaseTooLong { function, arg, limit_seconds } => write!(
                f,
                "{function}: argument \"{arg}\" is longer than webhook.max_lease ({limit_seconds} s)"
            ),
            Self::InvalidUtf8 { function, arg, .. } => {
                write!(f, "{function}: argument \"{arg}\" is not valid UTF-8")
            }
            Self::InvalidJson { function, arg, .. } => {
                write!(f, "{function}: argument \"{arg}\" is not valid JSON")
            }
            Self::NotAnObject { function, arg, found } => {
                write!(f, "{function}: argument \"{arg}\" must be a JSON object, not {found}")
            }
            Self::UnknownDelivery { function, id } => {
                write!(f, "{function}: argument \"id\": no delivery {id}")
            }
            Self::NotOwner { function, id, claim_status } => write!(
                f,
                "{function}: argument \"id\": delivery {id} was answered \"{claim_status}\" and does not own its event"
            ),
            Self::Fenced { function, owner, id, standing } => {
                let (arg, noun) = (owner.argument(), owner.noun());
                match standing {
                    Standing::Lost { .. } => write!(
                        f,
                        "{function}: argument \"{arg}\": {noun} {id} lost its lease to {}",
                        owner.rival()
                    ),
                    Standing::Finished { status } => {
                        write!(f, "{function}: argument \"{arg}\": {noun} {id} is already {status}")
                    }
                    Standing::Unknown => write!(f, "{function}: argument \"{arg}\": no {noun} {id}"),
                }
            }
            Self::NoLease { function, id } => write!(
                f,
                "{function}: argument \"id\": delivery {id} completes on commit and holds no lease"
            ),
            Self::Stale { function, id, .. } => write!(
                f,
                "{function}: argument \"id\": the event of {id} is stale: a newer event of its entity was processed first"
            ),
            Self::UnknownAlgorithm { function, arg, given } => {
                write!(f, "{function}: argument \"{arg}\": unknown HMAC algorithm \"{given}\"")
            }
            Self::UnknownScheme { function, arg, given, known } => write!(
                f,
                "{function}: argument \"{arg}\": unknown signature scheme \"{given}\"; known: {known}"
            ),
            Self::UnknownEvent { function, provider, event_id } => write!(
                f,
                "{function}: argument \"event_id\": no event \"{event_id}\" from provider \"{provider}\""
            ),
            Self::TooManyEventsInTransaction { function, limit } => write!(
                f,
                "{function}: this transaction holds {limit} events already, as many as the lock table allows one transaction"
            ),
            Self::SchemaNotUpdated { function, needs } => write!(
                f,
                "{function}: {needs} needs the tables of this library's release, which are not installed yet"
            ),
            Self::NotRequeueable { function, status } => write!(
                f,
                "{function}: argument \"event_id\": the event is {status}; only dead or failed events can be requeued"
            ),
            Self::OutOfScope { function, arg, role, denied, .. } => match denied {
                Denied::Provider(provider) => write!(
                    f,
                    "{function}: argument \"{arg}\": role \"{role}\" may not use provider \"{provider}\""
                ),
                Denied::Consumer { provider, consumer } => write!(
                    f,
                    "{function}: argument \"{arg}\": role \"{role}\" may not use consumer \"{consumer}\" of provider \"{provider}\""
                ),
                Denied::AnyProvider => write!(
                    f,
                    "{function}: argument \"{arg}\" must name a provider: role \"{role}\" is scoped to some providers"
                ),
            },
            Self::UnknownProvider { function, arg, given } => {
                write!(f, "{function}: argument \"{arg}\": no provider \"{given}\" is registered")
            }
            Self::BadSchemeOption { function, arg, given, .. } => {
                write!(f, "{function}: argument \"{arg}\": invalid scheme \"{given}\"")
            }
            Self::MalformedSignature { function, arg, .. } => {
                write!(f, "{function}: argument \"{arg}\" is not a well-formed signature")
            }
            Self::BadSlotSettings { function, slot, slots } => write!(
                f,
                "{function}: settings \"webhook.slot\" ({slot}) and \"webhook.slots\" ({slots}) do not name one slot of a power-of-two number of slots"
            ),
            Self::Misrouted { function, holding, slots, routes_to, .. } => write!(
                f,
                "{function}: argument \"body\": this database holds slot {holding} of {slots}, and the delivery routes to slot {routes_to}"
            ),
            Self::OnStandby { function } => write!(
                f,
                "{function}: this server is a standby (in recovery) and takes no writes"
            ),
            Self::Internal(msg) => write!(f, "pg_webhook_inbox internal error: {msg}"),
        }
    }
}

impl From<WebhookError> for ErrorReport {
    #[track_caller]
    fn from(err: WebhookError) -> Self {
        let mut report = ErrorReport::new(err.sqlstate(), err.to_string(), "pg_webhook_inbox");
        if let Some(detail) = err.detail() {
            report = report.set_detail(detail);
        }
        if let Some(hint) = err.hint() {
            report = report.set_hint(hint);
        }
        report
    }
}

impl From<pgrx::spi::SpiError> for WebhookError {
    fn from(err: pgrx::spi::SpiError) -> Self {
        Self::Internal(err.to_string())
    }
}

/// What to do on a standby; the SQL functions' refusal
/// (`webhook._refuse_on_standby`) gives the same hint.
const STANDBY_HINT: &str =
    "Writes go to the primary: list every host in the connection string with \
target_session_attrs=read-write, and the client finds the primary after a failover \
(docs/high-availability.md).";

pub type Result<T> = std::result::Result<T, WebhookError>;

/// What a `#[pg_extern]` returns: pgrx reports an `ErrorReport` with its
/// own SQLSTATE, where any other error type would become SQLSTATE 22000.
/// Functions returning a `TableIterator` spell the `Result` out instead:
/// pgrx reads their column list from the written-out type.
pub type PgResult<T> = std::result::Result<T, ErrorReport>;
