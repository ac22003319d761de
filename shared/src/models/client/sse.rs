//! Incremental decoding of `text/event-stream` bodies into `data:` payloads.

/// Buffers bytes and yields the data of each complete event. Multi-line data fields are
/// joined with newlines, as the SSE specification says.
#[derive(Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    data: Vec<String>,
}

impl SseDecoder {
    /// Feeds bytes and returns the payloads of the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let line_end = start + pos;
            let line = &self.buf[start..line_end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                self.data.push(String::from_utf8_lossy(value).into_owned());
            }
            start = line_end + 1;
        }
        self.buf.drain(..start);
        events
    }

    /// The last event when the body ended without its blank line.
    pub fn finish(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let mut tail = self.feed_line_end(&rest);
            return tail.pop();
        }
        (!self.data.is_empty()).then(|| std::mem::take(&mut self.data).join("\n"))
    }

    fn feed_line_end(&mut self, rest: &[u8]) -> Vec<String> {
        let mut bytes = rest.to_vec();
        bytes.extend_from_slice(b"\n\n");
        self.feed(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_chunks() {
        let mut d = SseDecoder::default();
        assert!(d.feed(b"data: {\"a\"").is_empty());
        assert_eq!(d.feed(b":1}\n\ndata: [DONE]\r\n\r\n"), vec!["{\"a\":1}", "[DONE]"]);
        assert_eq!(
            d.feed(b": comment\nevent: x\ndata: one\ndata: two\n\n"),
            vec!["one\ntwo"]
        );
        assert!(d.feed(b"data: tail").is_empty());
        assert_eq!(d.finish().as_deref(), Some("tail"));
    }
}
