//! Per-entity ordering: a stale event never overwrites newer state.
//!
//! No provider delivers in order, and retries make it worse: an
//! `updated` from an hour ago can arrive after the one from a minute ago.
//! A provider registered with an entity key and an order value (both read
//! from the signed body, see `read`) gets a **watermark** per entity and
//! consumer in `webhook.watermarks`: the order value of the newest event
//! of that entity processed so far.
//!
//! * A claim (`webhook_receive`) of an event older than its entity's
//!   watermark is answered `stale`: nothing to do, 2xx, archived as
//!   SKIPPED with the reason. One whose order value equals the watermark
//!   is a tie: processed, unless the provider treats ties as stale.
//! * The watermark moves in the transaction that completes the event
//!   (`advance`), under the watermark row's lock, and only forwards. A
//!   completion that finds a newer watermark (the newer event completed
//!   while this one was being processed) is refused with SQLSTATE 40001,
//!   so its business writes roll back instead of overwriting newer state.
//! * The inbox parks stale events as `stale` when a worker would lease
//!   them, and, for providers registered with `fifo`, never hands out an
//!   event while an earlier one of its entity is leased or backing off.
//!
//! Order values are compared as numbers: integers and decimal strings as
//! they are (`created` in Unix seconds), RFC 3339 timestamps as the instant
//! they name, in seconds since the Unix epoch with their fraction, so a
//! timestamp and a Unix time compare as the times they mean.

use crate::errors::{Result, WebhookError};
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The consumer whose watermark claims move: claims have no consumers,
/// and `default` is also the inbox's consumer when a provider names none.
pub const CLAIM_CONSUMER: &str = "default";

/// Longest entity key kept; a longer one leaves the event unordered.
const MAX_ENTITY_KEY_BYTES: usize = 255;

/// Longest order value read; decimal strings past it are not order values.
const MAX_ORDER_VALUE_BYTES: usize = 64;

/// Where an event sits in its entity's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub entity_key: String,
    /// The order value as a decimal number (`numeric` input).
    pub value: String,
}

/// Read a delivery's entity key and order value from its body, at the
/// registry's paths (`body:<dotted.path>`, alternatives joined by `|`).
/// None: the body lacks either, or the order value is neither a number nor
/// an RFC 3339 timestamp; such an event is processed unordered. Only body
/// paths are read, whatever the registry holds: a header is not signed by
/// every scheme, and an unsigned value must never move a watermark.
pub fn read(entity_key_from: &str, order_from: &str, body: &serde_json::Value) -> Option<Order> {
    let entity_key = entity_key(entity_key_from, body)?;
    let value = order_value(&first_in_body(order_from, body)?)?;
    Some(Order { entity_key, value })
}

/// The entity key and order value of an event given to `webhook_claim` or
/// `webhook_enqueue`, when its provider is registered with ordering: read
/// from the payload as `webhook_receive` reads them from the body (those
/// calls trust their caller, who verified it, for the event id as well).
/// None: not ordered, or this event has no entity key or order value.
pub fn of_payload(
    client: &mut pgrx::spi::SpiClient<'_>,
    provider: &str,
    payload: &crate::jsonb::RawJsonb,
) -> crate::errors::Result<Option<Order>> {
    let Some(registered) = crate::registry::registered(client, provider)? else {
        return Ok(None);
    };
    let Some((entity_key_from, order_from)) = &registered.ordering else {
        return Ok(None);
    };
    let Some(document) = payload.to_json() else {
        return Ok(None);
    };
    let Some(order) = read(entity_key_from, order_from, &document) else {
        return Ok(None);
    };
    let max_future = i64::from(crate::gucs::ORDER_MAX_FUTURE.get());
    if !within_clock(&order.value, unix_now(), max_future) {
        pgrx::warning!(
            "argument \"payload\": order value {} of entity {:?} lies more than webhook.order_max_future ({} s) \
             past the clock; the event is taken unordered (it neither waits for nor moves its entity's watermark)",
            order.value,
            order.entity_key,
            max_future
        );
        return Ok(None);
    }
    Ok(Some(order))
}

