//! The encodings of a PDF's fonts, read once per font and only for the fonts a page draws with.
//!
//! lopdf expands a ToUnicode map into a table of every code it covers as it reads it, each
//! entry a copy of its destination: one line `<00000000> <FFFFFFFF> <0041> bfrange` in a
//! 150-byte map asks for four billion entries, and the memory of the worker runs out. Maps are
//! therefore weighed here first (codes, times the length of what each maps to), one by one and
//! for the whole document, and a font whose map weighs more than any real font's, or one that
//! cannot be weighed, loses its text instead. Fonts were also read again for every page and
//! for every font a page lists, used or not: a page tree naming one heavy font under a
//! thousand names, or on every page, multiplied that work.

use std::collections::HashMap;

use lopdf::{Dictionary, Document, Encoding, Object};

/// One font's encoding data (a ToUnicode map): a few KiB, a few hundred for large CJK fonts.
const MAX_FONT_BYTES: usize = 4 * 1024 * 1024;

/// The weight one ToUnicode map may have: two-byte CID fonts map at most 65,536 codes, each
/// to a character or two.
const MAX_MAP_WEIGHT: u64 = 1 << 17;

/// The weight of all the maps of one document: a few large CJK fonts.
const MAX_DOCUMENT_WEIGHT: u64 = 1 << 20;

/// The fonts read so far in one document, by their dictionary.
pub(super) struct Fonts<'a> {
    read: Vec<Option<Encoding<'a>>>,
    by_dictionary: HashMap<*const Dictionary, usize>,
    /// What the maps expanded so far may still add.
    weight_left: u64,
}

impl Default for Fonts<'_> {
    fn default() -> Self {
        Self {
            read: Vec::new(),
            by_dictionary: HashMap::new(),
            weight_left: MAX_DOCUMENT_WEIGHT,
        }
    }
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
        let encoding = match map_weight(document, font) {
            Some(weight) if weight <= MAX_MAP_WEIGHT && weight <= self.weight_left => {
                self.weight_left -= weight;
                font.get_font_encoding_with_limit(document, MAX_FONT_BYTES).ok()
            }
            _ => None,
        };
        let at = self.read.len();
        self.read.push(encoding);
        self.by_dictionary.insert(key, at);
        self.read[at].is_some().then_some(at)
    }

    pub fn encoding(&self, at: usize) -> Option<&Encoding<'a>> {
        self.read.get(at).and_then(Option::as_ref)
    }
}

/// The weight of the font's ToUnicode map (0 without one); `None` for one lopdf must not
/// expand.
fn map_weight(document: &Document, font: &Dictionary) -> Option<u64> {
    let Ok(map) = font.get_deref(b"ToUnicode", document).and_then(Object::as_stream) else {
        return Some(0);
    };
    match map.get_plain_content_with_limit(MAX_FONT_BYTES) {
        Ok(content) => weigh(&content),
        // lopdf reads it the same way and falls back to the standard encoding, but for an
        // oversized one, which it reports: either way no table is built from it.
        Err(_) => Some(0),
    }
}

/// The weight of a ToUnicode map: for each `bfchar` entry one, for each `bfrange` entry its
/// codes times the UTF-16 units of its destination. `None` when a section holds anything but
/// entries lopdf would read: weighed by a guess, a map could hide a range from the count.
fn weigh(map: &[u8]) -> Option<u64> {
    let mut weight: u64 = 0;
    let mut words = Words { rest: map };
    while let Some(word) = words.next() {
        match word {
            Word::Keyword(b"beginbfchar") => loop {
                match (words.next()?, words.next()?) {
                    (Word::Keyword(b"endbfchar"), _) => break,
                    (Word::Hex(_), Word::Hex(_) | Word::Name) => weight = weight.saturating_add(1),
                    _ => return None,
                }
            },
            Word::Keyword(b"beginbfrange") => loop {
                let start = match words.next()? {
                    Word::Keyword(b"endbfrange") => break,
                    Word::Hex(start) => start,
                    _ => return None,
                };
                let (Word::Hex(end), destination) = (words.next()?, words.next()?) else {
                    return None;
                };
                let units = match destination {
                    Word::Hex(hex) => hex_digits(hex).div_ceil(4).max(1),
                    Word::Array(items) => items.max(1),
                    _ => return None,
                };
                weight = weight.saturating_add(span(start, end).saturating_mul(units));
            },
            Word::Keyword(b"endbfchar" | b"endbfrange") => return None,
            _ => {}
        }
    }
    Some(weight)
}

