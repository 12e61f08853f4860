//! The archive: deliveries searched by provider, event type, outcome,
//! time range, event id and a JSON path over the payload, newest first, a
//! page at a time; and one delivery's event with every attempt, its
//! answers, errors, timing, payload and (redacted) headers.

use super::{field, input, param, text, Fields};
use crate::html::{cell, cells, grid, maybe, url_encode, Html};
use crate::page;
use axum::extract::{Path, Query};
use axum::response::Response;

/// Rows a page shows.
const PAGE: i64 = 50;

/// The search. Each filter is a parameter (NULL: not filtered); the
/// database checks what it is given (a time, a JSON path) and refuses what
/// does not parse. Paged by id, which orders deliveries by time: a page
/// is an index range however deep the archive.
const SEARCH: &str = "
    SELECT id::text, provider, event_id, event_type, claim_status::text, processing_status,
           date_trunc('second', created_at)::text, left(error_message, 200)
      FROM webhook.deliveries
     WHERE ($1::text IS NULL OR provider = $1)
       AND ($2::text IS NULL OR event_type = $2)
       AND ($3::text IS NULL OR processing_status = upper($3))
       AND ($4::text IS NULL OR created_at >= $4::text::timestamptz)
       AND ($5::text IS NULL OR created_at < $5::text::timestamptz)
       AND ($6::text IS NULL OR event_id = $6)
       AND ($7::text IS NULL OR jsonb_path_match(payload, $7::text::jsonpath, '{}', true) IS TRUE)
       AND ($8::text IS NULL OR id < $8::text::uuid)
     ORDER BY id DESC
     LIMIT $9::text::int";

const FILTERS: &[&str] = &[
    "provider",
    "event_type",
    "status",
    "since",
    "until",
    "event_id",
    "path",
];

pub async fn list(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let values: Vec<Option<String>> = FILTERS.iter().map(|f| param(&fields, f)).collect();
    let before = param(&fields, "before");
    let limit = (PAGE + 1).to_string();
    let rows = session
        .rows(
            SEARCH,
            &[
                &values[0], &values[1], &values[2], &values[3], &values[4], &values[5], &values[6],
                &before, &limit,
            ],
        )
        .await
        .map_err(|refusal| page::refused("the search", refusal))?;
    let mut body = Html::new();
    body.raw("<form method=\"get\" action=\"/deliveries\">");
    input(&mut body, "provider", "provider", &fields);
    input(&mut body, "event type", "event_type", &fields);
    input(&mut body, "outcome", "status", &fields);
    input(&mut body, "since", "since", &fields);
    input(&mut body, "until", "until", &fields);
    input(&mut body, "event id", "event_id", &fields);
    input(&mut body, "payload JSON path", "path", &fields);
    body.raw("<button type=\"submit\">Search</button></form>");
    body.raw("<p class=\"muted\">Outcome: pending, queued, processed, skipped, filtered, failed, rejected. \
              Times as PostgreSQL reads them (<code>2026-12-01 10:00</code>, in the database's time zone). \
              A JSON path predicate, like <code>$.data.object.amount_paid &gt; 1000</code>.</p>");
    let more = rows.len() as i64 > PAGE;
    let shown: Vec<_> = rows.into_iter().take(PAGE as usize).collect();
    let next_before = shown.last().map(|r| text(r, 0).to_string());
    body.table(
        &[
            "received", "provider", "event id", "type", "answered", "outcome", "error",
        ],
        shown
            .iter()
            .map(|row| {
                let mut id = Html::new();
                id.link(
                    &format!("/deliveries/{}", url_encode(text(row, 0))),
                    text(row, 6),
                );
                vec![
                    id,
                    cell(text(row, 1)),
                    maybe(row[2].as_ref()),
                    maybe(row[3].as_ref()),
                    cell(text(row, 4)),
                    cell(text(row, 5)),
                    maybe(row[7].as_ref()),
                ]
            })
            .collect(),
    );
    if let (true, Some(last)) = (more, next_before) {
        body.raw("<p>");
        body.link(&older(&fields, &last), "Older →");
        body.raw("</p>");
    }
    Ok(page::page("Deliveries", "/deliveries", None, body))
}

/// The next page's link: the same filters (those given, encoded), and the
/// last id shown as where to continue from.
fn older(fields: &Fields, last: &str) -> String {
    let mut query: Vec<String> = FILTERS
        .iter()
        .filter_map(|f| field(fields, f).map(|v| format!("{f}={}", url_encode(v))))
        .collect();
    query.push(format!("before={}", url_encode(last)));
    format!("/deliveries?{}", query.join("&"))
}

