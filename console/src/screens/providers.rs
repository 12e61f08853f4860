//! The registry: each provider's scheme, mode (claim or inbox), ordering,
//! consumers and filters; its secrets by fingerprint with when each was
//! added, retired and last used (never a secret itself); and pausing or
//! resuming a provider's inbox work.

use super::{field, form, hidden, param, text, Fields};
use crate::html::{cells, grid, Html};
use crate::page;
use axum::extract::Query;
use axum::response::Response;
use axum::Form;

pub async fn list(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let providers = session
        .rows(
            "SELECT p.name, p.scheme, CASE WHEN p.inbox THEN 'inbox' ELSE 'claim' END,
                    CASE WHEN p.entity_key_from IS NULL THEN 'none'
                         ELSE p.entity_key_from || ' by ' || p.order_from
                              || CASE WHEN p.fifo THEN ', FIFO' ELSE '' END
                              || ', ties ' || p.ties END,
                    CASE WHEN cardinality(p.consumers) = 0 THEN 'default' ELSE array_to_string(p.consumers, ', ') END,
                    p.event_id_from, p.event_type_from, p.tolerance::text, p.active_secrets::text,
                    EXISTS (SELECT FROM webhook.paused s WHERE s.provider = p.name AND s.kind = 'pause'
                                                          AND s.consumer = '')::text
               FROM webhook.provider_summary p ORDER BY p.name",
            &[],
        )
        .await.map_err(|refusal| page::refused("the registry", refusal))?;
    let mut body = Html::new();
    body.table(
        &[
            "provider",
            "scheme",
            "mode",
            "ordering",
            "consumers",
            "event id from",
            "event type from",
            "tolerance",
            "active secrets",
            "",
        ],
        providers
            .iter()
            .map(|r| {
                let mut shown = cells(&r[..9]);
                let paused = text(r, 9) == "true";
                let mut f = form(&app, "/providers/steer", "inline");
                hidden(&mut f, "provider", text(r, 0));
                hidden(&mut f, "change", if paused { "resume" } else { "pause" });
                f.raw("<button type=\"submit\">")
                    .raw(if paused { "Resume" } else { "Pause" })
                    .raw("</button></form>");
                shown.push(f);
                shown
            })
            .collect(),
    );
    let secrets = session
        .rows(
            "SELECT provider, fingerprint, added_at::text, retired_at::text, last_used_at::text
               FROM webhook.secret_usage ORDER BY provider, added_at",
            &[],
        )
        .await
        .map_err(|refusal| page::refused("the secrets' usage", refusal))?;
    body.raw("<h2>Secrets, by fingerprint</h2>");
    body.table(
        &["provider", "fingerprint", "added", "retired", "last used"],
        grid(&secrets),
    );
    let filters = session
        .rows(
            "SELECT provider, nullif(consumer, ''), array_to_string(event_types, ', '), payload_path::text,
                    set_by, set_at::text
               FROM webhook.filters ORDER BY provider, consumer",
            &[],
        )
        .await.map_err(|refusal| page::refused("the filters", refusal))?;
    body.raw("<h2>Filters</h2>");
    body.table(
        &[
            "provider",
            "consumer",
            "event types",
            "payload path",
            "set by",
            "set at",
        ],
        grid(&filters),
    );
    Ok(page::page(
        "Providers",
        "/providers",
        super::notice(&app, &fields),
        body,
    ))
}

/// Pause or resume a provider's inbox work (every consumer).
pub async fn steer(state: crate::State, Form(fields): Form<Fields>) -> Result<Response, Response> {
    let app = state.0;
    super::check_token(&app, &fields)?;
    let sql = match field(&fields, "change") {
        Some("pause") => {
            "SELECT webhook_pause(provider => $1, reason => 'paused from the console')::text"
        }
        Some("resume") => "SELECT webhook_resume(provider => $1)::text",
        _ => return Err(page::forged()),
    };
    let session = super::connect(&app).await?;
    let provider = param(&fields, "provider");
    Ok(match session.value(sql, &[&provider]).await {
        Ok(_) => page::done(
            &app,
            "/providers",
            &format!(
                "{}: {}d.",
                provider.unwrap_or_default(),
                field(&fields, "change").unwrap_or("")
            ),
        ),
        Err(refusal) => page::refused("the change", refusal),
    })
}
