//! A raw HTTP/1.1 client for tests of the daemon's sibling endpoints (the dashboard, `/mcp`):
//! it sends exactly the bytes a test names, so malformed requests reach the server as
//! written, and parses the whole response (a `Content-Length` or chunked body).

use std::io::{Read, Write};

use serde_json::Value;

/// One parsed response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Lower-cased names, in order; a repeated header appears once per value.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of header `name` (any case); panics when it is repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        let mut values = self
            .headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str());
        let first = values.next();
        assert!(values.next().is_none(), "header {name} is repeated");
        first
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The request bytes: `method path`, `Host: authority`, `Connection: close`, `headers`, and a
/// `Content-Length` unless the test gave one (or there is no body).
pub fn request_bytes(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    let has_host = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host"));
    if has_host {
        head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let has_length = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    if !has_length && (!body.is_empty() || method == "POST") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Sends one request to `authority` (`127.0.0.1:port`) and reads the whole response.
pub fn request(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    send_raw(
        authority,
        &request_bytes(authority, method, path, headers, body),
    )
}

/// Writes `bytes` as they are and reads the whole response.
pub fn send_raw(authority: &str, bytes: &[u8]) -> Reply {
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    // A server may answer (413) and close before everything is written.
    let _ = stream.write_all(bytes);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

/// Parses a whole HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status = status_line[9..12].parse().expect("a status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    } else if let Some((_, length)) = headers.iter().find(|(k, _)| k == "content-length") {
        let length: usize = length.parse().expect("a numeric Content-Length");
        // A response to HEAD declares a length and has no body.
        assert!(
            body.is_empty() || body.len() == length,
            "body is {} bytes, Content-Length {length}",
            body.len()
        );
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = std::str::from_utf8(&data[..end]).expect("a chunk size");
        let size = usize::from_str_radix(size_text.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}
