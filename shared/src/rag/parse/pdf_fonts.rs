//! The encodings of a PDF's fonts, read once per font and only for the fonts a page draws with.
//!
//! lopdf expands a ToUnicode map into a table of every code it covers as it reads it: one line
//! `<00000000> <FFFFFFFF> <0041> bfrange` in a 150-byte map asks for four billion entries, and
//! the memory of the worker runs out. Maps are therefore counted here first, and a font whose
//! map covers more codes than any real font has loses its text instead. Fonts were also read
//! again for every page and for every font a page lists, used or not: a page tree naming one
//! heavy font under a thousand names, or on every page, multiplied that work.

use std::collections::HashMap;

use lopdf::{Dictionary, Document, Encoding, Object};

/// One font's encoding data (a ToUnicode map): a few KiB, a few hundred for large CJK fonts.
const MAX_FONT_BYTES: usize = 4 * 1024 * 1024;

/// Codes one ToUnicode map may cover: two-byte CID fonts have at most 65,536.
const MAX_MAPPED_CODES: u64 = 1 << 17;

/// The fonts read so far in one document, by their dictionary.
#[derive(Default)]
pub(super) struct Fonts<'a> {
    read: Vec<Option<Encoding<'a>>>,
    by_dictionary: HashMap<*const Dictionary, usize>,
}

impl<'a> Fonts<'a> {
    /// The encoding of `font`, read the first time it is asked for; `None` when it cannot be
    /// read (its own text is lost, not the page's). The key is the font's place in the
    /// document, which stays put while the document is borrowed.
    pub fn of(&mut self, document: &'a Document, font: &'a Dictionary) -> Option<usize> {
        let key = font as *const Dictionary;
        if let Some(&at) = self.by_dictionary.get(&key) {
            return self.read[at].is_some().then_some(at);
        }
        let encoding = within_limits(document, font)
            .then(|| font.get_font_encoding_with_limit(document, MAX_FONT_BYTES).ok())
            .flatten();
        let at = self.read.len();
        self.read.push(encoding);
        self.by_dictionary.insert(key, at);
        self.read[at].is_some().then_some(at)
    }

    pub fn encoding(&self, at: usize) -> Option<&Encoding<'a>> {
        self.read.get(at).and_then(Option::as_ref)
    }
}

/// Whether the font's ToUnicode map (if it has one) is one lopdf may expand.
fn within_limits(document: &Document, font: &Dictionary) -> bool {
    let Ok(map) = font.get_deref(b"ToUnicode", document).and_then(Object::as_stream) else {
        return true;
    };
    match map.get_plain_content_with_limit(MAX_FONT_BYTES) {
        Ok(content) => mapped_codes(&content) <= MAX_MAPPED_CODES,
        // lopdf reads it the same way and falls back to the standard encoding, but for an
        // oversized one, which it reports: either way no table is built from it.
        Err(_) => true,
    }
}

/// How many codes a ToUnicode map's `bfchar` and `bfrange` sections cover, as lopdf counts them.
fn mapped_codes(map: &[u8]) -> u64 {
    let mut codes: u64 = 0;
    let mut words = Words { rest: map };
    while let Some(word) = words.next() {
        match word {
            Word::Keyword(b"beginbfchar") => {
                let mut items = 0u64;
                while let Some(item) = words.next() {
                    match item {
                        Word::Keyword(b"endbfchar") => break,
                        _ => items += 1,
                    }
                }
                codes = codes.saturating_add(items / 2);
            }
            Word::Keyword(b"beginbfrange") => {
                let mut entry: Vec<Word<'_>> = Vec::with_capacity(3);
                while let Some(item) = words.next() {
                    if matches!(item, Word::Keyword(b"endbfrange")) {
                        break;
                    }
                    entry.push(item);
                    if entry.len() == 3 {
                        if let (Word::Hex(start), Word::Hex(end)) = (&entry[0], &entry[1]) {
                            codes = codes.saturating_add(span(start, end));
                        }
                        entry.clear();
                    }
                }
            }
            _ => {}
        }
    }
    codes
}

/// Codes from `start` to `end`, both given in hex; a code longer than eight bytes counts as
/// more than any map may hold.
fn span(start: &[u8], end: &[u8]) -> u64 {
    let value = |hex: &[u8]| -> Option<u64> {
        let digits: Vec<u8> = hex.iter().copied().filter(u8::is_ascii_hexdigit).collect();
        match digits.len() {
            0 => Some(0),
            1..=16 => u64::from_str_radix(std::str::from_utf8(&digits).ok()?, 16).ok(),
            _ => None,
        }
    };
    match (value(start), value(end)) {
        (Some(start), Some(end)) => end.saturating_sub(start).saturating_add(1),
        _ => u64::MAX,
    }
}

enum Word<'m> {
    /// The digits between `<` and `>`.
    Hex(&'m [u8]),
    /// A destination array `[...]`, as one word.
    Array,
    Keyword(&'m [u8]),
}

/// The words of a map, as far as counting needs them: hex strings, arrays, keywords.
struct Words<'m> {
    rest: &'m [u8],
}

impl<'m> Words<'m> {
    fn next(&mut self) -> Option<Word<'m>> {
        loop {
            let (&first, after) = self.rest.split_first()?;
            match first {
                b'<' => {
                    let end = after.iter().position(|&b| b == b'>').unwrap_or(after.len());
                    self.rest = after.get(end + 1..).unwrap_or_default();
                    return Some(Word::Hex(&after[..end]));
                }
                b'[' => {
                    let end = after.iter().position(|&b| b == b']').unwrap_or(after.len());
                    self.rest = after.get(end + 1..).unwrap_or_default();
                    return Some(Word::Array);
                }
                b'%' => {
                    let end = after
                        .iter()
                        .position(|&b| b == b'\n' || b == b'\r')
                        .unwrap_or(after.len());
                    self.rest = &after[end..];
                }
                b if b.is_ascii_alphabetic() => {
                    let end = self
                        .rest
                        .iter()
                        .position(|b| !b.is_ascii_alphanumeric())
                        .unwrap_or(self.rest.len());
                    let (word, rest) = self.rest.split_at(end);
                    self.rest = rest;
                    return Some(Word::Keyword(word));
                }
                _ => self.rest = after,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_counted_as_lopdf_expands_them() {
        let map = b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap
            1 begincodespacerange <0000> <FFFF> endcodespacerange
            2 beginbfchar <0003> <0020> <0024> <0041> endbfchar
            % a comment <0000> <FFFF> <0000> beginbfrange
            2 beginbfrange <0030> <0039> <0030> <0100> <0102> [<0061> <0062> <0063>] endbfrange
            endcmap CMapName currentdict /CMap defineresource pop end end";
        assert_eq!(mapped_codes(map), 2 + 10 + 3);
        assert_eq!(
            mapped_codes(b"1 beginbfrange <00000000> <FFFFFFFF> <0041> endbfrange"),
            1 << 32
        );
        assert_eq!(mapped_codes(b"beginbfrange <00> <FF> <0000> endbfrange"), 256);
        assert_eq!(mapped_codes(b"beginbfrange <FF> <00> <0000> endbfrange"), 1);
        assert_eq!(
            mapped_codes(b"beginbfrange <000000000000000000> <01> <00> endbfrange"),
            u64::MAX
        );
        // Cut short: nothing past the end is read.
        assert_eq!(mapped_codes(b"beginbfrange <00> <0"), 0);
        assert_eq!(mapped_codes(b""), 0);
    }
}
