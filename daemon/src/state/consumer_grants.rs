//! [`ConsumerGrants`]: short-lived inference-only credentials (`session.consumer.issue` /
//! `revoke`, and `session.auth {consumer_id, token}`), CAR's `inference_consumer` role.
//!
//! # Rules
//! - Only a connection bound to an agent (`session.auth {token, agent_id}`) issues grants, and only
//!   for the methods declared `grantable` (the inference calls); an agent whose registration has a
//!   `method_allowlist` must list `session.consumer.issue` and every granted method (a grant never
//!   carries more than the parent socket may call).
//! - `ttl_secs` defaults to 300 and may be 1–900; at most [`MAX_PER_AGENT`] live grants per agent
//!   (a further issue is refused rather than evicting one).
//! - The token (43 base64url characters) is returned once and kept only in memory: grants die with
//!   the daemon.
//! - A consumer socket's allowlist is exactly the granted methods (plus `session.auth` and
//!   `server.handshake`); it has the agent's identity for memory and runs, never the attachment.
//!   When the grant ends — TTL, `revoke` from the issuing socket, or the issuing socket closing —
//!   every consumer socket is closed, and any call already past the gate is cut with it; a call on
//!   an ended grant is answered `-32001`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_proto::errors::RpcError;
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const MAX_TTL_SECS: u64 = 900;
pub const MAX_PER_AGENT: usize = 16;

/// A grant's live state, shared by the registry and every socket using it.
#[derive(Debug)]
pub struct Grant {
    pub consumer_id: String,
    token: String,
    pub parent_agent_id: String,
    /// The issuing socket.
    pub parent_session: u64,
    pub methods: Vec<String>,
    pub issued_at_ms: u64,
    pub expires_at_ms: u64,
    expires_at: Instant,
    /// Cancelled when the grant ends (revoked, expired, parent gone).
    pub ended: CancellationToken,
}

impl Grant {
    pub fn is_live(&self) -> bool {
        !self.ended.is_cancelled() && Instant::now() < self.expires_at
    }

    /// Resolves when the grant ends for any reason.
    pub async fn until_ended(&self) {
        let deadline = tokio::time::Instant::from_std(self.expires_at);
        tokio::select! {
            _ = self.ended.cancelled() => {}
            _ = tokio::time::sleep_until(deadline) => self.ended.cancel(),
        }
    }
}

#[derive(Debug, Default)]
pub struct ConsumerGrants {
    grants: Mutex<HashMap<String, Arc<Grant>>>,
}

fn invalid(detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(detail)
}

impl ConsumerGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Grant>>> {
        self.grants.lock().expect("grants lock")
    }

    /// Issues a grant for `agent` on socket `parent` (see the module docs).
    pub fn issue(
        &self,
        agent: &str,
        parent: u64,
        allowlist: Option<&[String]>,
        methods: Vec<String>,
        ttl_secs: Option<u64>,
    ) -> Result<(Arc<Grant>, String), RpcError> {
        if methods.is_empty() {
            return Err(invalid("methods: must name at least one inference method"));
        }
        for (i, m) in methods.iter().enumerate() {
            let grantable = car_proto::methods::lookup(m).is_some_and(|d| d.spec.access.grantable);
            if !grantable {
                let names: Vec<_> = car_proto::methods::grantable_methods()
                    .map(|d| d.name())
                    .collect();
                return Err(invalid(format!(
                    "methods[{i}]: {m:?} cannot be granted (only {})",
                    names.join(", ")
                )));
            }
            if let Some(list) = allowlist {
                if !list.iter().any(|a| a == m) {
                    return Err(invalid(format!(
                        "methods[{i}]: {m:?} is not in this agent's method_allowlist"
                    ))
                    .with_data(json!({"reason": "not_permitted"})));
                }
            }
        }
        if let Some(list) = allowlist {
            if !list.iter().any(|a| a == "session.consumer.issue") {
                return Err(RpcError::internal(
                    "permission denied: this agent's method_allowlist does not permit session.consumer.issue",
                )
                .with_data(json!({"reason": "not_permitted"})));
            }
        }
        let ttl = match ttl_secs {
            None => DEFAULT_TTL,
            Some(0) => return Err(invalid("ttl_secs: must be at least 1")),
            Some(s) if s > MAX_TTL_SECS => {
                return Err(invalid(format!("ttl_secs: at most {MAX_TTL_SECS}")))
            }
            Some(s) => Duration::from_secs(s),
        };
        let mut methods = methods;
        methods.sort();
        methods.dedup();
        let mut grants = self.lock();
        grants.retain(|_, g| g.is_live());
        let live = grants
            .values()
            .filter(|g| g.parent_agent_id == agent)
            .count();
        if live >= MAX_PER_AGENT {
            return Err(RpcError::internal(format!(
                "agent {agent:?} already holds {MAX_PER_AGENT} live consumer grants; revoke one first"
            ))
            .with_data(json!({"reason": "grant_cap"})));
        }
        let token = crate::state::auth::mint_token();
        let now_ms = car_proto::clock::now_ms_u64();
        let grant = Arc::new(Grant {
            consumer_id: format!("consumer-{}", &crate::state::auth::mint_token()[..16]),
            token: token.clone(),
            parent_agent_id: agent.to_string(),
            parent_session: parent,
            methods,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms + ttl.as_millis() as u64,
            expires_at: Instant::now() + ttl,
            ended: CancellationToken::new(),
        });
        grants.insert(grant.consumer_id.clone(), grant.clone());
        Ok((grant, token))
    }

    /// The live grant `consumer_id` when `token` is its token.
    pub fn verify(&self, consumer_id: &str, token: &str) -> Option<Arc<Grant>> {
        let grants = self.lock();
        let grant = grants.get(consumer_id)?;
        (grant.is_live() && crate::state::auth::tokens_match(&grant.token, token))
            .then(|| grant.clone())
    }

    /// Revokes a grant issued by socket `parent`; false when there is none (or another
    /// socket issued it).
    pub fn revoke(&self, consumer_id: &str, parent: u64) -> bool {
        let mut grants = self.lock();
        match grants.get(consumer_id) {
            Some(g) if g.parent_session == parent => {
                g.ended.cancel();
                grants.remove(consumer_id);
                true
            }
            _ => false,
        }
    }

    /// The issuing socket closed: its grants end.
    pub fn on_session_closed(&self, session: u64) {
        self.lock().retain(|_, g| {
            let mine = g.parent_session == session;
            if mine {
                g.ended.cancel();
            }
            !mine
        });
    }
}
