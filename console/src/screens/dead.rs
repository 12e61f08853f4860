//! Dead letters: events that used up their attempts, claimed or queued
//! (one row per consumer), newest first; requeued one at a time or all
//! those matching a filter, each behind a confirmation that says how many.

use super::{field, form, hidden, input, param, text, Fields};
use crate::html::{cells, url_encode, Html};
use crate::page;
use axum::extract::Query;
use axum::response::Response;
use axum::Form;

/// The dead letters a filter names: what the confirmation counts and the
/// list shows.
const MATCHING: &str = "
    FROM webhook.dead_letters
   WHERE ($1::text IS NULL OR provider = $1)
     AND ($2::text IS NULL OR event_type = $2)
     AND ($3::text IS NULL OR consumer IS NOT DISTINCT FROM $3)";

pub async fn list(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let (provider, event_type) = (param(&fields, "provider"), param(&fields, "event_type"));
    let none: Option<String> = None;
    let rows = session
        .rows(
            &format!(
                "SELECT provider, event_id, event_type, consumer, attempts::text, requeues::text,
                        left(last_error, 300), first_seen_at::text {MATCHING}
                  ORDER BY first_seen_at DESC LIMIT 200"
            ),
            &[&provider, &event_type, &none],
        )
        .await
        .map_err(|refusal| page::refused("the dead letters", refusal))?;
    let mut body = Html::new();
    body.raw("<form method=\"get\" action=\"/dead/confirm\">");
    input(&mut body, "provider", "provider", &fields);
    input(&mut body, "event type", "event_type", &fields);
    body.raw("<button type=\"submit\" id=\"requeue-all\">Requeue all matching…</button></form>");
    body.table(
        &[
            "provider",
            "event id",
            "type",
            "consumer",
            "attempts",
            "requeues",
            "last error",
            "first seen",
            "",
        ],
        rows.iter()
            .map(|r| {
                let mut shown = cells(r);
                let mut query = format!(
                    "/dead/confirm?provider={}&event_id={}",
                    url_encode(text(r, 0)),
                    url_encode(text(r, 1))
                );
                if let Some(consumer) = &r[3] {
                    query.push_str(&format!("&consumer={}", url_encode(consumer)));
                }
                let mut action = Html::new();
                action.link(&query, "Requeue…");
                shown.push(action);
                shown
            })
            .collect(),
    );
    Ok(page::page(
        "Dead letters",
        "/dead",
        super::notice(&app, &fields),
        body,
    ))
}

/// The confirmation: one event (`event_id` given), or every dead letter
/// matching the filter, with how many.
pub async fn confirm(
    state: crate::State,
    Query(fields): Query<Fields>,
) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let (provider, event_type, consumer) = (
        param(&fields, "provider"),
        param(&fields, "event_type"),
        param(&fields, "consumer"),
    );
    let mut body = Html::new();
    let mut f = form(&app, "/dead/requeue", "");
    match field(&fields, "event_id") {
        Some(event_id) => {
            body.raw("<p id=\"plan\">Requeue event <code>")
                .text(event_id)
                .raw("</code> of <code>")
                .text(provider.as_deref().unwrap_or(""))
                .raw("</code>");
            if let Some(consumer) = &consumer {
                body.raw(" for consumer <code>")
                    .text(consumer)
                    .raw("</code>");
            }
            body.raw("? It is processed again, from its first attempt.</p>");
            hidden(&mut f, "provider", provider.as_deref().unwrap_or(""));
            hidden(&mut f, "event_id", event_id);
            hidden(&mut f, "consumer", consumer.as_deref().unwrap_or(""));
        }
        None => {
            let count = match session
                .value(
                    &format!("SELECT count(*)::text {MATCHING}"),
                    &[&provider, &event_type, &None::<String>],
                )
                .await
            {
                Ok(n) => n.unwrap_or_default(),
                Err(refusal) => return Err(page::refused("the count", refusal)),
            };
            body.raw("<p id=\"plan\">Requeue <strong id=\"count\">")
                .text(&count)
                .raw("</strong> dead letters");
            if let Some(p) = &provider {
                body.raw(" of provider <code>").text(p).raw("</code>");
            }
            if let Some(t) = &event_type {
                body.raw(" of type <code>").text(t).raw("</code>");
            }
            body.raw("? Each is processed again, from its first attempt.</p>");
            hidden(&mut f, "provider", provider.as_deref().unwrap_or(""));
            hidden(&mut f, "event_type", event_type.as_deref().unwrap_or(""));
        }
    }
    f.raw("<button type=\"submit\" id=\"confirm\">Confirm</button></form>");
    body.push(f);
    body.raw("<p>");
    body.link("/dead", "Cancel");
    body.raw("</p>");
    Ok(page::page("Requeue dead letters", "/dead", None, body))
}

pub async fn requeue(
    state: crate::State,
    Form(fields): Form<Fields>,
) -> Result<Response, Response> {
    let app = state.0;
    super::check_token(&app, &fields)?;
    let session = super::connect(&app).await?;
    let (provider, event_type, consumer) = (
        param(&fields, "provider"),
        param(&fields, "event_type"),
        param(&fields, "consumer"),
    );
    Ok(match param(&fields, "event_id") {
        Some(event_id) => match session
            .rows(
                "SELECT 'requeued' FROM webhook_requeue($1, $2, $3)",
                &[&provider, &event_id, &consumer],
            )
            .await
        {
            Ok(_) => page::done(&app, "/dead", &format!("Requeued {event_id}.")),
            Err(refusal) => page::refused("the requeue", refusal),
        },
        None => match session
            .value(
                "SELECT webhook_requeue_dead(provider => $1, event_type => $2)::text",
                &[&provider, &event_type],
            )
            .await
        {
            Ok(n) => page::done(
                &app,
                "/dead",
                &format!("Requeued {} dead letters.", n.unwrap_or_default()),
            ),
            Err(refusal) => page::refused("the requeue", refusal),
        },
    })
}
