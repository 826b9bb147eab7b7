//! OAuth 2.1 authorization for remote (Streamable HTTP) MCP servers, as the MCP
//! authorization spec lays it out: protected resource metadata (RFC 9728), then the
//! authorization server's metadata (RFC 8414, or OpenID discovery), dynamic client
//! registration (RFC 7591), an authorization-code request with PKCE (S256) bound to the
//! server by its resource indicator (RFC 8707), the code exchange, and refreshes.
//!
//! The daemon drives it in two calls and a third on use:
//!
//! 1. [`begin`] discovers, registers and returns the URL to open in a browser, the `state` that
//!    comes back on the redirect, and a [`PendingFlow`] the daemon keeps in memory under that
//!    `state` (it holds the PKCE verifier and any client secret, so it neither serialises nor
//!    prints them);
//! 2. [`complete`] exchanges the code the redirect carried for [`Credentials`]: the tokens plus
//!    everything a later refresh needs, which the daemon stores as JSON in its secret store (never
//!    in the manifest) and hands to a connection as an `Authorization: Bearer` header;
//! 3. before a connection, [`Credentials::needs_refresh`] says whether the access token expires
//!    within a minute, and [`refresh`] gets a new one from the refresh token.
//!
//! # Built on rmcp's `AuthorizationManager`
//!
//! The official SDK's `auth` feature (`rmcp::transport::auth`) already implements every
//! step, carefully: discovery from the server's `WWW-Authenticate` challenge and the
//! path-aware well-known locations, issuer validation, refusing metadata that points at a
//! loopback or private address the server itself is not on, registration, PKCE and the
//! `resource` parameter on every request, and the token requests on the `oauth2` crate.
//! This module only sequences it and translates at the edges:
//!
//! - discovery that finds nothing makes rmcp fall back to guessed `/authorize` endpoints (the
//!   2025-03-26 spec's legacy fallback); we refuse that instead, since the server gave no sign of
//!   supporting OAuth;
//! - rmcp keeps its tokens in a `CredentialStore` without the token endpoint, resource or client
//!   secret, and rebuilding a manager from it re-runs discovery. [`Credentials`] is ours and
//!   self-contained: [`refresh`] rebuilds a manager from it alone (the token endpoint as its
//!   metadata, the client as registered, the tokens in a one-shot in-memory store) with no
//!   discovery;
//! - the resource indicator rmcp sends is read back from the authorization URL it built, so the one
//!   stored is exactly the one the tokens are bound to (a refresh sends it in the `url` crate's
//!   normal form, which names the same resource: `https://x` as `https://x/`);
//! - its errors become one plain sentence naming the step that failed, with every secret the step
//!   knew (code, verifier, tokens, client secret) scrubbed out of it, and every step is bounded by
//!   the caller's timeout (rmcp's own HTTP client also caps each request at 30 s).
//!
//! Conversions to and from rmcp's token type (`oauth2`'s `StandardTokenResponse`) go
//! through its serde form, the RFC 6749 wire format, so this crate needs no direct
//! dependency on `oauth2`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationMetadataSource,
    InMemoryCredentialStore, InMemoryStateStore, OAuthClientConfig, OAuthTokenResponse, StateStore,
    StoredCredentials,
};
use rmcp::transport::CredentialStore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// An access token within this many seconds of expiring is refreshed before use.
pub const REFRESH_MARGIN_SECS: u64 = 60;
/// The most of a server's own words (an error body) an error message quotes.
const SNIPPET_CHARS: usize = 300;

/// An authorization in progress: what [`complete`] needs once the user has approved.
///
/// In memory only: it holds the PKCE verifier and, for a confidential client, the client
/// secret; its `Debug` prints neither.
pub struct PendingFlow {
    manager: AuthorizationManager,
    /// rmcp keeps the PKCE verifier here, under `state`.
    states: InMemoryStateStore,
    url: String,
    state: String,
    resource: String,
    token_endpoint: String,
    auth_methods: Vec<String>,
    client_id: String,
    client_secret: Option<String>,
    scopes: Vec<String>,
}

