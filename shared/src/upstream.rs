//! Reading what upstream servers send back (model endpoints, MCP servers, OAuth token URLs,
//! search and conversion services) within bounds.
//!
//! Those servers are configured by users, so their answers are untrusted input: a line without
//! an end or a body without an end would otherwise grow in memory until the process dies, and a
//! parser that searched the whole buffer again for every chunk spent 34 s of CPU on one 48 MB
//! line. Event streams are decoded incrementally with caps on a line and an event; whole bodies
//! are read with a cap.

use bytes::Bytes;

const MIB: usize = 1024 * 1024;

/// One line of an event stream. Real events carry a JSON chunk of a few KiB; a tool result
/// sent as one event can reach a few MiB.
pub const MAX_SSE_LINE_BYTES: usize = 8 * MIB;

/// One event, all its `data:` lines together.
pub const MAX_SSE_EVENT_BYTES: usize = 16 * MIB;

/// A whole JSON answer: a chat completion, an embedding batch, a token, a list of search results.
pub const MAX_BODY_BYTES: usize = 32 * MIB;

/// An error answer, read only to quote it in a message.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// One server-sent event: its `event` name (empty when none was given) and its `data` lines
/// joined with newlines, as the specification says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// A line or an event of an event stream over its cap; the stream cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event stream sent {what} larger than {} MiB", limit / MIB)]
pub struct SseTooLarge {
    what: &'static str,
    limit: usize,
}

/// Incremental decoder of `text/event-stream` bytes into events (fields `event` and `data`;
/// comments and other fields are skipped).
pub struct SseDecoder {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline: the next search starts there, so a long
    /// line arriving in small chunks is searched once, not once per chunk.
    scanned: usize,
    current: SseEvent,
    has_data: bool,
    max_line: usize,
    max_event: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::with_limits(MAX_SSE_LINE_BYTES, MAX_SSE_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            buf: Vec::new(),
            scanned: 0,
            current: SseEvent::default(),
            has_data: false,
            max_line,
            max_event,
        }
    }

    /// Feeds bytes and returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(pos) = self.buf[from..].iter().position(|b| *b == b'\n') {
            let end = from + pos;
            let line = std::mem::take(&mut self.buf);
            let outcome = self.line(&line[start..end], &mut events);
            self.buf = line;
            outcome?;
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.scanned > self.max_line {
            return Err(self.too_large("a line"));
        }
        Ok(events)
    }

    /// The last event when the stream ended without its blank line.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseTooLarge> {
        let rest = std::mem::take(&mut self.buf);
        self.scanned = 0;
        let mut events = Vec::new();
        if !rest.is_empty() {
            self.line(&rest, &mut events)?;
        }
        self.line(b"", &mut events)?;
        Ok(events.pop())
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseTooLarge> {
        if line.len() > self.max_line {
            return Err(self.too_large("a line"));
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            let event = std::mem::take(&mut self.current);
            if std::mem::take(&mut self.has_data) {
                events.push(event);
            }
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => (&line[..colon], &line[colon + 1..]),
            None => (line, &b""[..]),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        match field {
            b"event" => {
                self.current.event.clear();
                push_text(&mut self.current.event, value);
            }
            b"data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                push_text(&mut self.current.data, value);
                self.has_data = true;
            }
            _ => {}
        }
        if self.current.data.len() + self.current.event.len() > self.max_event {
            return Err(self.too_large("an event"));
        }
        Ok(())
    }

    fn too_large(&self, what: &'static str) -> SseTooLarge {
        let limit = if what == "a line" {
            self.max_line
        } else {
            self.max_event
        };
        SseTooLarge { what, limit }
    }
}

