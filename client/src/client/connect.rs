//! Opening one connection: discovery, the socket, `session.auth`, `server.handshake`.
//!
//! This module owns the connect sequence and the `session.auth` frame ([`auth_params`]);
//! [`super`] owns when a connection is opened and which one is reused. Every step fails
//! closed: a refusal, a malformed success or a timeout becomes [`Error::Handshake`] and
//! the socket is dropped unused.
//!
//! The `session.auth` params, by connection:
//! - operator connection of a lifecycle agent (an agent identity was discovered): `{token: <agent
//!   token>, agent_id, memory_namespace?}` — the agent's token replaces the daemon token, so none
//!   is needed;
//! - operator connection otherwise: `{token, memory_namespace?}` when a token was found, else no
//!   frame;
//! - host-management connection: `{host_token, memory_namespace?}`; never an agent identity.

use car_proto::capabilities::{CLIENT_OPTIONAL, CLIENT_REQUIRED};
use car_proto::errors::RpcError;
use car_proto::handshake::check_reply;
use serde_json::{json, Value};

use super::{Client, Credential, Live, Session};
use crate::connection;
use crate::discovery::{self, Discovered, RealFs, Secret};
use crate::error::Error;
use crate::timeouts::Wait;

/// The `session.auth` params for a connection presenting `credential` (see the module
/// docs), or `None` when no frame is sent. `host_token` is the host token for a
/// host-management connection.
pub(super) fn auth_params(
    credential: Credential,
    found: &Discovered,
    host_token: Option<&Secret>,
) -> Option<Value> {
    let mut params = match credential {
        Credential::Token => match (&found.agent, &found.token) {
            (Some(agent), _) => json!({
                "token": agent.token.expose(),
                "agent_id": agent.agent_id,
            }),
            (None, Some(token)) => json!({ "token": token.secret.expose() }),
            (None, None) => return None,
        },
        Credential::HostToken => json!({ "host_token": host_token?.expose() }),
    };
    if let Some(ns) = &found.memory_namespace {
        params["memory_namespace"] = json!(ns);
    }
    Some(params)
}

impl Client {
    pub(super) async fn open(&self, credential: Credential) -> Result<Live, Error> {
        let config = &self.inner.config;
        let found = discovery::discover(&config.overrides, &config.env, &RealFs)?;
        let host_token = match credential {
            Credential::Token => None,
            Credential::HostToken => {
                Some(discovery::discover_host_token(&config.env, &RealFs)?.secret)
            }
        };
        let auth_params = auth_params(credential, &found, host_token.as_ref());
        tracing::debug!(
            endpoint = ?found.endpoint,
            auth = auth_params.is_some(),
            agent_id = found.agent.as_ref().map(|a| a.agent_id.as_str()),
            "connecting"
        );
        let conn = connection::open(
            &found.endpoint,
            self.inner.registry.clone(),
            config.timeouts.connect,
        )
        .await?;
        let step = Wait::Absolute(config.timeouts.handshake);
        let auth = match auth_params {
            Some(params) => {
                let reply = conn
                    .call("session.auth", params, step)
                    .await
                    .map_err(|e| handshake_error("session.auth", e))?;
                if reply.get("ok") != Some(&Value::Bool(true)) {
                    return Err(Error::handshake(format!(
                        "session.auth reply is not {{ok: true}}: {reply}"
                    )));
                }
                Some(reply)
            }
            None => {
                if found.memory_namespace.is_some() {
                    tracing::warn!("memory namespace not sent: no token, so no session.auth");
                }
                None
            }
        };
        let params = json!({
            "protocol_version": car_proto::PROTOCOL_VERSION,
            "client_version": config.client_version,
            "required_capabilities": CLIENT_REQUIRED,
            "optional_capabilities": CLIENT_OPTIONAL,
        });
        let reply = conn
            .call("server.handshake", params, step)
            .await
            .map_err(|e| handshake_error("server.handshake", e))?;
        let handshake = check_reply(&reply, CLIENT_REQUIRED).map_err(Error::handshake)?;
        tracing::debug!(
            capabilities = ?handshake.negotiated_capabilities,
            server_version = %handshake.server_version,
            "connected"
        );
        Ok(Live {
            conn,
            session: Session {
                endpoint: found.endpoint,
                auth,
                handshake,
            },
            epoch: 0,
        })
    }
}

/// Maps a failure of a connect step: refusals and timeouts fail closed as
/// [`Error::Handshake`]; a broken socket stays a transport failure.
fn handshake_error(step: &str, err: Error) -> Error {
    match err {
        Error::Rpc {
            code,
            message,
            data,
        } => Error::Handshake {
            reason: format!("{step} refused: {message} (code {code})"),
            rpc: Some(RpcError {
                code,
                message,
                data,
            }),
        },
        Error::Timeout { after, .. } => {
            Error::handshake(format!("{step} timed out after {}ms", after.as_millis()))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::{AgentIdentity, Credential as Found, Endpoint, TokenSource};

    fn found(token: Option<&str>, agent: Option<(&str, &str)>, ns: Option<&str>) -> Discovered {
        Discovered {
            endpoint: Endpoint::Unix {
                path: "/unused".into(),
            },
            token: token.map(|t| Found {
                secret: Secret::new(t.into()),
                source: TokenSource::Env,
            }),
            memory_namespace: ns.map(str::to_string),
            agent: agent.map(|(id, t)| AgentIdentity::new(id, t)),
        }
    }

    #[test]
    fn the_operator_frame_carries_the_daemon_token_or_none() {
        let f = found(Some("daemon-tok"), None, None);
        assert_eq!(
            auth_params(Credential::Token, &f, None),
            Some(json!({"token": "daemon-tok"}))
        );
        let f = found(Some("daemon-tok"), None, Some("proj"));
        assert_eq!(
            auth_params(Credential::Token, &f, None),
            Some(json!({"token": "daemon-tok", "memory_namespace": "proj"}))
        );
        assert_eq!(
            auth_params(Credential::Token, &found(None, None, Some("proj")), None),
            None
        );
    }

    #[test]
    fn an_agent_identity_replaces_the_daemon_token() {
        let f = found(
            Some("daemon-tok"),
            Some(("agent-7", "agent-tok")),
            Some("ns"),
        );
        assert_eq!(
            auth_params(Credential::Token, &f, None),
            Some(json!({"token": "agent-tok", "agent_id": "agent-7", "memory_namespace": "ns"}))
        );
        // No daemon token needed at all.
        let f = found(None, Some(("agent-7", "agent-tok")), None);
        assert_eq!(
            auth_params(Credential::Token, &f, None),
            Some(json!({"token": "agent-tok", "agent_id": "agent-7"}))
        );
    }

    #[test]
    fn the_host_frame_never_carries_an_agent_identity() {
        let f = found(Some("daemon-tok"), Some(("agent-7", "agent-tok")), None);
        let host = Secret::new("host-tok".into());
        assert_eq!(
            auth_params(Credential::HostToken, &f, Some(&host)),
            Some(json!({"host_token": "host-tok"}))
        );
    }
}