impl std::fmt::Debug for PendingFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingFlow")
            .field("url", &self.url)
            .field("state", &self.state)
            .field("resource", &self.resource)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("code_verifier", &"[redacted]")
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Tokens for one server and what refreshing them needs; the daemon keeps them, as JSON,
/// in its secret store.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// When the access token expires (unix seconds), if the server said.
    pub expires_at: Option<u64>,
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// The RFC 8707 resource indicator the tokens are bound to.
    pub resource: String,
    /// The scopes granted.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server's `token_endpoint_auth_methods_supported`, which decides
    /// how a client secret is sent (HTTP Basic unless only `client_secret_post` is listed).
    #[serde(default)]
    pub token_endpoint_auth_methods: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |s: &Option<String>| s.as_ref().map(|_| "[redacted]");
        f.debug_struct("Credentials")
            .field("access_token", &"[redacted]")
            .field("refresh_token", &redacted(&self.refresh_token))
            .field("expires_at", &self.expires_at)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &redacted(&self.client_secret))
            .field("resource", &self.resource)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl Credentials {
    /// Whether the access token has expired or expires within a minute of `now_unix`. A
    /// token whose lifetime the server did not give never needs it (until a 401 says so).
    pub fn needs_refresh(&self, now_unix: u64) -> bool {
        self.expires_at
            .is_some_and(|at| at < now_unix.saturating_add(REFRESH_MARGIN_SECS))
    }
}

/// Starts authorizing the MCP server at `url`: discovery, dynamic client registration as
/// `client_name` with `redirect_uri`, and the PKCE authorization URL. Returns that URL, its
/// `state`, and the flow to keep for [`complete`]. Each network step is bounded by
/// `timeout`.
pub async fn begin(
    url: &str,
    redirect_uri: &str,
    client_name: &str,
    timeout: Duration,
) -> Result<(String, String, PendingFlow), String> {
    check_server_url(url)?;
    check_redirect_uri(redirect_uri)?;

    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| format!("cannot start OAuth for {url}: {}", sentence(&e)))?;
    let states = InMemoryStateStore::new();
    manager.set_state_store(states.clone());

    let resolution = within(timeout, manager.resolve_metadata(), || {
        format!("OAuth discovery for {url}")
    })
    .await?
    .map_err(|e| match &e {
        AuthError::DiscoveryRequestFailed { source, .. } => {
            format!(
                "OAuth discovery for {url} failed: {}",
                sentence(source.as_ref())
            )
        }
        e => format!("OAuth discovery for {url} failed: {}", sentence(e)),
    })?;
    if resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback {
        return Err(format!(
            "the server at {url} publishes no OAuth authorization server metadata"
        ));
    }
    let metadata = resolution.metadata;
    let token_endpoint = metadata.token_endpoint.clone();
    let auth_methods = metadata
        .additional_fields
        .get("token_endpoint_auth_methods_supported")
        .and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok())
        .unwrap_or_default();
    let issuer = metadata
        .issuer
        .clone()
        .unwrap_or_else(|| metadata.authorization_endpoint.clone());
    tracing::debug!(%url, %issuer, "oauth: discovered the authorization server");
    manager.set_metadata(metadata);

    let scopes = manager.select_initial_scopes(&[]).await;
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let client = within(
        timeout,
        manager.register_client(client_name, redirect_uri, &scope_refs),
        || format!("dynamic client registration at {issuer}"),
    )
    .await?
    .map_err(|e| registration_error(&e, &issuer))?;
    tracing::debug!(%url, client_id = %client.client_id, "oauth: registered the client");
    let redact = Redact::new([client.client_secret.as_deref()]);

    let authorize_url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| {
            redact.clean(format!(
                "cannot build the authorization URL: {}",
                sentence(&e)
            ))
        })?;
    let parsed = url::Url::parse(&authorize_url).map_err(|_| {
        "the authorization server's authorization endpoint is not a URL".to_string()
    })?;
    let param = |name: &str| {
        parsed
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let state = param("state").ok_or("the authorization URL carries no state")?;
    let resource = param("resource").unwrap_or_else(|| url.to_string());

    let flow = PendingFlow {
        manager,
        states,
        url: url.to_string(),
        state: state.clone(),
        resource,
        token_endpoint,
        auth_methods,
        client_id: client.client_id,
        client_secret: client.client_secret,
        scopes,
    };
    Ok((authorize_url, state, flow))
}