/// Seconds since the Unix epoch now.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whether an order value lies at most `max_future` seconds past `now`,
/// read as a time: in seconds, or, past 10^11 (the year 5138 in seconds),
/// in milliseconds, past 10^14 in microseconds, past 10^17 in nanoseconds,
/// the units providers stamp events in. A payload handed to
/// `webhook_claim` or `webhook_enqueue` was verified by its caller, not
/// here: one dated centuries ahead would make every later event of its
/// entity stale, for good. Counters (versions, sequence numbers) read as
/// times long past and always pass.
pub fn within_clock(value: &str, now: i64, max_future: i64) -> bool {
    let whole = value.split('.').next().unwrap_or(value);
    if whole.starts_with('-') {
        return true;
    }
    // Past 38 digits it is beyond every clock.
    let Ok(n) = whole.parse::<u128>() else {
        return false;
    };
    let seconds = match n {
        n if n >= 100_000_000_000_000_000 => n / 1_000_000_000,
        n if n >= 100_000_000_000_000 => n / 1_000_000,
        n if n >= 100_000_000_000 => n / 1_000,
        n => n,
    };
    seconds <= (now.max(0) as u128).saturating_add(max_future.max(0) as u128)
}

/// An event's entity key, read as `read` reads it: what a tier of
/// databases routes an ordered provider's deliveries by (`route`).
pub fn entity_key(entity_key_from: &str, body: &serde_json::Value) -> Option<String> {
    first_in_body(entity_key_from, body).filter(|key| key.len() <= MAX_ENTITY_KEY_BYTES)
}

/// The first present `body:` alternative of a registry source.
fn first_in_body(source: &str, body: &serde_json::Value) -> Option<String> {
    source
        .split('|')
        .filter_map(|alternative| alternative.strip_prefix("body:"))
        .find_map(|path| crate::jsonb::body_value(body, path))
}

/// An order value as a decimal number: a decimal as it is, an RFC 3339
/// timestamp as seconds since the Unix epoch.
pub fn order_value(text: &str) -> Option<String> {
    if text.len() > MAX_ORDER_VALUE_BYTES {
        return None;
    }
    decimal(text).or_else(|| rfc3339_seconds(text))
}

/// `-?digits(.digits)?`, the form PostgreSQL's numeric reads exactly.
fn decimal(text: &str) -> Option<String> {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && fraction.is_none_or(digits)).then(|| text.to_string())
}

/// An RFC 3339 date-time (`2024-05-01T12:00:00.5+02:00`; `T` may be `t` or
/// a space, `Z` may be `z`) as seconds since the Unix epoch, its fraction
/// kept digit for digit. A leap second reads as the second after it.
fn rfc3339_seconds(text: &str) -> Option<String> {
    let (seconds, fraction) = crate::timestamps::rfc3339_parts(text)?;
    Some(if fraction.is_empty() {
        seconds.to_string()
    } else if seconds < 0 {
        // -1.25 is 1.25 s before the epoch: the whole part and the
        // fraction must carry the same sign.
        let borrowed = seconds + 1;
        match complement_fraction(fraction) {
            Some(c) => format!("{}{}.{c}", if borrowed == 0 { "-" } else { "" }, borrowed),
            None => seconds.to_string(),
        }
    } else {
        format!("{seconds}.{fraction}")
    })
}

/// `1 - 0.<fraction>` as fraction digits (its ten's complement), or None
/// when the fraction is 0.
fn complement_fraction(fraction: &str) -> Option<String> {
    let last_nonzero = fraction.bytes().rposition(|d| d != b'0')?;
    let digits: Vec<u8> = fraction
        .bytes()
        .enumerate()
        .map(|(i, d)| match i.cmp(&last_nonzero) {
            std::cmp::Ordering::Less => b'9' - (d - b'0'),
            std::cmp::Ordering::Equal => b'0' + (10 - (d - b'0')),
            std::cmp::Ordering::Greater => b'0',
        })
        .collect();
    Some(String::from_utf8(digits).expect("ASCII digits"))
}

/// Where a delivery stands against its entity's watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than the watermark, or the entity has none yet.
    Fresh,
    /// As new as the watermark, and the provider processes ties.
    Tie,
    /// Older than the watermark, or a tie the provider treats as stale.
    Stale { tie: bool, reason: String },
}

/// Why an event is skipped, as an SQL expression of its order value and
/// entity key and its entity's watermark and the event that set it: the
/// one wording the archive, the events and the inbox record.
macro_rules! stale_reason {
    ($order:literal, $entity:literal, $watermark:literal, $set_by:literal) => {
        concat!(
            "'stale: order ' || ",
            $order,
            " || ' of entity ' || ",
            $entity,
            " || CASE WHEN ",
            $watermark,
            " = ",
            $order,
            " THEN ' is tied with' ELSE ' is older than' END || ' its watermark ' || ",
            $watermark,
            " || ' (event ' || ",
            $set_by,
            " || ')'"
        )
    };
}
pub(crate) use stale_reason;

