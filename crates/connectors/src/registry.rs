//! The daemon's connectors: definitions, their live connections, discovered tools and
//! which are enabled.
//!
//! One `std::sync::Mutex` guards the map and is never held across an `.await`: connecting,
//! listing and calling take the connection (`Arc<Live>`) out first. The daemon drives it: it
//! fills in secrets and builds the stdio command ([`crate::Launch`]), persists
//! [`Connectors::manifest`] after every change, and registers [`Connectors::enabled`]'s
//! tools in its sessions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use car_proto::methods::connectors::{ConnectorStatus, ToolView};
use serde_json::{Map, Value};

use crate::live::{Launch, Live, ToolInfo};
use crate::manifest::{canonical, Definition, Manifest};

/// The most connectors a daemon holds (each may be a child process).
pub const MAX_CONNECTORS: usize = 32;
/// The most tools one connector may list; a server listing more is not connected.
pub const MAX_TOOLS_PER_CONNECTOR: usize = 1024;

#[derive(Debug)]
struct Entry {
    def: Definition,
    live: Option<Arc<Live>>,
    tools: Vec<ToolInfo>,
    last_error: Option<String>,
}

/// An enabled tool, as the sessions register it.
#[derive(Debug, Clone, PartialEq)]
pub struct EnabledTool {
    /// `mcp_{slug}_{name}`.
    pub canonical: String,
    pub slug: String,
    pub tool: ToolInfo,
}