/// Appends `bytes` as text, invalid UTF-8 replaced. Checked with `str::from_utf8` first: it
/// validates ASCII a word at a time, where the lossy conversion walks byte by byte (about 1,300
/// instructions per streamed chunk, 4% of a chat's server CPU), and a model's stream is valid.
fn push_text(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the answer is larger than {} KiB", .0 / 1024)]
    TooLarge(usize),
    #[error("reading the answer failed: {0}")]
    Network(#[from] reqwest::Error),
}

/// The body of `resp`, refused past `max` bytes: by its declared length before reading, and
/// by what actually arrives, since the length can be absent or lie.
pub async fn read_body(mut resp: reqwest::Response, max: usize) -> Result<Bytes, BodyError> {
    if resp.content_length().is_some_and(|len| len > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max {
            return Err(BodyError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
        }
    }

    const STREAM: &[u8] = b"event: endpoint\r\ndata: /message?sessionId=1\r\n\r\n: ping\n\ndata: {\"a\":\ndata: 1}\n\nid: 7\nretry: 10\ndata\n\ndata: [DONE]\r\n\r\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            event("endpoint", "/message?sessionId=1"),
            event("", "{\"a\":\n1}"),
            event("", ""),
            event("", "[DONE]"),
        ]
    }

    #[test]
    fn events_split_across_chunks_at_every_byte_still_parse() {
        for cut in 0..=STREAM.len() {
            let mut decoder = SseDecoder::default();
            let mut got = decoder.feed(&STREAM[..cut]).unwrap();
            got.extend(decoder.feed(&STREAM[cut..]).unwrap());
            assert_eq!(got, expected(), "cut at {cut}");
        }
        let mut decoder = SseDecoder::default();
        let mut got = Vec::new();
        for byte in STREAM {
            got.extend(decoder.feed(std::slice::from_ref(byte)).unwrap());
        }
        assert_eq!(got, expected(), "one byte at a time");
    }

    #[test]
    fn the_last_event_without_its_blank_line_is_kept_at_the_end() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.feed(b"data: one\ndata: tail").unwrap().is_empty());
        assert_eq!(decoder.finish().unwrap(), Some(event("", "one\ntail")));
        assert_eq!(decoder.finish().unwrap(), None);
    }

    #[test]
    fn text_keeps_its_multibyte_characters_and_invalid_bytes_become_replacement_characters() {
        let mut decoder = SseDecoder::default();
        let got = decoder.feed("event: 答\ndata: héllo 你好\n\n".as_bytes()).unwrap();
        assert_eq!(got, vec![event("答", "héllo 你好")]);
        let got = decoder.feed(b"data: a\xffb\n\n").unwrap();
        assert_eq!(got, vec![event("", "a\u{fffd}b")]);
    }

    #[test]
    fn a_long_line_without_newline_is_searched_once_and_fails_past_the_cap() {
        // 4 MiB in 1 KiB chunks: searching the whole buffer per chunk is 8 billion byte
        // comparisons (seconds even optimised); searching only the new bytes is 4 million.
        // Every feed leaves the whole held line searched, so the next starts at its new bytes.
        let chunk = vec![b'x'; 1024];
        let mut decoder = SseDecoder::with_limits(4 * MIB, 4 * MIB);
        decoder.feed(b"data: ").unwrap();
        for _ in 0..4 * 1024 - 1 {
            decoder.feed(&chunk).unwrap();
            assert_eq!(decoder.scanned, decoder.buf.len());
        }
        let err = decoder.feed(&chunk).unwrap_err();
        assert_eq!(err.to_string(), "the event stream sent a line larger than 4 MiB");
    }

    #[test]
    fn a_line_arriving_whole_is_held_to_the_cap_too() {
        let mut decoder = SseDecoder::with_limits(MIB, 4 * MIB);
        let mut line = b"data: ".to_vec();
        line.extend(std::iter::repeat_n(b'x', MIB));
        line.extend_from_slice(b"\n\n");
        assert!(decoder
            .feed(&line)
            .unwrap_err()
            .to_string()
            .contains("a line larger than 1 MiB"));
    }

    #[test]
    fn an_event_of_many_lines_fails_past_the_event_cap() {
        let mut decoder = SseDecoder::with_limits(MIB, 2 * MIB);
        let line = format!("data: {}\n", "x".repeat(MIB / 2));
        let mut result = Ok(Vec::new());
        for _ in 0..5 {
            result = decoder.feed(line.as_bytes());
            if result.is_err() {
                break;
            }
        }
        assert_eq!(
            result.unwrap_err().to_string(),
            "the event stream sent an event larger than 2 MiB"
        );
    }
}
