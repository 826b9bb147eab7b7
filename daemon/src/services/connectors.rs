//! `connectors.*`: MCP servers as tool sources shared by every session (see
//! `crate::state::connectors` for where they are kept and how their tools reach sessions,
//! and `car_connectors` for the client).
//!
//! `add` / `add_stdio` store the header or environment values as secrets, save the
//! definition, connect and list the server's tools, and answer the `ConnectorStatus` (a
//! server that cannot be reached is added anyway, `connected: false` with its
//! `last_error`, and `connectors.refresh` retries). Adding a name again replaces the
//! connector, keeping its enabled tools. Every change is saved before it is answered and
//! re-registers the enabled tools in every open session.
//!
//! Stricter than CAR: an agent session may read connectors but not add, change or remove
//! them (`add_stdio` runs a command outside the agent's confinement; an agent could
//! otherwise enable tools its user never chose). The changing methods are declared
//! `not_for_agents`, so dispatch refuses agents before these handlers run.

use car_connectors::oauth::{self, Credentials};
use car_connectors::{slug_of, Definition, Transport};
use car_proto::errors::RpcError;
use car_proto::methods::connectors as m;
use car_proto::methods::fields::NoParams;
use serde_json::json;

use crate::handler::{Call, Routes};
use crate::state::connector_oauth::STEP_TIMEOUT;
use crate::state::connectors::ConnectorHub;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Add, _, _>(add)
        .add::<m::AddStdio, _, _>(add_stdio)
        .add::<m::Authenticate, _, _>(authenticate)
        .add::<m::CompleteAuthentication, _, _>(complete_authentication)
        .add::<m::List, _, _>(|call, _: NoParams| async move {
            Ok(m::ListReply {
                connectors: call.state.data.connectors.set.statuses(),
            })
        })
        .add::<m::Tools, _, _>(|call, p: m::SlugParams| async move { views(&call, &p.slug) })
        .add::<m::EnableTools, _, _>(|call, p: m::ToolsParams| async move {
            let enabled = set_enabled(&call, p, true).await?;
            Ok(m::EnabledReply { enabled })
        })
        .add::<m::DisableTools, _, _>(|call, p: m::ToolsParams| async move {
            let disabled = set_enabled(&call, p, false).await?;
            Ok(m::DisabledReply { disabled })
        })
        .add::<m::Refresh, _, _>(refresh)
        .add::<m::Remove, _, _>(remove);
}

fn invalid(message: String) -> RpcError {
    // The engine names the field first (`slug: …`, `tools[2]: …`).
    RpcError::invalid_params(message)
}

/// Runs blocking store work (secrets, the manifest) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RpcError::internal(format!("connector store task failed: {e}")))?
        .map_err(RpcError::internal)
}

/// Stores `def`'s secrets, saves it, connects it and answers its status.
async fn install(
    call: &Call,
    def: Definition,
    kind: &'static str,
    values: std::collections::BTreeMap<String, String>,
    oauth: Option<Credentials>,
) -> Result<m::ConnectorStatus, RpcError> {
    let hub = call.state.data.connectors.clone();
    let secrets = call.state.access.secrets.clone();
    let slug = def.slug.clone();
    let limit = car_connectors::registry::MAX_CONNECTORS;
    if hub.set.definition(&slug).is_none() && hub.set.definitions().len() >= limit {
        return Err(invalid(format!(
            "name: a daemon holds at most {limit} connectors; remove one first"
        )));
    }
    {
        let (hub, def) = (hub.clone(), def.clone());
        blocking(move || {
            if let Some(old) = hub.set.definition(&def.slug) {
                ConnectorHub::delete_secrets(secrets.as_deref(), &old);
            }
            hub.set.upsert(def.clone())?;
            let stored = ConnectorHub::put_secrets(secrets.as_deref(), &def.slug, kind, &values)
                .and_then(|()| match &oauth {
                    Some(creds) => hub.oauth.store(secrets.as_deref(), &def.slug, creds),
                    None => Ok(()),
                });
            if let Err(e) = stored {
                hub.set.remove(&def.slug);
                return Err(e);
            }
            hub.save()
        })
        .await?;
    }
    if let Err(e) = hub
        .connect(
            call.state.access.secrets.as_deref(),
            &call.state.daemon.sessions,
            &slug,
        )
        .await
    {
        tracing::warn!(connector = %slug, error = %e, "connector added but not connected");
    }
    hub.set.status(&slug).ok_or_else(|| {
        RpcError::internal(format!("connector {slug:?} was removed while it connected"))
    })
}

fn slug(name: &str) -> Result<String, RpcError> {
    slug_of(name).ok_or_else(|| invalid("name: needs a letter or digit".into()))
}

async fn add(call: Call, p: m::AddParams) -> Result<m::ConnectorStatus, RpcError> {
    if !(p.url.starts_with("http://") || p.url.starts_with("https://")) {
        return Err(invalid(format!(
            "url: must be an http(s) URL, got {:?}",
            p.url
        )));
    }
    for name in p.headers.keys() {
        if http_header_name_invalid(name) {
            return Err(invalid(format!("headers: {name:?} is not a header name")));
        }
    }
    let def = Definition {
        slug: slug(&p.name)?,
        name: p.name.into_string(),
        transport: Transport::Http {
            url: p.url,
            header_names: p.headers.keys().cloned().collect(),
            oauth: false,
        },
        enabled: Default::default(),
        seeded: false,
    };
    install(&call, def, "header", p.headers, None).await
}

