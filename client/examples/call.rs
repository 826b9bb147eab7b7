//! Calls one daemon method through the blocking client, the way a binding would.
//!
//! ```text
//! cargo run -p car-daemon-client --example call -- [METHOD] [PARAMS_JSON]
//! ```
//!
//! Discovery follows the usual rules (`CAR_DAEMON_URL`, `CAR_AUTH_TOKEN`, the token file,
//! the Unix socket). A `tools.execute` handler that echoes its call is registered, so a
//! proposal that calls a tool sees the reverse-call path too.
#![allow(clippy::print_stdout)]

use car_daemon_client::{BlockingClient, ClientConfig, Error};
use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let method = args
        .next()
        .unwrap_or_else(|| "capabilities.list".to_string());
    let params: Value = match args.next() {
        Some(text) => serde_json::from_str(&text)?,
        None => json!({}),
    };
    let client = BlockingClient::new(ClientConfig::from_env())?;
    client
        .client()
        .register_tool_handler(|call| Ok(json!({"echo": call.to_call_json()})));
    client
        .client()
        .register_notification_handler("infer.progress", |p| println!("progress: {p}"));

    let session = client.connect()?;
    println!("connected via {:?}", session.endpoint);
    println!(
        "server {} speaks protocol {}; negotiated {:?}",
        session.handshake.server_version,
        session.handshake.protocol_version,
        session.handshake.negotiated_capabilities
    );
    match client.call(&method, params) {
        Ok(result) => println!("{}", serde_json::to_string_pretty(&result)?),
        Err(Error::Rpc {
            code,
            message,
            data,
        }) => {
            println!("daemon said no: {code} {message} {data:?}")
        }
        Err(other) => return Err(other.into()),
    }
    client.close();
    Ok(())
}