/// The committed watermark of an entity, compared with an order value:
/// `(newer than it, equal to it, ties are stale, why it would be stale)`.
static JUDGE: Statement = Statement {
    sql: concat!(
        "SELECT w.order_value > $5::numeric, w.order_value = $5::numeric,
                EXISTS (SELECT FROM webhook.providers p WHERE p.name = $1 AND p.ties = 'stale'), ",
        stale_reason!("$5::numeric", "$3", "w.order_value", "w.event_id"),
        "  FROM webhook.watermarks w
          WHERE w.provider = $1 AND w.consumer = $2 AND w.entity_key = $3 AND w.event_id <> $4"
    ),
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
    ],
};

/// The arguments of JUDGE and ADVANCE: provider, consumer, entity key,
/// event id, order value.
fn arguments<'a>(
    provider: &'a str,
    consumer: &'a str,
    event_id: &'a str,
    order: &'a Order,
) -> [pgrx::datum::DatumWithOid<'a>; 5] {
    [
        provider.into(),
        consumer.into(),
        order.entity_key.as_str().into(),
        event_id.into(),
        order.value.as_str().into(),
    ]
}

/// Judge an event against its entity's committed watermark, without
/// locking anything (a claim never waits). A watermark set by this very
/// event is no reason to skip it.
pub fn judge(
    client: &mut SpiClient<'_>,
    provider: &str,
    consumer: &str,
    event_id: &str,
    order: &Order,
) -> Result<Verdict> {
    let rows = JUDGE.run(client, &arguments(provider, consumer, event_id, order))?;
    match rows.into_iter().next() {
        Some(row) => verdict(&row),
        None => Ok(Verdict::Fresh),
    }
}

/// The verdict in a row `(newer, equal, ties are stale, reason)`.
fn verdict(row: &crate::plans::Row<'_>) -> Result<Verdict> {
    let newer = row.get::<bool>(1)?.unwrap_or(false);
    let equal = row.get::<bool>(2)?.unwrap_or(false);
    let ties_stale = row.get::<bool>(3)?.unwrap_or(false);
    let reason = || -> Result<String> { Ok(row.get::<String>(4)?.unwrap_or_default()) };
    Ok(if newer {
        Verdict::Stale {
            tie: false,
            reason: reason()?,
        }
    } else if equal && ties_stale {
        Verdict::Stale {
            tie: true,
            reason: reason()?,
        }
    } else if equal {
        Verdict::Tie
    } else {
        Verdict::Fresh
    })
}

/// Move the watermark to this event's order value if it is newer, under
/// the watermark row's lock: a concurrent completion of the same entity
/// waits here for the other transaction and then reads what it committed
/// (or, if it rolled back, what was there before). Returns the verdict's
/// row, against the watermark as it now is.
static ADVANCE: Statement = Statement {
    sql: concat!(
        "INSERT INTO webhook.watermarks AS w (provider, consumer, entity_key, order_value, event_id)
         VALUES ($1, $2, $3, $5::numeric, $4)
         ON CONFLICT ON CONSTRAINT watermarks_pkey DO UPDATE
            SET order_value = GREATEST(w.order_value, excluded.order_value),
                event_id = CASE WHEN excluded.order_value > w.order_value
                                THEN excluded.event_id ELSE w.event_id END,
                updated_at = CASE WHEN excluded.order_value > w.order_value
                                  THEN pg_catalog.now() ELSE w.updated_at END
      RETURNING w.order_value > $5::numeric, w.order_value = $5::numeric AND w.event_id <> $4,
                EXISTS (SELECT FROM webhook.providers p WHERE p.name = $1 AND p.ties = 'stale'), ",
        stale_reason!("$5::numeric", "$3", "w.order_value", "w.event_id")
    ),
    arg_types: JUDGE.arg_types,
};

