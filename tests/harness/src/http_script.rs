//! A scripted local HTTP/1.1 server: stands in for a remote OpenAI-compatible provider in
//! the inference engine's and the daemon's tests.
//!
//! It answers one connection per scripted [`Reply`], in order, and records every request
//! (path, `Authorization` header, JSON body) so tests can check what the provider saw.
//! Every reply closes its connection; a streamed reply has no `Content-Length` and ends when
//! the socket closes, which is how SSE bodies end here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

/// One scripted response: status, extra headers, and body chunks written with a pause
/// before each.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub chunks: Vec<(Duration, Vec<u8>)>,
    /// No `Content-Length`: the body ends when the connection closes.
    pub streamed: bool,
}

impl Reply {
    /// A JSON body with this status.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            chunks: vec![(Duration::ZERO, body.to_string().into_bytes())],
            streamed: false,
        }
    }

    /// A `text/event-stream` of `data: <event>` frames, then `data: [DONE]`, each written
    /// after `pause`.
    pub fn sse(events: &[Value], pause: Duration) -> Self {
        let mut chunks: Vec<(Duration, Vec<u8>)> = events
            .iter()
            .map(|e| (pause, format!("data: {e}\n\n").into_bytes()))
            .collect();
        chunks.push((pause, b"data: [DONE]\n\n".to_vec()));
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            chunks,
            streamed: true,
        }
    }

    /// One streamed OpenAI chat turn: `text` (when not empty), then one tool call per
    /// `(id, name, arguments)`, the finish reason (`tool_calls` or `stop`), and a usage chunk
    /// of `(prompt_tokens, completion_tokens)` when given.
    pub fn openai_turn(
        text: &str,
        calls: &[(&str, &str, Value)],
        usage: Option<(u64, u64)>,
    ) -> Self {
        let mut events = Vec::new();
        if !text.is_empty() {
            events.push(serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}));
        }
        for (i, (id, name, args)) in calls.iter().enumerate() {
            events.push(serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "id": id,
                "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}, "finish_reason": null}]}));
        }
        let reason = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        events.push(
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}),
        );
        if let Some((prompt, completion)) = usage {
            events.push(serde_json::json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}));
        }
        Self::sse(&events, Duration::ZERO)
    }
}

/// What the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub authorization: Option<String>,
    /// The body parsed as JSON (`Null` when it was not JSON).
    pub body: Value,
}

/// The running server; `base_url` is `http://127.0.0.1:<port>`.
#[derive(Debug)]
pub struct Server {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `replies` in order, one connection each, on an ephemeral loopback port.
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let base_url = format!("http://{}", listener.local_addr().expect("local address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let thread = std::thread::spawn(move || {
            for reply in replies {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let Ok(request) = read_request(&stream) else {
                    continue;
                };
                recorded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(request);
                write_reply(stream, reply);
            }
        });
        Self {
            base_url,
            requests,
            thread: Some(thread),
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Only join when the script ran to completion; a test that failed early must not
        // hang waiting for connections that never come.
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

fn read_request(stream: &std::net::TcpStream) -> std::io::Result<Recorded> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let mut length = 0usize;
    let mut authorization = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(Recorded {
        path,
        authorization,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn write_reply(mut out: std::net::TcpStream, reply: Reply) {
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !reply.streamed {
        let len: usize = reply.chunks.iter().map(|(_, c)| c.len()).sum();
        head.push_str(&format!("content-length: {len}\r\n"));
    }
    head.push_str("\r\n");
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    for (pause, chunk) in reply.chunks {
        std::thread::sleep(pause);
        if out.write_all(&chunk).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}