pub async fn detail(state: crate::State, Path(id): Path<String>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let found = session
        .rows(
            "SELECT id::text, provider, event_id, event_type, claim_status::text, processing_status,
                    created_at::text, finished_at::text, error_message, payload_mismatch::text,
                    jsonb_pretty(payload), jsonb_pretty(headers), signature
               FROM webhook.deliveries WHERE id = $1::text::uuid",
            &[&id],
        )
        .await.map_err(|refusal| page::refused("the delivery", refusal))?;
    let Some(d) = found.into_iter().next() else {
        let mut body = Html::new();
        body.raw("<p>No delivery ")
            .text(&id)
            .raw(" in the archive (purged, or never).</p>");
        return Ok(page::page("Delivery", "/deliveries", None, body));
    };
    let mut body = Html::new();
    let labels = [
        "id",
        "provider",
        "event id",
        "event type",
        "answered",
        "outcome",
        "received",
        "finished",
        "error",
        "payload differs from the first delivery",
    ];
    body.raw("<table class=\"fields\"><tbody>");
    for (n, label) in labels.iter().enumerate() {
        body.raw("<tr><th>")
            .raw(label)
            .raw("</th><td>")
            .push(maybe(d[n].as_ref()))
            .raw("</td></tr>");
    }
    body.raw("</tbody></table>");

    let (provider, event_id) = (text(&d, 1).to_string(), text(&d, 2).to_string());
    if !event_id.is_empty() {
        let event = session
            .rows(
                "SELECT status::text, attempts::text, requeues::text, first_seen_at::text,
                        processed_at::text, last_error
                   FROM webhook.events WHERE provider = $1 AND event_id = $2",
                &[&provider, &event_id],
            )
            .await
            .map_err(|refusal| page::refused("the event", refusal))?;
        body.raw("<h2>The event</h2>");
        body.table(
            &[
                "status",
                "attempts",
                "requeues",
                "first seen",
                "processed",
                "last error",
            ],
            grid(&event),
        );
        let attempts = session
            .rows(
                "SELECT id::text, date_trunc('milliseconds', created_at)::text, claim_status::text,
                        processing_status, date_trunc('milliseconds', finished_at)::text, error_message
                   FROM webhook.deliveries WHERE provider = $1 AND event_id = $2
                  ORDER BY created_at, id LIMIT 200",
                &[&provider, &event_id],
            )
            .await
            .map_err(|refusal| page::refused("the event's deliveries", refusal))?;
        body.raw("<h2>Every delivery of it</h2>");
        body.table(
            &[
                "delivery", "received", "answered", "outcome", "finished", "error",
            ],
            attempts
                .iter()
                .map(|r| {
                    let mut link = Html::new();
                    link.link(
                        &format!("/deliveries/{}", url_encode(text(r, 0))),
                        text(r, 0),
                    );
                    let mut shown = vec![link];
                    shown.extend(cells(&r[1..]));
                    shown
                })
                .collect(),
        );
        let consumers = session
            .rows(
                "SELECT i.consumer, i.status::text, i.attempts::text, i.run_at::text, i.processed_at::text,
                        i.last_error,
                        (SELECT string_agg(f.attempt || ': ' || f.error_message, E'\\n' ORDER BY f.attempt)
                           FROM webhook.inbox_failures f
                          WHERE f.provider = i.provider AND f.event_id = i.event_id AND f.consumer = i.consumer)
                   FROM webhook.inbox i WHERE i.provider = $1 AND i.event_id = $2 ORDER BY i.consumer",
                &[&provider, &event_id],
            )
            .await
            .map_err(|refusal| page::refused("the event's inbox rows", refusal))?;
        if !consumers.is_empty() {
            body.raw("<h2>Its inbox consumers</h2>");
            body.table(
                &[
                    "consumer",
                    "status",
                    "attempts",
                    "due / lease ends",
                    "processed",
                    "last error",
                    "failed attempts",
                ],
                grid(&consumers),
            );
        }
    }
    body.raw("<h2>Payload</h2><pre id=\"payload\">")
        .text(text(&d, 10))
        .raw("</pre>");
    body.raw("<h2>Headers</h2><p class=\"muted\">As archived: those named in \
              <code>webhook.redact_headers</code> were redacted before they were stored.</p><pre id=\"headers\">")
        .text(text(&d, 11))
        .raw("</pre>");
    body.raw("<h2>Signature</h2><pre>")
        .text(text(&d, 12))
        .raw("</pre>");
    Ok(page::page("Delivery", "/deliveries", None, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_keeps_the_filters_given_encoded_and_moves_on_from_the_last_id() {
        let fields: Fields = [
            ("provider", "stripe"),
            ("event_type", ""),
            ("path", "$.a == \"x&y\""),
            ("before", "0000"),
            ("notice", "ignored"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            older(&fields, "01a2-ff"),
            "/deliveries?provider=stripe&path=%24.a%20%3D%3D%20%22x%26y%22&before=01a2-ff"
        );
    }

    #[test]
    fn every_filter_of_the_search_is_a_parameter() {
        // Nine parameters, each cast from text: nothing a user types is
        // ever spliced into the statement.
        for n in 1..=9 {
            assert!(SEARCH.contains(&format!("${n}::text")), "${n}");
        }
        assert!(!SEARCH.contains("$10"));
    }
}
