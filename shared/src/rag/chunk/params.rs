//! Chunking parameters as a client sends them, and their validation.

use regex::Regex;

/// How a document is cut into pieces before the pieces are packed into chunks.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkMode {
    /// Structure-aware: headings, paragraphs, tables and code blocks.
    Default,
    /// Cut on a custom delimiter; `\n`, `\r`, `\t` and `\\` escapes are understood.
    Delimiter(String),
    /// Cut where the regular expression matches; the match starts the next piece.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChunkParams {
    pub mode: ChunkMode,
    pub max_tokens: usize,
    /// Tokens of the previous chunk repeated at the start of the next one.
    pub overlap: usize,
    /// Merge pieces under `max_tokens / 8` tokens into a neighbour instead of emitting them alone.
    pub merge_short: bool,
}

impl Default for ChunkParams {
    fn default() -> Self {
        Self {
            mode: ChunkMode::Default,
            max_tokens: 512,
            overlap: 64,
            merge_short: true,
        }
    }
}

/// A rejected parameter; the message names the field as clients spell it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChunkError(pub String);

const MIN_MAX_TOKENS: usize = 16;
const MAX_MAX_TOKENS: usize = 8192;

/// Validates params: max_tokens 16..=8192, overlap < max_tokens/2, delimiter non-empty, regex compiles.
pub fn validate(params: &ChunkParams) -> Result<(), ChunkError> {
    if !(MIN_MAX_TOKENS..=MAX_MAX_TOKENS).contains(&params.max_tokens) {
        return Err(ChunkError(format!(
            "maxChunkTokens must be between {MIN_MAX_TOKENS} and {MAX_MAX_TOKENS}, got {}",
            params.max_tokens
        )));
    }
    if params.overlap >= params.max_tokens / 2 {
        return Err(ChunkError(format!(
            "chunkOverlap must be less than half of maxChunkTokens ({}), got {}",
            params.max_tokens / 2,
            params.overlap
        )));
    }
    match &params.mode {
        ChunkMode::Default => Ok(()),
        ChunkMode::Delimiter(delimiter) if delimiter.is_empty() => {
            Err(ChunkError("customDelimiter must not be empty".to_owned()))
        }
        ChunkMode::Delimiter(_) => Ok(()),
        ChunkMode::Regex(pattern) => compile_regex(pattern).map(|_| ()),
    }
}

pub(super) fn compile_regex(pattern: &str) -> Result<Regex, ChunkError> {
    Regex::new(pattern).map_err(|err| ChunkError(format!("chunkRegex is not a valid regular expression: {err}")))
}

/// The delimiter as typed in a form, where a newline arrives as the two characters `\n`.
pub(super) fn unescape_delimiter(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(mode: ChunkMode, max_tokens: usize, overlap: usize) -> ChunkParams {
        ChunkParams {
            mode,
            max_tokens,
            overlap,
            merge_short: true,
        }
    }

    fn error(params: &ChunkParams) -> String {
        validate(params).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn default_params_are_valid() {
        assert!(validate(&ChunkParams::default()).is_ok());
        assert!(validate(&with(ChunkMode::Default, 16, 7)).is_ok());
        assert!(validate(&with(ChunkMode::Default, 8192, 4095)).is_ok());
    }

    #[test]
    fn max_tokens_out_of_range_names_the_field() {
        assert!(error(&with(ChunkMode::Default, 15, 0)).contains("maxChunkTokens"));
        assert!(error(&with(ChunkMode::Default, 8193, 0)).contains("maxChunkTokens"));
    }

    #[test]
    fn overlap_of_half_or_more_names_the_field() {
        let message = error(&with(ChunkMode::Default, 512, 256));
        assert!(message.contains("chunkOverlap"), "{message}");
        assert!(validate(&with(ChunkMode::Default, 512, 255)).is_ok());
    }

    #[test]
    fn empty_delimiter_names_the_field() {
        assert!(error(&with(ChunkMode::Delimiter(String::new()), 512, 0)).contains("customDelimiter"));
        assert!(validate(&with(ChunkMode::Delimiter("\\n".into()), 512, 0)).is_ok());
    }

    #[test]
    fn bad_regex_names_the_field_and_the_cause() {
        let message = error(&with(ChunkMode::Regex("(unclosed".into()), 512, 0));
        assert!(message.contains("chunkRegex"), "{message}");
        assert!(message.contains("unclosed group"), "{message}");
    }

    #[test]
    fn unescapes_typed_escapes() {
        assert_eq!(unescape_delimiter("\\n\\n"), "\n\n");
        assert_eq!(unescape_delimiter("a\\tb\\\\c\\x\\"), "a\tb\\c\\x\\");
        assert_eq!(unescape_delimiter("###"), "###");
    }
}
