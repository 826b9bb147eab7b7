//! [`HostClient`]: the host-authority view of a [`CarDaemonClient`] (CAR's `HostClient`:
//! "host methods stay off CarRuntime autocomplete").
//!
//! It owns nothing but the placement: it shares the client it was made from (the same
//! connections, handlers and reconnects) and reaches the daemon over that client's
//! host-management connection, which authenticates with the `host-token` file beside the
//! token file. The host token is read only when a host method is called, never by the
//! ordinary connection. The `host` methods' typed members and JSON-string wrappers are
//! generated onto it (`generated`); `daemon_call_host_management` is the bridge they use.

use std::sync::Arc;

use car_daemon_client::{Naming, Projected};
use serde_json::Value;

use crate::client::{parse_params, CarDaemonClient, MemberCalls};
use crate::error::CarError;

/// The `host` methods of the daemon behind a [`CarDaemonClient`].
#[derive(Debug, uniffi::Object)]
pub struct HostClient {
    client: Arc<CarDaemonClient>,
}

#[uniffi::export]
impl HostClient {
    /// The host methods of `client`'s daemon, over `client`'s host-management connection
    /// (opened on the first host call).
    #[uniffi::constructor]
    pub fn new(client: Arc<CarDaemonClient>) -> Arc<Self> {
        Arc::new(Self { client })
    }

    /// Calls a host-management method (`host` or `owner` role) with `params_json` over the
    /// connection authenticated with the host token; other methods are `Refused` before
    /// the host token is read.
    pub fn daemon_call_host_management(
        &self,
        method: String,
        params_json: String,
    ) -> Result<String, CarError> {
        let params = parse_params(&params_json)?;
        let result = self
            .client
            .blocking()
            .call_host_management(&method, params)?;
        Ok(result.to_string())
    }
}

impl MemberCalls for HostClient {
    fn member(
        &self,
        method: &str,
        member: &str,
        args: Vec<Option<Value>>,
    ) -> Result<Projected, CarError> {
        // The client sends a `host` method's member over the host-management connection.
        Ok(self
            .client
            .blocking()
            .call_member(method, member, &args, Naming::Camel)?)
    }
}
