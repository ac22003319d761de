//! Paths inside a skill package. One rule for zip entries and for paths sent to the file API:
//! relative, `/`-separated, no `.` or `..` segments, no drive letters or control characters,
//! so nothing can point outside the package.

use crate::AppError;

const MAX_PATH_CHARS: usize = 512;
const MAX_DEPTH: usize = 16;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("is empty")]
    Empty,
    #[error("is absolute; paths are relative to the package root")]
    Absolute,
    #[error("contains '..'; paths may not leave the package")]
    ParentSegment,
    #[error("contains an empty or '.' segment")]
    EmptySegment,
    #[error("contains a backslash; use '/' as the separator")]
    Backslash,
    #[error("contains control characters")]
    Control,
    #[error("is longer than {MAX_PATH_CHARS} characters or deeper than {MAX_DEPTH} levels")]
    TooLong,
}

/// Checks `raw` and returns it normalised (no trailing `/`).
pub fn clean(raw: &str) -> Result<String, PathError> {
    if raw.is_empty() {
        return Err(PathError::Empty);
    }
    if raw.chars().any(char::is_control) {
        return Err(PathError::Control);
    }

    if raw.starts_with('/') || has_drive_letter(raw) {
        return Err(PathError::Absolute);
    }
    if raw.contains('\\') {
        return Err(PathError::Backslash);
    }
    let trimmed = raw.strip_suffix('/').unwrap_or(raw);
    let segments: Vec<&str> = trimmed.split('/').collect();
    if segments.contains(&"..") {
        return Err(PathError::ParentSegment);
    }
    if segments.iter().any(|s| s.is_empty() || *s == ".") {
        return Err(PathError::EmptySegment);
    }
    if trimmed.chars().count() > MAX_PATH_CHARS || segments.len() > MAX_DEPTH {
        return Err(PathError::TooLong);
    }
    Ok(trimmed.to_owned())
}

fn has_drive_letter(raw: &str) -> bool {
    let b = raw.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// `__MACOSX/` in an archive is macOS's metadata, dropped when a package is opened.
pub fn is_macos_metadata(path: &str) -> bool {
    is_within(path, "__MACOSX")
}

/// The path, or a folder on it, begins or ends with whitespace: the file API trims the paths
/// it is sent, so a folder `docs ` (which `docs /a.md` makes) could be neither named nor
/// deleted online, and a request naming it reached `docs`. A segment inside may begin with a
/// space: `my docs/ a b.md` is named as it is.
pub fn unnameable(path: &str) -> bool {
    path.trim_start() != path || path.split('/').any(|s| s.trim_end() != s)
}

/// A path an edit is about to make (a new file or folder, a rename's target): none that the
/// file API could not name again (`unnameable`), and none that reads as another (`misleading`),
/// the rules uploads keep too. Paths already in a package stored before the rules stay
/// readable, editable and removable.
pub fn creatable(name: &str, path: &str) -> Result<(), AppError> {
    if unnameable(path) {
        return Err(AppError::validation(format!(
            "{name} names a folder ending with a space, which paths cannot name: {path:?}"
        )));
    }
    if path.chars().any(misleading) {
        return Err(AppError::validation(format!("{name} {MISLEADING}: {path:?}")));
    }
    Ok(())
}

/// Why a name or path with a `misleading` character is refused.
pub const MISLEADING: &str = "contains zero-width or direction-changing characters";

/// A character that makes a name read as another to the users who see it (every user reads
/// every skill): `run\u{202E}hs.txt` shows as "runtxt.sh", `pdf-forms\u{200B}` as another's
/// skill. The joiners (ZWNJ, ZWJ) are not: Persian and Indic spelling and emoji need them.
pub fn misleading(c: char) -> bool {
    crate::text::hidden(c) && !matches!(c, '\u{200C}' | '\u{200D}')
}

/// A path from the file API, trimmed; the error names the field. Nothing may be written under
/// `__MACOSX`: opening the package again would drop it.
pub fn field(name: &str, raw: &str) -> Result<String, AppError> {
    let raw = raw.trim();
    let clean = clean(raw).map_err(|e| AppError::validation(format!("{name} {e}: {raw:?}")))?;
    if is_macos_metadata(&clean) {
        return Err(AppError::validation(format!(
            "{name} {raw:?} is under __MACOSX, which archives use for macOS metadata and uploads drop"
        )));
    }
    Ok(clean)
}

/// The directory holding `path` ("" for the root).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("")
}