/// The watermark move of a completion: refused (SQLSTATE 40001, so the
/// caller's business writes roll back) when a newer event of the entity
/// completed first, or an equal one and ties are stale.
pub fn advance(
    client: &mut SpiClient<'_>,
    function: &'static str,
    id: pgrx::Uuid,
    provider: &str,
    consumer: &str,
    event_id: &str,
    order: &Order,
) -> Result<()> {
    let rows = ADVANCE.run(client, &arguments(provider, consumer, event_id, order))?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| WebhookError::Internal("watermark upsert returned nothing".into()))?;
    match verdict(&row)? {
        Verdict::Stale { reason, .. } => Err(WebhookError::Stale {
            function,
            id: id.to_string(),
            detail: reason,
        }),
        Verdict::Fresh | Verdict::Tie => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_order_value_past_the_clock_is_caught_in_every_unit() {
        let now = 1_800_000_000; // 2027-01-15
        let day = 86_400;
        for ahead in [
            "9999999999",
            "9999999999999",
            "9999999999999999",
            "9999999999999999999",
            &"9".repeat(60),
        ] {
            assert!(!within_clock(ahead, now, day), "{ahead}");
        }
        for fine in [
            "1800000000",
            "1800086400",
            "1800000000123",
            "1800000000123456",
            "1800000000123456789",
            "1",
            "42.5",
            "-9999999999999",
            "1799999999.999",
        ] {
            assert!(within_clock(fine, now, day), "{fine}");
        }
        assert!(!within_clock("1800086401", now, day));
        assert!(!within_clock(
            &order_value("2286-11-20T17:46:40Z").unwrap(),
            now,
            day
        ));
        assert!(within_clock(
            &order_value("2027-01-15T12:00:00Z").unwrap(),
            now,
            day
        ));
    }

    #[test]
    fn decimals_are_kept_as_written() {
        assert_eq!(order_value("1700000000").as_deref(), Some("1700000000"));
        assert_eq!(order_value("-12.50").as_deref(), Some("-12.50"));
        for bad in ["", "-", "1.", ".5", "1e9", "0x10", " 1", "1 ", "NaN", "+1"] {
            assert_eq!(order_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timestamps_are_seconds_since_the_epoch() {
        let cases = [
            ("1970-01-01T00:00:00Z", "0"),
            ("2023-11-14T22:13:20Z", "1700000000"),
            ("2023-11-14T23:13:20+01:00", "1700000000"),
            ("2023-11-14t17:13:20-05:00", "1700000000"),
            ("2023-11-14 22:13:20.621022z", "1700000000.621022"),
            ("2000-02-29T00:00:00Z", "951782400"),
            ("1969-12-31T23:59:59Z", "-1"),
            ("1969-12-31T23:59:58.75Z", "-1.25"),
            ("1969-12-31T23:59:59.5Z", "-0.5"),
        ];
        for (text, seconds) in cases {
            assert_eq!(order_value(text).as_deref(), Some(seconds), "{text}");
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+0100",
            "2023-11-14",
            "2023-11-14T22:13:20Z trailing",
        ] {
            assert_eq!(order_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_body_paths_are_read() {
        let body = serde_json::json!({
            "created": 1700000000,
            "data": {"object": {"id": "sub_1"}},
        });
        let order = read("header:X-Entity|body:data.object.id", "body:created", &body);
        assert_eq!(
            order,
            Some(Order {
                entity_key: "sub_1".into(),
                value: "1700000000".into()
            })
        );
        assert_eq!(read("header:X-Entity", "body:created", &body), None);
        assert_eq!(read("body:data.object.id", "header:X-Order", &body), None);
        assert_eq!(read("body:data.object.id", "body:missing", &body), None);
    }

    proptest! {
        /// Whatever text arrives, reading it never panics, and what it
        /// yields is a decimal PostgreSQL reads exactly.
        #[test]
        fn any_text_reads_as_a_decimal_or_nothing(text in ".{0,80}") {
            if let Some(value) = order_value(&text) {
                prop_assert!(decimal(&value).is_some(), "{value}");
            }
        }

        /// Timestamps order as the instants they name.
        #[test]
        fn timestamps_order_as_instants(a in 0i64..4_000_000_000, b in 0i64..4_000_000_000) {
            let text = |s: i64| {
                let days = s.div_euclid(86_400);
                let secs = s.rem_euclid(86_400);
                let (y, m, d) = civil_from_days(days);
                format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
            };
            prop_assert_eq!(order_value(&text(a)), Some(a.to_string()));
            prop_assert_eq!(order_value(&text(b)), Some(b.to_string()));
        }
    }

    /// The inverse of `timestamps::days_from_civil`, for the property above.
    fn civil_from_days(z: i64) -> (i64, i64, i64) {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (if m <= 2 { y + 1 } else { y }, m, d)
    }
}
