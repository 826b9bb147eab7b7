//! OAuth for remote connectors, the daemon's side (`car_connectors::oauth` does the
//! protocol): the pending flows between `connectors.authenticate` and
//! `connectors.complete_authentication`, and the tokens in the secret store.
//!
//! - A pending flow (the PKCE verifier, the registered client) lives in memory only, under its
//!   `state`, for at most [`FLOW_TTL`]; at most [`MAX_PENDING`] are held (the oldest goes) and a
//!   flow is taken once, so a code cannot be exchanged twice.
//! - The tokens (`Credentials`, JSON) are one secret: service `car.connector.<slug>`, key
//!   `oauth:credentials`. Before each connection the access token is refreshed when it expires
//!   within a minute, and the refreshed tokens are stored again; the expiry is also kept in memory
//!   so a call can tell it must reconnect without reading the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use car_connectors::oauth::{Credentials, PendingFlow};
use car_proto::redact::Redacted;
use car_secrets::{SecretId, SecretStore};

/// How long a started flow waits for its code.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// Flows held at once.
pub const MAX_PENDING: usize = 32;
/// Each OAuth HTTP step's bound.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// A started flow: the connector it will add.
#[derive(Debug)]
pub struct Pending {
    pub name: String,
    pub url: String,
    pub flow: PendingFlow,
    started: Instant,
}

#[derive(Debug, Default)]
pub struct ConnectorOAuth {
    pending: Mutex<HashMap<String, Pending>>,
    /// Access-token expiry (unix seconds) of each OAuth connector, as last stored.
    expiry: Mutex<HashMap<String, u64>>,
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn id(slug: &str) -> Result<SecretId, String> {
    SecretId::new(Some(&format!("car.connector.{slug}")), "oauth:credentials")
        .map_err(|e| format!("oauth credentials: {e}"))
}

impl ConnectorOAuth {
    /// Holds `flow` under `state`.
    pub fn hold(&self, state: String, name: String, url: String, flow: PendingFlow) {
        let mut pending = self.pending.lock().expect("oauth pending lock");
        pending.retain(|_, p| p.started.elapsed() < FLOW_TTL);
        while pending.len() >= MAX_PENDING {
            let oldest = pending
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(s, _)| s.clone());
            match oldest {
                Some(s) => pending.remove(&s),
                None => break,
            };
        }
        pending.insert(
            state,
            Pending {
                name,
                url,
                flow,
                started: Instant::now(),
            },
        );
    }

    /// Takes the flow started under `state`, if it is still waiting.
    pub fn take(&self, state: &str) -> Option<Pending> {
        let mut pending = self.pending.lock().expect("oauth pending lock");
        pending
            .remove(state)
            .filter(|p| p.started.elapsed() < FLOW_TTL)
    }

    /// Stores `creds` as connector `slug`'s tokens.
    pub fn store(
        &self,
        secrets: Option<&SecretStore>,
        slug: &str,
        creds: &Credentials,
    ) -> Result<(), String> {
        let store =
            secrets.ok_or("the secret store is unavailable, so OAuth tokens cannot be kept")?;
        let text = serde_json::to_string(creds).map_err(|e| format!("oauth credentials: {e}"))?;
        store
            .put_private(&id(slug)?, &Redacted::new(text))
            .map_err(|e| format!("oauth credentials: {e}"))?;
        let mut expiry = self.expiry.lock().expect("oauth expiry lock");
        match creds.expires_at {
            Some(at) => expiry.insert(slug.to_string(), at),
            None => expiry.remove(slug),
        };
        Ok(())
    }

    /// Deletes connector `slug`'s tokens.
    pub fn forget(&self, secrets: Option<&SecretStore>, slug: &str) {
        self.expiry.lock().expect("oauth expiry lock").remove(slug);
        Self::forget_secret(secrets, slug);
    }

    /// Deletes connector `slug`'s stored tokens.
    pub fn forget_secret(secrets: Option<&SecretStore>, slug: &str) {
        if let (Some(store), Ok(id)) = (secrets, id(slug)) {
            if let Err(e) = store.delete_private(&id) {
                tracing::warn!(connector = %slug, error = %e, "cannot delete a connector's OAuth tokens");
            }
        }
    }

    /// Whether `slug`'s access token expires within the refresh margin (as last stored).
    pub fn expiring(&self, slug: &str) -> bool {
        let at = self
            .expiry
            .lock()
            .expect("oauth expiry lock")
            .get(slug)
            .copied();
        at.is_some_and(|at| {
            at < now_unix().saturating_add(car_connectors::oauth::REFRESH_MARGIN_SECS)
        })
    }

    /// The access token to send to `slug`, refreshed (and stored again) when it is expiring.
    pub async fn bearer(
        &self,
        secrets: Option<&SecretStore>,
        slug: &str,
    ) -> Result<String, String> {
        let store = secrets.ok_or("the secret store is unavailable")?;
        let text = store
            .get_private(&id(slug)?)
            .map_err(|e| format!("oauth credentials: {e}"))?
            .map(Redacted::into_inner)
            .ok_or("the OAuth tokens are missing from the secret store; run connectors.authenticate again")?;
        let mut creds: Credentials = serde_json::from_str(&text).map_err(|e| {
            format!("the stored OAuth tokens do not parse ({e}); run connectors.authenticate again")
        })?;
        if creds.needs_refresh(now_unix()) {
            creds = car_connectors::oauth::refresh(&creds, STEP_TIMEOUT)
                .await
                .map_err(|e| format!("refreshing the access token: {e}"))?;
            self.store(secrets, slug, &creds)?;
        } else if let Some(at) = creds.expires_at {
            self.expiry
                .lock()
                .expect("oauth expiry lock")
                .insert(slug.to_string(), at);
        }
        Ok(creds.access_token)
    }
}
