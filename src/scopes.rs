//! Application roles scoped to some providers and consumers.
//!
//! By default every role granted the application functions
//! (`webhook_grant_app`) shares one trust domain: it may receive, claim
//! and queue any provider's events and lease and finish any consumer's. A
//! DBA serving several teams from one database scopes each team's role
//! (`webhook_scope_app`, rows of `webhook.app_scopes`), and from then on:
//!
//! * intake (`webhook_receive`, `webhook_claim`, `webhook_enqueue`) takes
//!   only the scope's providers, so a team can neither forge nor squat
//!   another team's event ids;
//! * `webhook_next` leases only for the scope's providers and consumers,
//!   and must name the provider;
//! * `webhook_complete`, `webhook_fail` and `webhook_extend` finish only
//!   claims and leases of those (looked up by the id), so a leaked id of
//!   another team's event is of no use.
//!
//! Who is bound: the role the session acts as (the login role, or the
//! one set with `SET ROLE`; inside the extension's functions the current
//! user is their owner), by the scope of every scoped role whose
//! privileges it has (itself, or one it inherits from), each allowing
//! what it lists. Superusers are never bound. A role bound by no scope is
//! unscoped. `webhook_outbound_key` and the `idempotency_` functions are
//! not scoped: an outbound key is a digest anyone holding the event id
//! can compute, and idempotency keys belong to the application's own API,
//! not to a provider.
//!
//! The scopes are read through the registry's per-backend cache: with no
//! scope anywhere (the usual case) a call costs one look at it.

use crate::errors::{Denied, Result, WebhookError};
use crate::registry::{self, AppScope};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// The scopes binding this session's role.
pub enum Scope {
    /// None: no scope names the role, or one it inherits from, or it is
    /// a superuser.
    Unbound,
    /// Each of these allows what it lists.
    Bound { role: String, scopes: Vec<AppScope> },
}

/// The scopes binding the session's role.
pub fn of_session(client: &mut SpiClient<'_>) -> Result<Scope> {
    let all = registry::app_scopes(client)?;
    if all.is_empty() {
        return Ok(Scope::Unbound);
    }
    // SAFETY: reads the role the session acts as, which SECURITY DEFINER
    // does not change; the catalog lookups raise no error for a role that
    // no longer exists.
    let role = unsafe { pg_sys::GetOuterUserId() };
    if unsafe { pg_sys::superuser_arg(role) } {
        return Ok(Scope::Unbound);
    }
    let binding: Vec<AppScope> = all
        .iter()
        .filter(|scope| unsafe { pg_sys::has_privs_of_role(role, scope.role) })
        .cloned()
        .collect();
    if binding.is_empty() {
        return Ok(Scope::Unbound);
    }
    Ok(Scope::Bound {
        role: role_name(role),
        scopes: binding,
    })
}

/// Refuse `provider` unless the session may use its events.
pub fn check_provider(
    client: &mut SpiClient<'_>,
    function: &'static str,
    arg: &'static str,
    provider: &str,
) -> Result<()> {
    of_session(client)?.provider(function, arg, provider)
}

impl Scope {
    pub fn is_bound(&self) -> bool {
        matches!(self, Scope::Bound { .. })
    }

    /// Whether the session may use `provider`'s events (for intake,
    /// whichever consumers they go to).
    pub fn provider(
        &self,
        function: &'static str,
        arg: &'static str,
        provider: &str,
    ) -> Result<()> {
        match self {
            Scope::Unbound => Ok(()),
            Scope::Bound { scopes, .. } if scopes.iter().any(|s| allows_provider(s, provider)) => {
                Ok(())
            }
            Scope::Bound { .. } => {
                Err(self.refusal(function, arg, Denied::Provider(provider.into())))
            }
        }
    }

    /// Whether the session may lease or finish `provider`'s events for
    /// `consumer`; a refusal names `provider_arg` or `consumer_arg`,
    /// whichever is out of scope.
    pub fn consumer(
        &self,
        function: &'static str,
        (provider_arg, consumer_arg): (&'static str, &'static str),
        provider: &str,
        consumer: &str,
    ) -> Result<()> {
        self.provider(function, provider_arg, provider)?;
        match self {
            Scope::Unbound => Ok(()),
            Scope::Bound { scopes, .. }
                if scopes.iter().any(|s| {
                    allows_provider(s, provider)
                        && s.consumers
                            .as_ref()
                            .is_none_or(|consumers| consumers.iter().any(|c| c == consumer))
                }) =>
            {
                Ok(())
            }
            Scope::Bound { .. } => Err(self.refusal(
                function,
                consumer_arg,
                Denied::Consumer {
                    provider: provider.into(),
                    consumer: consumer.into(),
                },
            )),
        }
    }

    /// Whether the session may use every provider's events at once.
    pub fn every_provider(&self, function: &'static str, arg: &'static str) -> Result<()> {
        match self {
            Scope::Unbound => Ok(()),
            Scope::Bound { .. } => Err(self.refusal(function, arg, Denied::AnyProvider)),
        }
    }

    fn refusal(&self, function: &'static str, arg: &'static str, denied: Denied) -> WebhookError {
        let (role, scopes) = match self {
            Scope::Bound { role, scopes } => (role.clone(), scopes.as_slice()),
            Scope::Unbound => (String::new(), &[][..]),
        };
        WebhookError::OutOfScope {
            function,
            arg,
            role,
            denied,
            allowed: describe(scopes),
        }
    }
}

fn allows_provider(scope: &AppScope, provider: &str) -> bool {
    scope.providers.iter().any(|p| p == provider)
}

/// What the scopes allow, in words: "providers stripe, paddle (consumers
/// billing)" for each scope, joined by "; or ".
fn describe(scopes: &[AppScope]) -> String {
    scopes
        .iter()
        .map(|scope| {
            let consumers = match &scope.consumers {
                None => "every consumer".to_string(),
                Some(consumers) => format!("consumers {}", consumers.join(", ")),
            };
            format!("providers {} ({consumers})", scope.providers.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; or ")
}

/// A role's name, or its oid if it was dropped meanwhile.
fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: with noerr, NULL for an unknown role; otherwise a palloc'd
    // C string that lives until the end of the call.
    let name = unsafe { pg_sys::GetUserNameFromId(role, true) };
    if name.is_null() {
        return role.to_u32().to_string();
    }
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}