/// Exchanges the authorization `code` the redirect carried for the server's tokens, within
/// `timeout`.
pub async fn complete(
    flow: PendingFlow,
    code: &str,
    timeout: Duration,
) -> Result<Credentials, String> {
    let verifier = flow
        .states
        .load(&flow.state)
        .await
        .ok()
        .flatten()
        .map(|s| s.pkce_verifier);
    let redact = Redact::new([
        Some(code),
        verifier.as_deref(),
        flow.client_secret.as_deref(),
    ]);
    let endpoint = &flow.token_endpoint;
    let tokens = within(
        timeout,
        flow.manager.exchange_code_for_token(code, &flow.state),
        || format!("the token exchange at {endpoint}"),
    )
    .await?
    .map_err(|e| redact.clean(token_error(&e, endpoint, "the authorization code")))?;
    let granted = flow.manager.get_current_scopes().await;
    let scopes = if granted.is_empty() {
        flow.scopes
    } else {
        granted
    };
    let creds = credentials_from(
        &tokens,
        None,
        CredentialsBase {
            token_endpoint: flow.token_endpoint,
            client_id: flow.client_id,
            client_secret: flow.client_secret,
            resource: flow.resource,
            scopes,
            token_endpoint_auth_methods: flow.auth_methods,
        },
    )
    .map_err(|e| redact.clean(e))?;
    tracing::debug!(url = %flow.url, "oauth: authorized");
    Ok(creds)
}

/// Gets a new access token (and, if the server rotates them, a new refresh token) with
/// the refresh token in `creds`, within `timeout`. Needs no discovery.
pub async fn refresh(creds: &Credentials, timeout: Duration) -> Result<Credentials, String> {
    let redact = Redact::new([
        Some(creds.access_token.as_str()),
        creds.refresh_token.as_deref(),
        creds.client_secret.as_deref(),
    ]);
    let Some(refresh_token) = &creds.refresh_token else {
        return Err(format!(
            "the credentials for {} hold no refresh token: authenticate again",
            creds.resource
        ));
    };
    check_server_url(&creds.resource)?;
    let endpoint = &creds.token_endpoint;
    let mut manager = AuthorizationManager::new(creds.resource.as_str())
        .await
        .map_err(|e| redact.clean(format!("cannot refresh: {}", sentence(&e))))?;
    // Refreshing uses only the token endpoint; the authorization endpoint must merely parse.
    let metadata: AuthorizationMetadata = serde_json::from_value(json!({
        "authorization_endpoint": endpoint,
        "token_endpoint": endpoint,
        "token_endpoint_auth_methods_supported": creds.token_endpoint_auth_methods,
    }))
    .map_err(|e| format!("cannot refresh: {e}"))?;
    manager.set_metadata(metadata);
    let mut client = OAuthClientConfig::new(creds.client_id.clone(), creds.resource.clone());
    if let Some(secret) = &creds.client_secret {
        client = client.with_client_secret(secret.clone());
    }
    manager.configure_client(client).map_err(|e| {
        redact.clean(format!(
            "the token endpoint {endpoint} is unusable: {}",
            sentence(&e)
        ))
    })?;
    let current: OAuthTokenResponse = serde_json::from_value(json!({
        "access_token": creds.access_token,
        "token_type": "Bearer",
        "refresh_token": refresh_token,
    }))
    .map_err(|e| format!("cannot refresh: {e}"))?;
    let store = InMemoryCredentialStore::new();
    store
        .save(StoredCredentials::new(
            creds.client_id.clone(),
            Some(current),
            creds.scopes.clone(),
            Some(now_unix()),
        ))
        .await
        .map_err(|e| format!("cannot refresh: {}", sentence(&e)))?;
    manager.set_credential_store(store);

    let tokens = within(timeout, manager.refresh_token(), || {
        format!("the token refresh at {endpoint}")
    })
    .await?
    .map_err(|e| redact.clean(token_error(&e, endpoint, "the refresh token")))?;
    let granted = manager.get_current_scopes().await;
    credentials_from(
        &tokens,
        Some(refresh_token),
        CredentialsBase {
            token_endpoint: creds.token_endpoint.clone(),
            client_id: creds.client_id.clone(),
            client_secret: creds.client_secret.clone(),
            resource: creds.resource.clone(),
            scopes: if granted.is_empty() {
                creds.scopes.clone()
            } else {
                granted
            },
            token_endpoint_auth_methods: creds.token_endpoint_auth_methods.clone(),
        },
    )
    .map_err(|e| redact.clean(e))
}

