//! The stdio transport: newline-delimited JSON-RPC on a reader and a writer (the `car-mcp`
//! binary's stdin and stdout).
//!
//! This module owns line framing and concurrency: each request runs on its own task, so a
//! slow tool call never delays a `ping`, and one writer task serializes the answers, one
//! line each. A line longer than [`MAX_LINE_BYTES`] is skipped to its end and answered with
//! `-32600`; a line that is not UTF-8 or not JSON with `-32700`; a JSON array with `-32600`
//! (no batches, as on HTTP). At end of input the loop waits for the requests in flight, then
//! returns. Nothing but protocol lines is ever written to the writer.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use car_proto::errors::RpcError;

use crate::daemon::Caller;
use crate::dispatch::{self, McpServer};

/// Longest message line accepted.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Serves `server` on `input` / `output` until `input` ends.
pub async fn serve<R, W>(server: Arc<McpServer>, mut input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Value>(64);
    let writer = tokio::spawn(write_lines(rx, output));
    let mut in_flight = tokio::task::JoinSet::new();
    let caller = Arc::new(Caller::default());
    loop {
        let line = match read_line(&mut input).await? {
            Line::End => break,
            Line::TooLong => {
                let error = RpcError::invalid_request(format!(
                    "message line exceeds {MAX_LINE_BYTES} bytes"
                ));
                send(&tx, dispatch::error_response(Value::Null, &error)).await;
                continue;
            }
            Line::Text(bytes) => bytes,
        };
        let text = match std::str::from_utf8(&line) {
            Ok(text) => text.trim(),
            Err(_) => {
                send(&tx, dispatch::parse_refusal("line is not UTF-8")).await;
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) => {
                send(&tx, dispatch::parse_refusal(e)).await;
                continue;
            }
        };
        if value.is_array() {
            send(&tx, dispatch::batch_refusal()).await;
            continue;
        }
        let server = server.clone();
        let tx = tx.clone();
        let caller = caller.clone();
        in_flight.spawn(async move {
            if let Some(answer) = server.handle(dispatch::classify(value), &caller).await {
                send(&tx, answer).await;
            }
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
    drop(tx);
    writer
        .await
        .map_err(|e| std::io::Error::other(format!("stdio writer task failed: {e}")))?
}

async fn send(tx: &mpsc::Sender<Value>, message: Value) {
    // The writer only stops when output is gone; then there is no one to answer.
    let _ = tx.send(message).await;
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Value>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(message) = rx.recv().await {
        let mut line = message.to_string();
        line.push('\n');
        output.write_all(line.as_bytes()).await?;
        output.flush().await?;
    }
    Ok(())
}

enum Line {
    Text(Vec<u8>),
    TooLong,
    End,
}

/// The next line without its newline, never buffering more than [`MAX_LINE_BYTES`].
async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Text(line),
            });
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE_BYTES {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(available.len());
        input.consume(consumed);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::DaemonAccess;
    use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
    use serde_json::json;
    use tokio::io::{AsyncReadExt, BufReader};

    async fn run(input: &[u8]) -> Vec<Value> {
        let config = ClientConfig::with_env(EnvSnapshot::with_car_home("/nonexistent"))
            .url("ws://127.0.0.1:9");
        let server = Arc::new(McpServer::stdio(DaemonAccess::Process(Client::new(config))));
        let (out_w, mut out_r) = tokio::io::duplex(1 << 20);
        serve(server, BufReader::new(input), out_w).await.unwrap();
        let mut text = String::new();
        out_r.read_to_string(&mut text).await.unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn answers_requests_and_skips_notifications() {
        let out = run(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}").await;
        assert_eq!(out.len(), 2);
        let ping = out.iter().find(|m| m["id"] == 1).unwrap();
        assert_eq!(ping["result"], json!({}));
        let list = out.iter().find(|m| m["id"] == 2).unwrap();
        assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 16);
    }

    #[tokio::test]
    async fn bad_lines_get_error_answers() {
        let out = run(b"{not json\n[1,2]\n\xff\xfe\n").await;
        let codes: Vec<i64> = out
            .iter()
            .map(|m| m["error"]["code"].as_i64().unwrap())
            .collect();
        assert_eq!(codes, [-32700, -32600, -32700]);
    }

    #[tokio::test]
    async fn an_overlong_line_is_skipped_to_its_end() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
        let out = run(&input).await;
        assert_eq!(out[0]["error"]["code"], -32600);
        assert_eq!(out[1]["id"], 3);
    }
}
