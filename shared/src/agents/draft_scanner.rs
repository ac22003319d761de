//! Finds the top-level string fields of a JSON object while it is still being streamed, so
//! each field can be announced the moment its closing quote arrives.

/// Feeds text in pieces; yields `(key, value)` for each completed top-level string field.
/// Text before the object (a code fence, a preamble) is skipped; non-string values are skipped.
#[derive(Debug, Default)]
pub struct FieldScanner {
    state: State,
    key: String,
    raw: String,
    escaped: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Outside,
    ExpectKey,
    InKey,
    ExpectColon,
    ExpectValue,
    InValue,
    /// Inside a non-string value: nesting depth and whether inside a string there.
    Skip {
        depth: u32,
        in_string: bool,
    },
    Done,
}

/// A string value's text. Models often write line breaks and tabs raw inside a long value
/// (an instruction), which JSON does not allow: refused as JSON, such a field was dropped and
/// the agent created without it. Raw control characters are escaped first.
fn decode(raw: &str) -> Option<String> {
    let mut quoted = String::with_capacity(raw.len() + 2);
    quoted.push('"');
    for c in raw.chars() {
        match c {
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x20 => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    serde_json::from_str(&quoted).ok()
}

impl FieldScanner {
    pub fn feed(&mut self, text: &str) -> Vec<(String, String)> {
        let mut done = vec![];
        for c in text.chars() {
            if let Some(field) = self.step(c) {
                done.push(field);
            }
        }
        done
    }

    /// Collects a string's raw (still escaped) text; true when its closing quote arrived.
    fn string_char(&mut self, c: char) -> bool {
        if self.escaped {
            self.escaped = false;
        } else if c == '\\' {
            self.escaped = true;
        } else if c == '"' {
            return true;
        }
        self.raw.push(c);
        false
    }

    fn step(&mut self, c: char) -> Option<(String, String)> {
        match self.state {
            State::Outside if c == '{' => self.state = State::ExpectKey,
            State::Outside | State::Done => {}
            State::ExpectKey => match c {
                '"' => {
                    self.raw.clear();
                    self.state = State::InKey;
                }
                '}' => self.state = State::Done,
                _ => {}
            },
            State::InKey => {
                if self.string_char(c) {
                    self.key = decode(&self.raw).unwrap_or_default();
                    self.state = State::ExpectColon;
                }
            }
            State::ExpectColon if c == ':' => self.state = State::ExpectValue,
            State::ExpectColon => {}
            State::ExpectValue => match c {
                '"' => {
                    self.raw.clear();
                    self.state = State::InValue;
                }
                c if c.is_whitespace() => {}
                '{' | '[' => {
                    self.state = State::Skip {
                        depth: 1,
                        in_string: false,
                    }
                }
                _ => {
                    self.state = State::Skip {
                        depth: 0,
                        in_string: false,
                    }
                }
            },
            State::InValue => {
                if self.string_char(c) {
                    self.state = State::ExpectKey;
                    return decode(&self.raw).map(|v| (std::mem::take(&mut self.key), v));
                }
            }
            State::Skip { depth, in_string } => self.skip(c, depth, in_string),
        }
        None
    }

    fn skip(&mut self, c: char, depth: u32, in_string: bool) {
        if in_string {
            let closed = self.string_char(c);
            self.state = State::Skip {
                depth,
                in_string: !closed,
            };
            return;
        }
        self.state = match c {
            '"' => {
                self.raw.clear();
                State::Skip { depth, in_string: true }
            }
            '{' | '[' => State::Skip {
                depth: depth + 1,
                in_string: false,
            },
            '}' | ']' if depth > 0 => State::Skip {
                depth: depth - 1,
                in_string: false,
            },
            '}' => State::Done,
            ',' if depth == 0 => State::ExpectKey,
            _ => State::Skip { depth, in_string },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_complete_as_their_quotes_close() {
        let text = "```json\n{\"name\": \"Trip \\\"Pro\\\"\", \"n\": 3, \"tags\": [\"a\", {\"b\": \"}\"}], \
                    \"instruction\": \"line1\\nline2 \\u00e9\", \"avatar\": \"✈️\"}\n```";
        let mut s = FieldScanner::default();
        let mut got = vec![];
        // One character at a time, as a stream may deliver it.
        for c in text.chars() {
            got.extend(s.feed(&c.to_string()));
        }
        assert_eq!(
            got,
            vec![
                ("name".to_owned(), "Trip \"Pro\"".to_owned()),
                ("instruction".to_owned(), "line1\nline2 é".to_owned()),
                ("avatar".to_owned(), "✈️".to_owned()),
            ]
        );
        // Line breaks and tabs written raw inside a value, as models often do.
        let mut s = FieldScanner::default();
        assert_eq!(
            s.feed("{\"instruction\": \"Be kind.\n\tAsk first.\r\nThen \u{1}answer.\"}"),
            vec![(
                "instruction".to_owned(),
                "Be kind.\n\tAsk first.\r\nThen \u{1}answer.".to_owned()
            )]
        );
        let mut s = FieldScanner::default();
        assert!(s.feed("no json here").is_empty());
        assert_eq!(s.feed("{\"a\":\"b\"").len(), 1);
    }
}