/// Every connector of the daemon.
#[derive(Debug, Default)]
pub struct Connectors {
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl Connectors {
    /// The connectors of `defs`, not yet connected.
    pub fn new(defs: Vec<Definition>) -> Self {
        let entries = defs
            .into_iter()
            .map(|def| {
                let entry = Entry {
                    def,
                    live: None,
                    tools: Vec::new(),
                    last_error: None,
                };
                (entry.def.slug.clone(), entry)
            })
            .collect();
        Connectors {
            entries: Mutex::new(entries),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `connectors.json` holds: the user's definitions (seeded ones the user has not
    /// touched stay out).
    pub fn manifest(&self) -> Manifest {
        Manifest {
            version: 1,
            connectors: self
                .lock()
                .values()
                .filter(|e| !e.def.seeded)
                .map(|e| e.def.clone())
                .collect(),
        }
    }

    /// The definition of `slug`.
    pub fn definition(&self, slug: &str) -> Option<Definition> {
        self.lock().get(slug).map(|e| e.def.clone())
    }

    /// Every definition, by slug.
    pub fn definitions(&self) -> Vec<Definition> {
        self.lock().values().map(|e| e.def.clone()).collect()
    }

    /// Adds `def`, replacing (and disconnecting) a connector of the same slug; the tools
    /// it had enabled stay enabled when the new server lists them.
    pub fn upsert(&self, mut def: Definition) -> Result<(), String> {
        let mut entries = self.lock();
        if !entries.contains_key(&def.slug) && entries.len() >= MAX_CONNECTORS {
            return Err(format!(
                "name: a daemon holds at most {MAX_CONNECTORS} connectors; remove one first"
            ));
        }
        if let Some(old) = entries.remove(&def.slug) {
            def.enabled.extend(old.def.enabled);
        }
        let entry = Entry {
            def,
            live: None,
            tools: Vec::new(),
            last_error: None,
        };
        entries.insert(entry.def.slug.clone(), entry);
        Ok(())
    }

    /// Connects `slug` with `launch` and lists its tools; the outcome (or its error) is
    /// recorded on the connector. Fails when `slug` is unknown.
    pub async fn connect(
        &self,
        slug: &str,
        launch: Launch,
        timeout: Duration,
    ) -> Result<(), String> {
        if !self.lock().contains_key(slug) {
            return Err(format!("slug: no connector {slug:?}"));
        }
        let outcome = async {
            let live = Live::connect(launch, timeout).await?;
            let tools = live.tools(timeout).await?;
            if tools.len() > MAX_TOOLS_PER_CONNECTOR {
                return Err(format!(
                    "the server lists {} tools, more than the {MAX_TOOLS_PER_CONNECTOR} a connector may have",
                    tools.len()
                ));
            }
            Ok::<_, String>((live, tools))
        }
        .await;
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(slug) else {
            return Err(format!("connector {slug:?} was removed while it connected"));
        };
        match outcome {
            Ok((live, tools)) => {
                entry.live = Some(Arc::new(live));
                entry.tools = tools;
                entry.last_error = None;
                Ok(())
            }
            Err(e) => {
                entry.live = None;
                entry.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Records `error` on `slug` (a connection that could not even be attempted) and drops
    /// its connection.
    pub fn record_error(&self, slug: &str, error: String) {
        if let Some(entry) = self.lock().get_mut(slug) {
            entry.live = None;
            entry.last_error = Some(error);
        }
    }

    /// Re-runs `tools/list` on a live connector (a dead one answers its error).
    pub async fn relist(&self, slug: &str, timeout: Duration) -> Result<(), String> {
        let live = self.live(slug)?;
        let listed = live.tools(timeout).await;
        let mut entries = self.lock();
        let entry = entries
            .get_mut(slug)
            .ok_or_else(|| format!("slug: no connector {slug:?}"))?;
        let listed = listed.and_then(|tools| {
            if tools.len() > MAX_TOOLS_PER_CONNECTOR {
                Err(format!(
                    "the server lists {} tools, more than the {MAX_TOOLS_PER_CONNECTOR} a connector may have",
                    tools.len()
                ))
            } else {
                Ok(tools)
            }
        });
        match listed {
            Ok(tools) => {
                entry.tools = tools;
                entry.last_error = None;
                Ok(())
            }
            Err(e) => {
                entry.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    fn live(&self, slug: &str) -> Result<Arc<Live>, String> {
        let entries = self.lock();
        let entry = entries
            .get(slug)
            .ok_or_else(|| format!("slug: no connector {slug:?}"))?;
        entry
            .live
            .clone()
            .filter(|l| l.is_open())
            .ok_or_else(|| format!("connector {slug:?} is not connected"))
    }

    /// Whether `slug` has an open connection.
    pub fn is_connected(&self, slug: &str) -> bool {
        self.live(slug).is_ok()
    }

    fn status_of(entry: &Entry) -> ConnectorStatus {
        let connected = entry.live.as_ref().is_some_and(|l| l.is_open());
        let enabled = entry
            .tools
            .iter()
            .filter(|t| entry.def.enabled.contains(&t.name))
            .count();
        ConnectorStatus {
            slug: entry.def.slug.clone(),
            name: entry.def.name.clone(),
            url: entry.def.location(),
            connected,
            tool_count: entry.tools.len() as u64,
            enabled_count: enabled as u64,
            last_error: entry.last_error.clone().or_else(|| {
                (!connected && entry.live.is_some())
                    .then(|| "the server closed the connection".into())
            }),
        }
    }

    /// `slug`'s `ConnectorStatus`.
    pub fn status(&self, slug: &str) -> Option<ConnectorStatus> {
        self.lock().get(slug).map(Self::status_of)
    }

    /// Every connector's status, by slug.
    pub fn statuses(&self) -> Vec<ConnectorStatus> {
        self.lock().values().map(Self::status_of).collect()
    }

    /// `slug`'s tools as CAR's `ToolView`s.
    pub fn tool_views(&self, slug: &str) -> Option<Vec<ToolView>> {
        let entries = self.lock();
        let entry = entries.get(slug)?;
        Some(
            entry
                .tools
                .iter()
                .map(|t| ToolView {
                    name: t.name.clone(),
                    canonical: canonical(slug, &t.name),
                    description: t.description.clone(),
                    enabled: entry.def.enabled.contains(&t.name),
                })
                .collect(),
        )
    }

    /// Enables (`on`) or disables `tools` of `slug`; answers how many changed. Enabling
    /// needs the server to list the tool (`tools[i]` names the first that it does not);
    /// disabling a tool that is not enabled changes nothing. Touching a seeded connector
    /// makes it the user's.
    pub fn set_enabled(&self, slug: &str, tools: &[String], on: bool) -> Result<u64, String> {
        let mut entries = self.lock();
        let entry = entries
            .get_mut(slug)
            .ok_or_else(|| format!("slug: no connector {slug:?}"))?;
        if on {
            if let Some((i, name)) = tools
                .iter()
                .enumerate()
                .find(|(_, name)| !entry.tools.iter().any(|t| &t.name == *name))
            {
                return Err(format!(
                    "tools[{i}]: connector {slug:?} lists no tool {name:?} (connectors.tools shows what it has)"
                ));
            }
        }
        let mut changed = 0;
        for name in tools {
            let did = if on {
                entry.def.enabled.insert(name.clone())
            } else {
                entry.def.enabled.remove(name)
            };
            changed += u64::from(did);
        }
        entry.def.seeded = false;
        Ok(changed)
    }

    /// Removes `slug` (its connection is dropped: a stdio server is killed).
    pub fn remove(&self, slug: &str) -> Option<Definition> {
        self.lock().remove(slug).map(|e| e.def)
    }

    /// Every enabled tool the servers list, by canonical name.
    pub fn enabled(&self) -> Vec<EnabledTool> {
        self.lock()
            .values()
            .flat_map(|e| {
                e.tools
                    .iter()
                    .filter(|t| e.def.enabled.contains(&t.name))
                    .map(|t| EnabledTool {
                        canonical: canonical(&e.def.slug, &t.name),
                        slug: e.def.slug.clone(),
                        tool: t.clone(),
                    })
            })
            .collect()
    }

    /// Calls enabled tool `canonical` with `arguments` within `timeout`.
    pub async fn call(
        &self,
        canonical_name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let (live, tool) = {
            let entries = self.lock();
            let found = entries.values().find_map(|e| {
                let t = e.tools.iter().find(|t| {
                    e.def.enabled.contains(&t.name)
                        && canonical(&e.def.slug, &t.name) == canonical_name
                })?;
                Some((e, t.name.clone()))
            });
            let (entry, tool) = found
                .ok_or_else(|| format!("{canonical_name} is not an enabled connector tool"))?;
            let live = entry
                .live
                .clone()
                .filter(|l| l.is_open())
                .ok_or_else(|| format!("connector {:?} is not connected", entry.def.slug))?;
            (live, tool)
        };
        live.call(&tool, arguments, timeout).await
    }
}
