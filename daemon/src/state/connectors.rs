//! The daemon's MCP connectors (`car_connectors`), where they are kept and how their tools
//! reach the sessions.
//!
//! - `CAR_HOME/connectors.json` holds the user's definitions (never a secret), written atomically
//!   (owner-only) after every change. At startup the nearest `.car/connectors.toml` from the
//!   daemon's working directory seeds definitions the manifest lacks (a malformed seed file is
//!   logged and skipped: it only adds tools); they are not written back until the user changes one.
//! - Header and environment values live in the secret store under the service
//!   `car.connector.<slug>` (keys `header:<name>`, `env:<name>`), read when connecting.
//! - A stdio server starts with a minimal environment: the daemon's `PATH` and `HOME` (a package
//!   runner such as `npx` needs its cache) and the connector's own `env`; nothing else of the
//!   daemon's environment (API keys, tokens, `CAR_HOME`). Its stderr is discarded. Where the kernel
//!   has Landlock it is confined as a supervised agent is: the state root and the credential
//!   directory are hidden from it (`car_supervisor::confine`).
//! - An enabled tool is registered in every session as `mcp_{slug}_{tool}` (its schema the server's
//!   `inputSchema`, marked as the connector's): when a session opens, and in every open session
//!   whenever the enabled set changes. A tool a session registered itself under the same name is
//!   left alone.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use car_connectors::{Connectors, Definition, Launch, Manifest, Transport};
use car_proto::redact::Redacted;
use car_secrets::{SecretId, SecretStore};

use crate::state::per_connection::ToolDescriptor;
use crate::state::session::Session;
use crate::state::session_registry::Sessions;

/// How long connecting (handshake and `tools/list`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The connectors and their manifest.
#[derive(Debug)]
pub struct ConnectorHub {
    pub set: Connectors,
    path: PathBuf,
    saving: Mutex<()>,
    /// What a stdio server may not touch: the state root, and the credential directory once
    /// [`ConnectorHub::hide`] names it.
    hidden: Mutex<Vec<PathBuf>>,
    /// OAuth flows and tokens (`crate::state::connector_oauth`).
    pub oauth: crate::state::connector_oauth::ConnectorOAuth,
}

