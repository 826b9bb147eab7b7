//! Host programs' calls: any method over the host-token connection, and that
//! connection's lifecycle.
//!
//! [`Client::call_host_management`] is CAR's: it sends only methods the table labels
//! `host` (or `owner`), so a binding cannot widen a call by accident. A host program (a
//! tray app, `car-host`) also subscribes to `host.event`, reads `host.*`, and resolves
//! approvals on its host session; [`Client::call_as_host`] sends any declared method over
//! that connection. Notifications on it reach the handlers registered with
//! [`Client::register_notification_handler`], like the operator connection's. A host that
//! keeps a subscription watches [`Client::host_connection_closed`] and resubscribes (with
//! `host.subscribe {after_seq, epoch}`) on the next connection, whose
//! [`Client::host_connection_epoch`] is new.

use serde_json::Value;

use super::{CallOptions, Client, Credential};
use crate::error::Error;

impl Client {
    /// Calls `method` (any declared method) over the host-token connection.
    pub async fn call_as_host(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.call_as_host_with(method, params, CallOptions::default())
            .await
    }

    /// [`Client::call_as_host`] with explicit options.
    pub async fn call_as_host_with(
        &self,
        method: &str,
        params: Value,
        options: CallOptions,
    ) -> Result<Value, Error> {
        if car_proto::methods::lookup(method).is_none() {
            return Err(Error::Refused(format!("{method} is not a daemon method")));
        }
        let live = self.live(Credential::HostToken).await?;
        let wait = self.wait_for(method, &params, options);
        live.conn.call(method, params, wait).await
    }

    /// The host-token connection's epoch, connecting first when there is none: 1 for the
    /// first, one more for each connection opened after one ended.
    pub async fn host_connection_epoch(&self) -> Result<u64, Error> {
        Ok(self.live(Credential::HostToken).await?.epoch)
    }

    /// Resolves when the current host-token connection ends (at once when there is none).
    pub async fn host_connection_closed(&self) {
        let ended = self.inner.host.get().map(|live| live.conn.ended());
        if let Some(ended) = ended {
            ended.cancelled().await;
        }
    }
}
