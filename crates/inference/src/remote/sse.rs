//! A bounded reader for `text/event-stream` bodies.
//!
//! Owns: splitting a byte stream into lines without unbounded buffering, and assembling
//! `data:` lines into events. Must not touch: what the events mean (see `remote`).

use std::io::{self, BufRead};

/// Longest line accepted from a provider (a chunk is normally well under 1 KiB).
pub const MAX_LINE: usize = 1024 * 1024;

/// Reads one `\n`-terminated line (without the terminator or a trailing `\r`) into `buf`.
/// Returns `false` at end of stream with nothing read. Fails if a line exceeds `max`.
pub fn read_line_bounded<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> io::Result<bool> {
    buf.clear();
    loop {
        let available = r.fill_buf()?;
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("event stream line longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(chunk);
        let used = found.map_or(chunk.len(), |i| i + 1);
        r.consume(used);
        if found.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(true);
        }
    }
}

/// Yields the data of each server-sent event (multi-line data joined with `\n`).
#[derive(Debug)]
pub struct EventReader<R> {
    reader: R,
    line: Vec<u8>,
}

impl<R: BufRead> EventReader<R> {
    /// Wraps a buffered body reader.
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            line: Vec::new(),
        }
    }

    /// The next event's data, or `None` at end of stream.
    pub fn next_data(&mut self) -> io::Result<Option<String>> {
        let mut data: Option<String> = None;
        loop {
            if !read_line_bounded(&mut self.reader, &mut self.line, MAX_LINE)? {
                return Ok(data);
            }
            if self.line.is_empty() {
                if data.is_some() {
                    return Ok(data);
                }
                continue;
            }
            let line = String::from_utf8_lossy(&self.line);
            // Comments (`:`) and `event:`/`id:`/`retry:` fields carry nothing we use.
            if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(rest);
                    }
                    None => data = Some(rest.to_owned()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events() {
        let body = b": ping\n\ndata: {\"a\":1}\r\n\nevent: x\ndata: l1\ndata: l2\n\ndata: [DONE]";
        let mut r = EventReader::new(&body[..]);
        assert_eq!(r.next_data().unwrap().as_deref(), Some("{\"a\":1}"));
        assert_eq!(r.next_data().unwrap().as_deref(), Some("l1\nl2"));
        assert_eq!(r.next_data().unwrap().as_deref(), Some("[DONE]"));
        assert_eq!(r.next_data().unwrap(), None);
    }

    #[test]
    fn refuses_overlong_lines() {
        let body = [b'x'; 100];
        let mut buf = Vec::new();
        let err = read_line_bounded(&mut &body[..], &mut buf, 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
