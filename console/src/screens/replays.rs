//! Replays: every replay with its progress (paused, resumed or cancelled
//! from here); a new one planned with `webhook_replay`'s dry run, which
//! counts and samples what it would queue, then confirmed with a reason.

use super::{field, form, hidden, input, param, text, Fields};
use crate::html::{cells, Html};
use crate::page;
use axum::extract::Query;
use axum::response::Response;
use axum::Form;

/// The filter fields a replay is planned with, carried from the plan to
/// the run unchanged (`webhook_replay`'s arguments of the same names).
const FILTER: &[&str] = &[
    "provider",
    "consumer",
    "event_types",
    "statuses",
    "since",
    "until",
    "error_contains",
    "payload_path",
    "rate",
];

/// `webhook_replay` with the filter as text parameters ($1–$9), a reason
/// ($10) and dry_run ($11).
const REPLAY: &str = "
    SELECT replay_id::text, started::text, events::text, jsonb_pretty(sample)
      FROM webhook_replay(provider => $1, consumer => $2,
                          event_types => string_to_array(replace($3, ' ', ''), ','),
                          statuses => coalesce(string_to_array(replace($4, ' ', ''), ','), '{processed}'),
                          since => $5::text::timestamptz, until => $6::text::timestamptz,
                          error_contains => $7, payload_path => $8::text::jsonpath, rate => $9::text::float8,
                          reason => $10, dry_run => $11::text::boolean, sample => 10)";

fn filter_values(fields: &Fields) -> Vec<Option<String>> {
    FILTER.iter().map(|f| param(fields, f)).collect()
}

pub async fn list(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let rows = session
        .rows(
            "SELECT id::text, date_trunc('second', requested_at)::text, requested_by, reason, filter::text,
                    rate::text, state, events::text, done::text, remaining::text, processed::text,
                    dead::text, cancelled::text
               FROM webhook.replay_progress ORDER BY requested_at DESC LIMIT 100",
            &[],
        )
        .await.map_err(|refusal| page::refused("the replays", refusal))?;
    let mut body = Html::new();
    body.raw("<h2>Plan a replay</h2><form method=\"get\" action=\"/replays/plan\">");
    input(&mut body, "provider", "provider", &fields);
    input(&mut body, "consumer", "consumer", &fields);
    input(&mut body, "event types (a,b)", "event_types", &fields);
    input(
        &mut body,
        "statuses (processed,dead,stale,filtered,failed)",
        "statuses",
        &fields,
    );
    input(&mut body, "since", "since", &fields);
    input(&mut body, "until", "until", &fields);
    input(&mut body, "error contains", "error_contains", &fields);
    input(&mut body, "payload JSON path", "payload_path", &fields);
    input(&mut body, "events a second", "rate", &fields);
    body.raw("<button type=\"submit\" id=\"plan-replay\">Dry run…</button></form>");
    body.raw("<h2>Replays</h2>");
    body.table(
        &[
            "id",
            "requested",
            "by",
            "reason",
            "filter",
            "rate",
            "state",
            "events",
            "done",
            "remaining",
            "processed",
            "dead",
            "cancelled",
            "",
        ],
        rows.iter()
            .map(|r| {
                let mut shown = cells(r);
                let mut actions = Html::new();
                let changes: &[(&str, &str)] = match text(r, 6) {
                    "running" => &[("pause", "Pause"), ("cancel", "Cancel")],
                    "paused" => &[("resume", "Resume"), ("cancel", "Cancel")],
                    _ => &[],
                };
                for (change, label) in changes {
                    let mut f = form(&app, "/replays/change", "inline");
                    hidden(&mut f, "replay_id", text(r, 0));
                    hidden(&mut f, "change", change);
                    f.raw("<button type=\"submit\">")
                        .text(label)
                        .raw("</button></form>");
                    actions.push(f);
                }
                shown.push(actions);
                shown
            })
            .collect(),
    );
    Ok(page::page(
        "Replays",
        "/replays",
        super::notice(&app, &fields),
        body,
    ))
}

/// The dry run, and the form that runs it.
pub async fn plan(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let values = filter_values(&fields);
    let (reason, dry_run): (Option<String>, String) = (None, "true".into());
    let row = match session
        .rows(
            REPLAY,
            &[
                &values[0], &values[1], &values[2], &values[3], &values[4], &values[5], &values[6],
                &values[7], &values[8], &reason, &dry_run,
            ],
        )
        .await
    {
        Ok(rows) => rows.into_iter().next().unwrap_or_default(),
        Err(refusal) => return Err(page::refused("the dry run", refusal)),
    };
    let mut body = Html::new();
    body.raw("<p id=\"plan\">This replay would queue <strong id=\"count\">")
        .text(text(&row, 2))
        .raw("</strong> event and consumer pairs again.</p><h2>A sample</h2><pre>")
        .text(text(&row, 3))
        .raw("</pre>");
    let mut f = form(&app, "/replays/run", "");
    for (name, value) in FILTER.iter().zip(&values) {
        hidden(&mut f, name, value.as_deref().unwrap_or(""));
    }
    f.raw("<label>Why (names the replay, with its filter) <input type=\"text\" name=\"reason\" required></label>");
    f.raw("<button type=\"submit\" id=\"confirm\">Run the replay</button></form>");
    body.push(f);
    body.raw("<p>");
    body.link("/replays", "Cancel");
    body.raw("</p>");
    Ok(page::page("Plan a replay", "/replays", None, body))
}

pub async fn run(state: crate::State, Form(fields): Form<Fields>) -> Result<Response, Response> {
    let app = state.0;
    super::check_token(&app, &fields)?;
    let session = super::connect(&app).await?;
    let values = filter_values(&fields);
    let (reason, dry_run) = (param(&fields, "reason"), "false".to_string());
    Ok(
        match session
            .rows(
                REPLAY,
                &[
                    &values[0], &values[1], &values[2], &values[3], &values[4], &values[5],
                    &values[6], &values[7], &values[8], &reason, &dry_run,
                ],
            )
            .await
        {
            Ok(rows) => {
                let row = rows.into_iter().next().unwrap_or_default();
                let notice = match text(&row, 1) {
                "true" => format!("Replay {} started: {} queued.", text(&row, 0), text(&row, 2)),
                _ => format!(
                    "Replay {} had already started with this filter and reason: nothing more queued.",
                    text(&row, 0)
                ),
            };
                page::done(&app, "/replays", &notice)
            }
            Err(refusal) => page::refused("the replay", refusal),
        },
    )
}

pub async fn change(state: crate::State, Form(fields): Form<Fields>) -> Result<Response, Response> {
    let app = state.0;
    super::check_token(&app, &fields)?;
    let sql = match field(&fields, "change") {
        Some("pause") => "SELECT webhook_replay_pause($1::text::uuid)::text",
        Some("resume") => "SELECT webhook_replay_resume($1::text::uuid)::text",
        Some("cancel") => "SELECT webhook_replay_cancel($1::text::uuid)::text",
        _ => return Err(page::forged()),
    };
    let session = super::connect(&app).await?;
    let replay = param(&fields, "replay_id");
    Ok(match session.value(sql, &[&replay]).await {
        Ok(n) => page::done(
            &app,
            "/replays",
            &format!(
                "Replay {}: {} ({} events).",
                replay.unwrap_or_default(),
                field(&fields, "change").unwrap_or(""),
                n.unwrap_or_default()
            ),
        ),
        Err(refusal) => page::refused("the change", refusal),
    })
}