/// What [`Credentials`] carries besides the tokens.
struct CredentialsBase {
    token_endpoint: String,
    client_id: String,
    client_secret: Option<String>,
    resource: String,
    scopes: Vec<String>,
    token_endpoint_auth_methods: Vec<String>,
}

/// A token response (its RFC 6749 JSON form) as [`Credentials`]; a response without a
/// refresh token keeps `previous_refresh`.
fn credentials_from(
    tokens: &OAuthTokenResponse,
    previous_refresh: Option<&str>,
    base: CredentialsBase,
) -> Result<Credentials, String> {
    let wire = serde_json::to_value(tokens).map_err(|e| format!("the token response: {e}"))?;
    let field = |name: &str| wire.get(name).and_then(Value::as_str).map(str::to_string);
    let access_token = field("access_token")
        .filter(|t| !t.is_empty())
        .ok_or("the token response carries no access token")?;
    let expires_at = wire
        .get("expires_in")
        .and_then(Value::as_u64)
        .map(|secs| now_unix().saturating_add(secs));
    Ok(Credentials {
        access_token,
        refresh_token: field("refresh_token").or(previous_refresh.map(str::to_string)),
        expires_at,
        token_endpoint: base.token_endpoint,
        client_id: base.client_id,
        client_secret: base.client_secret,
        resource: base.resource,
        scopes: base.scopes,
        token_endpoint_auth_methods: base.token_endpoint_auth_methods,
    })
}

/// That `redirect_uri` is an absolute URL without a fragment.
pub fn check_redirect_uri(redirect_uri: &str) -> Result<(), String> {
    let redirect = url::Url::parse(redirect_uri)
        .map_err(|_| format!("the redirect_uri {redirect_uri:?} is not an absolute URL"))?;
    if redirect.fragment().is_some() {
        return Err(format!(
            "the redirect_uri {redirect_uri:?} has a fragment, which OAuth forbids"
        ));
    }
    Ok(())
}

/// That `url` is an http(s) URL with a host.
pub fn check_server_url(url: &str) -> Result<(), String> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
        _ => Err(format!("the server URL {url:?} is not an http(s) URL")),
    }
}

/// `step` within `timeout`, or an error naming what did not finish.
async fn within<T>(
    timeout: Duration,
    step: impl std::future::Future<Output = T>,
    what: impl FnOnce() -> String,
) -> Result<T, String> {
    tokio::time::timeout(timeout, step).await.map_err(|_| {
        format!(
            "{} did not finish within {} ms",
            what(),
            timeout.as_millis()
        )
    })
}

fn registration_error(e: &AuthError, issuer: &str) -> String {
    match e {
        AuthError::RegistrationFailed(m) if m.contains("not supported") => {
            format!("the authorization server {issuer} does not offer dynamic client registration")
        }
        AuthError::RegistrationFailed(m) => format!(
            "dynamic client registration failed: {}",
            snippet(m.strip_prefix("HTTP ").unwrap_or(m))
        ),
        e => format!(
            "dynamic client registration at {issuer} failed: {}",
            sentence(e)
        ),
    }
}

/// A failed token request (`grant` names what was presented).
fn token_error(e: &AuthError, endpoint: &str, grant: &str) -> String {
    const REFUSED: &str = "Server returned error response: ";
    match e {
        AuthError::TokenExchangeFailed(m)
        | AuthError::TokenRefreshFailed(m)
        | AuthError::TokenRefreshRejected(m)
            if m.starts_with(REFUSED) =>
        {
            format!(
                "the authorization server at {endpoint} refused {grant}: {}",
                snippet(&m[REFUSED.len()..])
            )
        }
        // rmcp keeps only the top of a transport error ("Request failed").
        AuthError::TokenExchangeFailed(m) | AuthError::TokenRefreshFailed(m)
            if m == "Request failed" =>
        {
            format!("the token endpoint {endpoint} did not answer")
        }
        AuthError::TokenExchangeFailed(m) | AuthError::TokenRefreshFailed(m) => {
            format!("the token request to {endpoint} failed: {}", snippet(m))
        }
        AuthError::AuthorizationRequired => {
            format!("the authorization server at {endpoint} needs a new authorization")
        }
        AuthError::AuthorizationServerMissingIssuer { .. } => format!(
            "the authorization server at {endpoint} requires the redirect's `iss` parameter, \
             which was not passed on"
        ),
        e => format!("the token request to {endpoint} failed: {}", sentence(e)),
    }
}