impl ConnectorHub {
    /// Loads `state_root/connectors.json` and the seed file nearest `cwd`.
    pub fn open(state_root: &Path, cwd: Option<&Path>) -> Self {
        let path = state_root.join("connectors.json");
        let mut defs = match crate::state::state_file::read(&path) {
            Ok(Some(bytes)) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) => m.connectors,
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "connectors.json is malformed; starting with no connectors (the file is kept)");
                    Vec::new()
                }
            },
            Ok(None) => Vec::new(),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot read connectors.json");
                Vec::new()
            }
        };
        if let Some(seed) = cwd.and_then(car_connectors::manifest::nearest_seed_file) {
            let text = crate::state::state_file::read(&seed)
                .map_err(|e| e.to_string())
                .and_then(|b| String::from_utf8(b.unwrap_or_default()).map_err(|e| e.to_string()))
                .and_then(|t| car_connectors::manifest::parse_seed(&t));
            match text {
                Ok(seeded) => {
                    for def in seeded {
                        if !defs.iter().any(|d| d.slug == def.slug) {
                            defs.push(def);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(path = %seed.display(), error = %e, "skipping the connectors seed file")
                }
            }
        }
        ConnectorHub {
            set: Connectors::new(defs),
            path,
            saving: Mutex::new(()),
            hidden: Mutex::new(vec![state_root.to_path_buf()]),
            oauth: Default::default(),
        }
    }

    /// Hides `dir` too (the token directory, when it is outside the state root) from every
    /// stdio server started from now on.
    pub fn hide(&self, dir: PathBuf) {
        self.hidden.lock().expect("hidden lock").push(dir);
    }

    /// Writes the manifest (owner-only, atomically).
    pub fn save(&self) -> Result<(), String> {
        let _one_at_a_time = self.saving.lock().unwrap_or_else(|p| p.into_inner());
        let text = serde_json::to_string_pretty(&self.set.manifest())
            .map_err(|e| format!("connectors.json does not encode: {e}"))?;
        crate::state::auth::write_private_file(&self.path, &text)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    /// The secret-store id of one header or environment value of connector `slug`.
    pub fn secret_id(slug: &str, kind: &str, name: &str) -> Result<SecretId, String> {
        SecretId::new(
            Some(&format!("car.connector.{slug}")),
            &format!("{kind}:{name}"),
        )
        .map_err(|e| format!("{kind} {name:?}: {e}"))
    }

    /// Stores `values` (`kind` `header` or `env`) of connector `slug` as secrets.
    pub fn put_secrets<'a>(
        secrets: Option<&SecretStore>,
        slug: &str,
        kind: &str,
        values: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), String> {
        let mut values = values.into_iter().peekable();
        if values.peek().is_none() {
            return Ok(());
        }
        let store = secrets
            .ok_or("the secret store is unavailable, so header and env values cannot be kept")?;
        for (name, value) in values {
            let id = Self::secret_id(slug, kind, name)?;
            store
                .put_private(&id, &Redacted::new(value.clone()))
                .map_err(|e| format!("{kind} {name:?}: {e}"))?;
        }
        Ok(())
    }

    /// Deletes every secret of `def`.
    pub fn delete_secrets(secrets: Option<&SecretStore>, def: &Definition) {
        let Some(store) = secrets else { return };
        let (kind, names) = match &def.transport {
            Transport::Http {
                header_names,
                oauth,
                ..
            } => {
                if *oauth {
                    crate::state::connector_oauth::ConnectorOAuth::forget_secret(
                        secrets, &def.slug,
                    );
                }
                ("header", header_names)
            }
            Transport::Stdio { env_names, .. } => ("env", env_names),
        };
        for name in names {
            if let Ok(id) = Self::secret_id(&def.slug, kind, name) {
                if let Err(e) = store.delete_private(&id) {
                    tracing::warn!(connector = %def.slug, error = %e, "cannot delete a connector secret");
                }
            }
        }
    }

    /// How to reach `def`'s server, its secrets read from the store (`bearer`: the OAuth
    /// access token to send).
    pub fn launch(
        &self,
        secrets: Option<&SecretStore>,
        def: &Definition,
        bearer: Option<String>,
    ) -> Result<Launch, String> {
        let read = |kind: &str, name: &str| -> Result<String, String> {
            let store = secrets.ok_or("the secret store is unavailable")?;
            let id = Self::secret_id(&def.slug, kind, name)?;
            store
                .get_private(&id)
                .map_err(|e| format!("{kind} {name:?}: {e}"))?
                .map(Redacted::into_inner)
                .ok_or_else(|| {
                    format!(
                        "{kind} {name:?} is missing from the secret store; add the connector again"
                    )
                })
        };
        match &def.transport {
            Transport::Http {
                url, header_names, ..
            } => {
                let mut headers: Vec<(String, String)> = header_names
                    .iter()
                    .map(|n| Ok((n.clone(), read("header", n)?)))
                    .collect::<Result<_, String>>()?;
                if let Some(token) = bearer {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
                    headers.push(("Authorization".into(), format!("Bearer {token}")));
                }
                Ok(Launch::Http {
                    url: url.clone(),
                    headers,
                })
            }
            Transport::Stdio {
                command,
                args,
                env_names,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear();
                cmd.env(
                    "PATH",
                    std::env::var_os("PATH")
                        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
                );
                if let Some(home) = std::env::var_os("HOME") {
                    cmd.env("HOME", home);
                }
                for name in env_names {
                    cmd.env(name, read("env", name)?);
                }
                let confinement = car_supervisor::Confinement {
                    hidden: self.hidden.lock().expect("hidden lock").clone(),
                    exposed: Vec::new(),
                };
                car_supervisor::confine::confine_command(&mut cmd, &confinement)?;
                Ok(Launch::Stdio(cmd))
            }
        }
    }

    /// Connects `slug` (reading its secrets) and re-registers the enabled tools.
    pub async fn connect(
        &self,
        secrets: Option<&SecretStore>,
        sessions: &Sessions,
        slug: &str,
    ) -> Result<(), String> {
        let def = self
            .set
            .definition(slug)
            .ok_or_else(|| format!("slug: no connector {slug:?}"))?;
        let bearer = match &def.transport {
            Transport::Http { oauth: true, .. } => match self.oauth.bearer(secrets, slug).await {
                Ok(token) => Some(token),
                Err(e) => {
                    self.set.record_error(slug, e.clone());
                    self.sync(sessions);
                    return Err(e);
                }
            },
            _ => None,
        };
        let outcome = match self.launch(secrets, &def, bearer) {
            Ok(launch) => self.set.connect(slug, launch, CONNECT_TIMEOUT).await,
            Err(e) => Err(e),
        };
        self.sync(sessions);
        outcome
    }

    /// Connects `slug` again when its connection died or its OAuth token is about to
    /// expire (a proposal is about to call one of its tools); a live, current connection is
    /// left alone.
    pub async fn ensure_connected(
        &self,
        secrets: Option<&SecretStore>,
        sessions: &Sessions,
        slug: &str,
    ) -> Result<(), String> {
        if self.set.is_connected(slug) && !self.oauth.expiring(slug) {
            return Ok(());
        }
        tracing::info!(connector = %slug, "reconnecting a connector before a call");
        self.connect(secrets, sessions, slug).await
    }

    /// Connects every connector (startup); failures are recorded on each.
    pub async fn connect_all(&self, secrets: Option<&SecretStore>, sessions: &Sessions) {
        for def in self.set.definitions() {
            if let Err(e) = self.connect(secrets, sessions, &def.slug).await {
                tracing::warn!(connector = %def.slug, error = %e, "connector did not connect");
            }
        }
    }

    /// The enabled tools as registry entries.
    pub fn descriptors(&self) -> Vec<ToolDescriptor> {
        self.set
            .enabled()
            .into_iter()
            .map(|t| ToolDescriptor {
                name: t.canonical,
                description: t.tool.description,
                parameters: Some(t.tool.input_schema),
                returns: None,
                idempotent: false,
                cache_ttl_secs: None,
                rate_limit: None,
                builtin: false,
                connector: Some(t.slug),
            })
            .collect()
    }

    /// Registers the enabled tools in `session` (replacing the connector tools it had).
    pub fn install_into(&self, session: &Session) {
        let tools = self.descriptors();
        session.runtime(|rt| {
            rt.tools.retain(|_, t| t.connector.is_none());
            for tool in tools {
                rt.tools.entry(tool.name.clone()).or_insert(tool);
            }
        });
    }

    /// Registers the enabled tools in every open session.
    pub fn sync(&self, sessions: &Sessions) {
        for session in sessions.live() {
            self.install_into(&session);
        }
    }
}