/// `connectors.authenticate`: discovery, registration and the authorize URL; the flow is
/// held under its `state`.
async fn authenticate(
    call: Call,
    p: m::AuthenticateParams,
) -> Result<m::AuthenticateReply, RpcError> {
    slug(&p.name)?;
    oauth::check_server_url(&p.url).map_err(|e| invalid(format!("url: {e}")))?;
    oauth::check_redirect_uri(&p.redirect_uri)
        .map_err(|e| invalid(format!("redirect_uri: {e}")))?;
    let (authorize_url, state, flow) =
        oauth::begin(&p.url, &p.redirect_uri, "car-runtime", STEP_TIMEOUT)
            .await
            .map_err(|e| {
                RpcError::internal(format!("connectors.authenticate: {e}"))
                    .with_data(json!({"reason": "oauth_failed"}))
            })?;
    call.state
        .data
        .connectors
        .oauth
        .hold(state.clone(), p.name.into_string(), p.url, flow);
    Ok(m::AuthenticateReply {
        authorize_url,
        state,
    })
}

/// `connectors.complete_authentication`: the code exchange, then the connector is added
/// (its tokens in the secret store) and connected.
async fn complete_authentication(
    call: Call,
    p: m::CompleteAuthenticationParams,
) -> Result<m::ConnectorStatus, RpcError> {
    if p.code.is_empty() {
        return Err(invalid("code: must not be empty".into()));
    }
    let pending = call
        .state
        .data
        .connectors
        .oauth
        .take(&p.state)
        .ok_or_else(|| {
            invalid("state: no pending authentication has this state (it expired, was completed, or was never started)".into())
        })?;
    let creds = oauth::complete(pending.flow, &p.code, STEP_TIMEOUT)
        .await
        .map_err(|e| {
            RpcError::internal(format!("connectors.complete_authentication: {e}"))
                .with_data(json!({"reason": "oauth_failed"}))
        })?;
    let def = Definition {
        slug: slug(&pending.name)?,
        name: pending.name,
        transport: Transport::Http {
            url: pending.url,
            header_names: Vec::new(),
            oauth: true,
        },
        enabled: Default::default(),
        seeded: false,
    };
    install(&call, def, "header", Default::default(), Some(creds)).await
}

fn http_header_name_invalid(name: &str) -> bool {
    name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

async fn add_stdio(call: Call, p: m::AddStdioParams) -> Result<m::ConnectorStatus, RpcError> {
    if p.command.trim().is_empty() {
        return Err(invalid("command: must not be empty".into()));
    }
    for name in p.env.keys() {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(invalid(format!("env: {name:?} is not a variable name")));
        }
    }
    let def = Definition {
        slug: slug(&p.name)?,
        name: p.name.into_string(),
        transport: Transport::Stdio {
            command: p.command,
            args: p.args,
            env_names: p.env.keys().cloned().collect(),
        },
        enabled: Default::default(),
        seeded: false,
    };
    install(&call, def, "env", p.env, None).await
}

fn views(call: &Call, slug: &str) -> Result<Vec<m::ToolView>, RpcError> {
    call.state
        .data
        .connectors
        .set
        .tool_views(slug)
        .ok_or_else(|| invalid(format!("slug: no connector {slug:?}")))
}

async fn set_enabled(call: &Call, p: m::ToolsParams, on: bool) -> Result<u64, RpcError> {
    let hub = call.state.data.connectors.clone();
    let changed = hub
        .set
        .set_enabled(&p.slug, &p.tools, on)
        .map_err(invalid)?;
    let saving = hub.clone();
    blocking(move || saving.save()).await?;
    hub.sync(&call.state.daemon.sessions);
    Ok(changed)
}

async fn refresh(call: Call, p: m::SlugParams) -> Result<Vec<m::ToolView>, RpcError> {
    let hub = &call.state.data.connectors;
    if hub.set.definition(&p.slug).is_none() {
        return Err(invalid(format!("slug: no connector {:?}", p.slug.as_str())));
    }
    let outcome = if hub.set.is_connected(&p.slug) {
        let relisted = hub
            .set
            .relist(&p.slug, crate::state::connectors::CONNECT_TIMEOUT)
            .await;
        hub.sync(&call.state.daemon.sessions);
        relisted
    } else {
        hub.connect(
            call.state.access.secrets.as_deref(),
            &call.state.daemon.sessions,
            &p.slug,
        )
        .await
    };
    outcome.map_err(|e| {
        RpcError::internal(format!("connector {:?}: {e}", p.slug.as_str()))
            .with_data(json!({"reason": "connector_unavailable"}))
    })?;
    views(&call, &p.slug)
}

async fn remove(call: Call, p: m::SlugParams) -> Result<m::RemovedReply, RpcError> {
    let hub = call.state.data.connectors.clone();
    let removed = hub
        .set
        .remove(&p.slug)
        .ok_or_else(|| invalid(format!("slug: no connector {:?}", p.slug.as_str())))?;
    hub.sync(&call.state.daemon.sessions);
    let secrets = call.state.access.secrets.clone();
    let saving = hub.clone();
    blocking(move || {
        ConnectorHub::delete_secrets(secrets.as_deref(), &removed);
        saving.save()
    })
    .await?;
    Ok(m::RemovedReply {
        removed: p.slug.into_string(),
    })
}
