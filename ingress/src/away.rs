//! Whether a database error means the database is away (restarting,
//! failing over, out of connections, unreachable from a pooler, or this
//! connection is to a standby now) rather than an answer about the delivery: the first is retried on
//! another connection until the request's deadline, the second is not.

use tokio_postgres::error::SqlState;

/// Away: worth another connection and another try.
pub fn is_away(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    match err.code() {
        // Class 08, a connection exception: the link to the server is what
        // failed. A pooler says so with it when its server is away
        // (PgBouncer: 08P01 "server login has been failing", "server conn
        // crashed?", "query_wait_timeout").
        Some(code) if code.code().starts_with("08") => true,
        Some(code) => [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            // A standby now (after a failover), or the extension's own
            // refusal there: the next connection finds the primary when
            // the connection string says target_session_attrs=read-write.
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
        ]
        .contains(code),
        // No SQLSTATE: away if the socket, not the server, said no (a
        // refused or broken connection, a connect timeout); anything else
        // is a fault here, not worth a retry.
        None => std::error::Error::source(err).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// The server's message, or the driver's when the server said nothing.
pub fn message(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => db.message().to_string(),
        None => err.to_string(),
    }
}

/// What a prepared statement's error says when a transaction pooler is
/// between this process and the database but `--pooler` does not say so:
/// the statement was prepared on one server connection and run on another.
pub fn pooler_hint(err: &tokio_postgres::Error) -> Option<&'static str> {
    let code = err.code()?;
    (*code == SqlState::INVALID_SQL_STATEMENT_NAME || *code == SqlState::DUPLICATE_PSTATEMENT)
        .then_some(
        "a transaction pooler between webhook-ingress and the database? Set --pooler transaction",
    )
}
