//! Trace context: the W3C `traceparent` of the request that queued an
//! event, kept beside its archive row (`webhook.trace_contexts`) and
//! handed to the worker that leases the event (`webhook_next`), so that
//! the work done later belongs to the request's trace.
//!
//! Intake takes it as an argument, from the application's own server span:
//! a `traceparent` header as the sender sent it is not signed, and anyone
//! who can reach the endpoint could pick the trace a worker joins. Only a
//! delivery that queues its event keeps one (a duplicate's worker is the
//! first delivery's); a delivery given none costs nothing.

use crate::errors::{Result, WebhookError};
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The argument's name, in every intake function.
pub const ARGUMENT: &str = "traceparent";

/// The W3C form, version `00`: `00-` 32 hex digits (trace id) `-` 16 hex
/// digits (parent id) `-` 2 hex digits (flags), lowercase, neither id all
/// zeros. A later version may append fields after a dash (up to 512 bytes
/// in all); `ff` is never valid.
pub fn checked<'a>(function: &'static str, value: Option<&'a str>) -> Result<Option<&'a str>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let invalid = || WebhookError::InvalidArgument {
        function,
        arg: ARGUMENT,
        rule: "must be a W3C traceparent: 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, \
               lowercase, neither id all zeros",
    };
    let bytes = value.as_bytes();
    let hex = |part: &[u8]| part.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let zero = |part: &[u8]| part.iter().all(|b| *b == b'0');
    if !(55..=512).contains(&bytes.len())
        || (bytes.len() > 55 && (bytes[..2] == *b"00" || bytes[55] != b'-'))
    {
        return Err(invalid());
    }
    let (version, trace_id, parent_id, flags) =
        (&bytes[0..2], &bytes[3..35], &bytes[36..52], &bytes[53..55]);
    let dashes = bytes[2] == b'-' && bytes[35] == b'-' && bytes[52] == b'-';
    if !dashes
        || !hex(version)
        || version == b"ff"
        || !hex(trace_id)
        || zero(trace_id)
        || !hex(parent_id)
        || zero(parent_id)
        || !hex(flags)
    {
        return Err(invalid());
    }
    Ok(Some(value))
}

static RECORD: Statement = Statement {
    sql: "INSERT INTO webhook.trace_contexts (delivery_id, traceparent) VALUES ($1, $2)",
    arg_types: &[pg_sys::UUIDOID, pg_sys::TEXTOID],
};

/// Keep `traceparent` for the delivery `id` that queued its event.
pub fn record(client: &mut SpiClient<'_>, id: pgrx::Uuid, traceparent: &str) -> Result<()> {
    RECORD.run(client, &[id.into(), traceparent.into()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::checked;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_w3c_examples_and_later_versions_pass() {
        assert_eq!(checked("f", Some(VALID)).unwrap(), Some(VALID));
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
        assert_eq!(checked("f", Some(later)).unwrap(), Some(later));
        assert_eq!(checked("f", None).unwrap(), None);
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "00",
            &VALID[..54],
            &format!("{VALID}-extra"),
            &VALID.to_uppercase(),
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert!(checked("f", Some(bad)).is_err(), "{bad:?}");
        }
    }
}
