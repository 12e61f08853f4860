//! Alerts: open and acknowledged ones first, then the last resolved;
//! acknowledged from here (`webhook_alert_acknowledge`).

use super::{form, hidden, param, text, Fields};
use crate::html::{cells, Html};
use crate::page;
use axum::extract::Query;
use axum::response::Response;
use axum::Form;

pub async fn list(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let rows = session
        .rows(
            "SELECT id::text, rule, kind::text, status::text, nullif(provider, ''), nullif(consumer, ''),
                    message, value::text, threshold::text, first_seen_at::text, last_seen_at::text,
                    acknowledged_by
               FROM webhook.alerts
              ORDER BY status = 'resolved', id DESC LIMIT 200",
            &[],
        )
        .await.map_err(|refusal| page::refused("the alerts", refusal))?;
    let mut body = Html::new();
    body.table(
        &[
            "id",
            "rule",
            "kind",
            "status",
            "provider",
            "consumer",
            "message",
            "value",
            "threshold",
            "first seen",
            "last seen",
            "acknowledged by",
            "",
        ],
        rows.iter()
            .map(|r| {
                let mut shown = cells(r);
                let mut action = Html::new();
                if text(r, 3) == "open" {
                    let mut f = form(&app, "/alerts/acknowledge", "inline");
                    hidden(&mut f, "id", text(r, 0));
                    f.raw("<button type=\"submit\">Acknowledge</button></form>");
                    action.push(f);
                }
                shown.push(action);
                shown
            })
            .collect(),
    );
    Ok(page::page(
        "Alerts",
        "/alerts",
        super::notice(&app, &fields),
        body,
    ))
}

pub async fn acknowledge(
    state: crate::State,
    Form(fields): Form<Fields>,
) -> Result<Response, Response> {
    let app = state.0;
    super::check_token(&app, &fields)?;
    let session = super::connect(&app).await?;
    let id = param(&fields, "id");
    Ok(
        match session
            .value(
                "SELECT webhook_alert_acknowledge($1::text::bigint)::text",
                &[&id],
            )
            .await
        {
            Ok(_) => page::done(
                &app,
                "/alerts",
                &format!("Alert {} acknowledged.", id.unwrap_or_default()),
            ),
            Err(refusal) => page::refused("the acknowledgement", refusal),
        },
    )
}