/// An rmcp error and its causes as one line, quoted no longer than [`SNIPPET_CHARS`].
fn sentence(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    snippet(&text)
}

fn snippet(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// The secrets one step knew, to scrub from its error.
struct Redact(Vec<String>);

impl Redact {
    fn new<'a>(secrets: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        Redact(
            secrets
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    fn clean(&self, mut text: String) -> String {
        for secret in &self.0 {
            text = text.replace(secret.as_str(), "[redacted]");
        }
        text
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(expires_at: Option<u64>) -> Credentials {
        Credentials {
            access_token: "at-secret".into(),
            refresh_token: Some("rt-secret".into()),
            expires_at,
            token_endpoint: "http://127.0.0.1:1/token".into(),
            client_id: "client".into(),
            client_secret: Some("cs-secret".into()),
            resource: "http://127.0.0.1:1/mcp".into(),
            scopes: vec!["user".into()],
            token_endpoint_auth_methods: vec![],
        }
    }

    #[test]
    fn needs_refresh_within_a_minute_of_expiry() {
        assert!(!creds(None).needs_refresh(1_000));
        assert!(!creds(Some(1_061)).needs_refresh(1_000));
        assert!(creds(Some(1_059)).needs_refresh(1_000));
        assert!(creds(Some(900)).needs_refresh(1_000));
        assert!(!creds(Some(u64::MAX)).needs_refresh(u64::MAX - 1));
    }

    #[test]
    fn debug_prints_no_secret() {
        let printed = format!("{:?}", creds(Some(1)));
        for secret in ["at-secret", "rt-secret", "cs-secret"] {
            assert!(!printed.contains(secret), "{printed}");
        }
    }

    #[test]
    fn credentials_round_trip_as_json_and_old_ones_still_parse() {
        let json = serde_json::to_string(&creds(Some(5))).unwrap();
        let back: Credentials = serde_json::from_str(&json).unwrap();
        assert_eq!(back.access_token, "at-secret");
        assert_eq!(back.expires_at, Some(5));
        let minimal: Credentials = serde_json::from_value(json!({
            "access_token": "a", "refresh_token": null, "expires_at": null,
            "token_endpoint": "http://x/token", "client_id": "c", "client_secret": null,
            "resource": "http://x/mcp"
        }))
        .unwrap();
        assert!(minimal.scopes.is_empty());
    }

    #[test]
    fn redact_scrubs_every_secret() {
        let r = Redact::new([Some("abc123"), None, Some("")]);
        assert_eq!(r.clean("code abc123 bad".into()), "code [redacted] bad");
    }

    #[test]
    fn snippet_is_one_bounded_line() {
        let long = "x ".repeat(1000);
        let s = snippet(&format!("a\nb {long}"));
        assert!(!s.contains('\n'));
        assert!(s.chars().count() <= SNIPPET_CHARS + 1);
    }

    #[tokio::test]
    async fn refresh_without_a_refresh_token_says_so() {
        let mut c = creds(None);
        c.refresh_token = None;
        let e = refresh(&c, Duration::from_secs(1)).await.unwrap_err();
        assert!(e.contains("no refresh token"), "{e}");
        assert!(!e.contains("at-secret") && !e.contains("cs-secret"), "{e}");
    }

    #[test]
    fn flows_and_their_futures_can_cross_threads() {
        fn send<T: Send>(_: &T) {}
        fn send_sync<T: Send + Sync>() {}
        send_sync::<PendingFlow>();
        send(&begin("http://x", "http://y", "z", Duration::ZERO));
        send(&refresh(&creds(None), Duration::ZERO));
    }
}