/// The last segment of `path`.
pub fn file_name(path: &str) -> &str {
    path.rsplit_once('/').map(|(_, name)| name).unwrap_or(path)
}

/// True when `path` is `dir` or lies below it.
pub fn is_within(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_paths_may_not_read_as_others_but_joiners_are_spelling() {
        for raw in ["run\u{202E}hs.txt", "a\u{200B}/b.md", "\u{2066}x"] {
            let err = creatable("path", raw).unwrap_err().to_string();
            assert!(err.contains(MISLEADING), "{raw:?}: {err}");
        }
        assert!(creatable(
            "path",
            "docs/\u{645}\u{6cc}\u{200c}\u{62e}\u{648}\u{627}\u{647}\u{645}.md"
        )
        .is_ok());
        // Stored before the rule, such a path is still named by the file API.
        assert_eq!(field("path", "a\u{200B}/b.md").unwrap(), "a\u{200B}/b.md");
    }

    #[test]
    fn nothing_is_written_under_macos_metadata() {
        for raw in ["__MACOSX", "__MACOSX/notes.md", " __MACOSX/a/b "] {
            let err = field("path", raw).unwrap_err().to_string();
            assert!(err.contains("is under __MACOSX"), "{raw}: {err}");
        }
        assert_eq!(field("path", "__MACOSX2/a").unwrap(), "__MACOSX2/a");
    }

    #[test]
    fn no_folder_made_ends_with_a_space() {
        for raw in ["docs /old.md", "a/b /c", "a/b\u{a0}/c"] {
            let path = field("path", raw).unwrap();
            let err = creatable("path", &path).unwrap_err().to_string();
            assert!(err.contains("names a folder ending with a space"), "{raw}: {err}");
        }
        assert_eq!(field("path", " docs/old.md ").unwrap(), "docs/old.md");
        assert!(creatable("path", "my docs/ old file.md").is_ok());
    }

    #[test]
    fn accepts_relative_paths() {
        assert_eq!(clean("SKILL.md").unwrap(), "SKILL.md");
        assert_eq!(clean("scripts/run.py").unwrap(), "scripts/run.py");
        assert_eq!(clean("docs/").unwrap(), "docs");
        assert_eq!(clean("参考/说明.md").unwrap(), "参考/说明.md");
    }

    #[test]
    fn refuses_escapes() {
        assert_eq!(clean("../evil.sh"), Err(PathError::ParentSegment));
        assert_eq!(clean("a/../../evil"), Err(PathError::ParentSegment));
        assert_eq!(clean("a/.."), Err(PathError::ParentSegment));
        assert_eq!(clean("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(clean("C:/Windows/x"), Err(PathError::Absolute));
        assert_eq!(clean("a\\..\\b"), Err(PathError::Backslash));
        assert_eq!(clean("a//b"), Err(PathError::EmptySegment));
        assert_eq!(clean("./a"), Err(PathError::EmptySegment));
        assert_eq!(clean("a\0b"), Err(PathError::Control));
        assert_eq!(clean(""), Err(PathError::Empty));
        assert_eq!(clean(&"a/".repeat(20)), Err(PathError::TooLong));
    }

    #[test]
    fn relations() {
        assert_eq!(parent("a/b/c.md"), "a/b");
        assert_eq!(parent("c.md"), "");
        assert_eq!(file_name("a/b/c.md"), "c.md");
        assert!(is_within("a/b", "a"));
        assert!(is_within("a", "a"));
        assert!(!is_within("ab", "a"));
    }
}
