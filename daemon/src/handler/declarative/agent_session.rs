//! The session a declarative agent runs on: a connection-less [`Session`] that acts as
//! its caller (same identity, permission tier and policies) but holds only the agent's
//! allowed tools, with its built-in tools rooted in the run's scratch workspace.
//!
//! Its outbound frames (proposal events, run traces meant for a client) have no socket:
//! a drain task reads and drops them, so its queue never fills. Dropping an
//! [`AgentSession`] tears it down as a closed connection is (open runs marked incomplete,
//! reverse calls failed) and removes the scratch workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use car_proto::errors::RpcError;
use car_proto::methods::declagents::DeclarativeAgentSpec;
use tokio_util::sync::CancellationToken;

use crate::handler::Call;
use crate::state::outbound::{self, OutFrame};
use crate::state::per_connection::ToolDescriptor;
use crate::state::session::Session;
use crate::state::ServerState;

/// A running declarative agent's session and scratch workspace.
pub struct AgentSession {
    pub call: Call,
    pub scratch: PathBuf,
    drain: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSession")
            .field("session", &self.call.session.id)
            .field("scratch", &self.scratch)
            .finish()
    }
}

/// The tools `spec` may call, as registry entries: built-in tools, and connector tools
/// enabled now. A name that is neither fails the run before a turn is spent.
fn tools_for(
    state: &ServerState,
    spec: &DeclarativeAgentSpec,
) -> Result<Vec<ToolDescriptor>, RpcError> {
    let builtin = crate::state::registration::builtin_descriptors();
    let connector = state.data.connectors.descriptors();
    car_declagents::allowed_tools(spec)
        .into_iter()
        .map(|name| {
            builtin
                .iter()
                .chain(connector.iter())
                .find(|t| t.name == name)
                .cloned()
                .ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "spec.tools: {name:?} is neither a built-in tool nor an enabled connector tool (agent {:?})",
                        spec.id.as_str()
                    ))
                    .with_data(serde_json::json!({"reason": "tool_unavailable", "tool": name}))
                })
        })
        .collect()
}

fn scratch_dir(root: &Path, id: &str) -> Result<PathBuf, RpcError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = root.join(format!(
        "{}-{id}-{}",
        std::process::id(),
        &crate::state::auth::mint_token()[..12]
    ));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| RpcError::internal(format!("cannot create a scratch workspace: {e}")))?;
    Ok(dir)
}

impl AgentSession {
    /// A session for `spec` acting as `caller`'s principal.
    pub fn open(caller: &Call, spec: &DeclarativeAgentSpec) -> Result<Self, RpcError> {
        let state = &caller.state;
        let tools = tools_for(state, spec)?;
        let scratch = scratch_dir(&state.data.declagents.scratch_root, spec.id.as_str())?;
        let workspace = match car_builtin_tools::Workspace::new(&scratch) {
            Ok(ws) => Arc::new(ws),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(RpcError::internal(format!("scratch workspace: {e}")));
            }
        };
        let (queue, mut frames) = outbound::channel(
            state.daemon.config.max_outbound_bytes,
            CancellationToken::new(),
        );
        let drain = tokio::spawn(async move {
            while let Some(frame) = frames.rx.recv().await {
                if let OutFrame::Text(text) = frame {
                    frames.written(text.len());
                }
            }
        });
        let session = Arc::new(Session::new(
            state.daemon.next_session_id(),
            "in-daemon",
            false,
            queue,
            CancellationToken::new(),
            CancellationToken::new(),
            None,
        ));
        session.set_identity(caller.session.identity());
        if let Some(caps) = caller.session.negotiated() {
            session.set_negotiated(caps);
        }
        session.set_permission_tier(caller.session.permission_tier());
        session.set_workspace(workspace);
        let policies = caller.session.runtime(|rt| rt.policies.clone());
        session.runtime(|rt| {
            rt.policies = policies;
            for tool in tools {
                rt.tools.insert(tool.name.clone(), tool);
            }
        });
        Ok(AgentSession {
            call: Call {
                session,
                state: state.clone(),
                method: caller.method,
                id: None,
                invoke: caller.invoke.clone(),
            },
            scratch,
            drain,
        })
    }
}

impl Drop for AgentSession {
    fn drop(&mut self) {
        let session = self.call.session.clone();
        let state = self.call.state.clone();
        session.closed.cancel();
        session.fail_reverse_calls();
        self.drain.abort();
        let scratch = self.scratch.clone();
        let closing = self.call.invoke.close(session, state);
        // Teardown awaits (open runs are marked incomplete in the store); a drop cannot.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                closing.await;
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(scratch)).await;
            });
        } else {
            let _ = std::fs::remove_dir_all(scratch);
        }
    }
}