fn hex_digits(hex: &[u8]) -> u64 {
    hex.iter().filter(|b| b.is_ascii_hexdigit()).count() as u64
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
    /// A destination array `[...]`, with the number of UTF-16 units its strings hold at most.
    Array(u64),
    /// `/Name`: never a keyword, whatever it spells.
    Name,
    Keyword(&'m [u8]),
    /// A number or anything else between the words that count.
    Other,
}

/// The words of a map, as far as weighing needs them.
struct Words<'m> {
    rest: &'m [u8],
}

impl<'m> Words<'m> {
    fn next(&mut self) -> Option<Word<'m>> {
        loop {
            let (&first, after) = self.rest.split_first()?;
            let token_end = |bytes: &[u8]| {
                bytes
                    .iter()
                    .position(|b| b.is_ascii_whitespace() || b"<>[]/(){}%".contains(b))
                    .unwrap_or(bytes.len())
            };
            match first {
                b'<' => {
                    let end = after.iter().position(|&b| b == b'>').unwrap_or(after.len());
                    self.rest = after.get(end + 1..).unwrap_or_default();
                    return Some(Word::Hex(&after[..end]));
                }
                b'[' => {
                    let end = after.iter().position(|&b| b == b']').unwrap_or(after.len());
                    let inside = &after[..end];
                    // Each string's units, the longest counting for all: a clone of it is
                    // kept per code.
                    let longest = inside
                        .split(|&b| b == b'<')
                        .skip(1)
                        .map(|s| hex_digits(&s[..s.iter().position(|&b| b == b'>').unwrap_or(s.len())]).div_ceil(4))
                        .max()
                        .unwrap_or(0);
                    self.rest = after.get(end + 1..).unwrap_or_default();
                    return Some(Word::Array(longest));
                }
                b'%' => {
                    let end = after
                        .iter()
                        .position(|&b| b == b'\n' || b == b'\r')
                        .unwrap_or(after.len());
                    self.rest = &after[end..];
                }
                b'/' => {
                    self.rest = &after[token_end(after)..];
                    return Some(Word::Name);
                }
                b if b.is_ascii_whitespace() => self.rest = after,
                b if b.is_ascii_alphabetic() => {
                    let end = token_end(self.rest);
                    let (word, rest) = self.rest.split_at(end);
                    self.rest = rest;
                    return Some(Word::Keyword(word));
                }
                _ => {
                    let end = token_end(after);
                    self.rest = &after[end..];
                    return Some(Word::Other);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_weighed_as_lopdf_expands_them() {
        let map = b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap
            /CMapName /Adobe-Identity-UCS def
            1 begincodespacerange <0000> <FFFF> endcodespacerange
            2 beginbfchar <0003> <0020> <0024> <0041> endbfchar
            % a comment <0000> <FFFF> <0000> beginbfrange
            2 beginbfrange <0030> <0039> <0030> <0100> <0102> [<0061> <0062> <00630064>] endbfrange
            endcmap CMapName currentdict /CMap defineresource pop end end";
        // Two characters, ten codes of one unit, three codes of (at most) two units.
        assert_eq!(weigh(map), Some(2 + 10 + 3 * 2));
        assert_eq!(
            weigh(b"1 beginbfrange <00000000> <FFFFFFFF> <0041> endbfrange"),
            Some(1 << 32)
        );
        // What each code maps to is copied per code.
        assert_eq!(
            weigh(b"beginbfrange <00> <FF> <0041004200430044> endbfrange"),
            Some(256 * 4)
        );
        assert_eq!(weigh(b"beginbfrange <FF> <00> <0000> endbfrange"), Some(1));
        assert_eq!(
            weigh(b"beginbfrange <000000000000000000> <01> <00> endbfrange"),
            Some(u64::MAX)
        );
        assert_eq!(weigh(b""), Some(0));
    }

    /// A map that words could shift (a name spelling a keyword, stray words in a section) is
    /// not weighed by a guess: lopdf skips such names and would still expand the range.
    #[test]
    fn a_map_that_cannot_be_weighed_is_refused() {
        let shifted = b"/CMapName /beginbfrange def /CMapType 2 def
            1 beginbfrange <00000000> <FFFFFFFF> <0041> endbfrange";
        assert_eq!(weigh(shifted), Some(1 << 32));
        assert_eq!(weigh(b"1 beginbfrange <00> <FF> <0041> stray endbfrange"), None);
        assert_eq!(weigh(b"1 beginbfrange <00> <FF> 12 endbfrange"), None);
        assert_eq!(weigh(b"beginbfrange <00> <0"), None);
        assert_eq!(weigh(b"endbfrange <00> <FF> <0041>"), None);
    }
}
