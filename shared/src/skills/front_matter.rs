//! The YAML front matter of `SKILL.md`: `name` and `description` between `---` lines, then
//! the instructions. Only top-level scalar keys are read (plain, quoted, `|` and `>` block
//! scalars), which is what skill packages use; other keys are kept untouched on rewrite.

pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
}

/// One top-level key with the lines it spans (continuation lines included).
struct Entry {
    key: String,
    /// Only `name` and `description` must be strings; other keys may hold lists or maps.
    value: Result<String, String>,
    lines: std::ops::Range<usize>,
}

struct Parsed<'a> {
    lines: Vec<&'a str>,
    /// Index of the closing `---`.
    close: usize,
    entries: Vec<Entry>,
}

const MISSING: &str = "SKILL.md must start with YAML front matter: a '---' line, 'name: ...' and \
                       'description: ...' lines, and a closing '---' line";

fn parse_lines(content: &str) -> Result<Parsed<'_>, String> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let lines: Vec<&str> = content.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if lines.first().map(|l| l.trim_end()) != Some("---") {
        return Err(MISSING.to_owned());
    }
    let close = lines
        .iter()
        .skip(1)
        .position(|l| matches!(l.trim_end(), "---" | "..."))
        .map(|i| i + 1)
        .ok_or_else(|| "SKILL.md front matter is not closed: add a '---' line after it".to_owned())?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut i = 1;
    while i < close {
        let line = lines[i];
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let Some((key, rest)) = top_level_key(line) else {
            return Err(format!(
                "SKILL.md front matter line {} is not 'key: value': {:?}",
                i + 1,
                line
            ));
        };
        let start = i;
        i += 1;
        while i < close && (lines[i].starts_with(' ') || lines[i].starts_with('\t') || lines[i].trim().is_empty()) {
            i += 1;
        }
        let value = scalar(rest.trim(), &lines[start + 1..i]).map_err(|e| format!("SKILL.md front matter '{key}' {e}"));
        if entries.iter().any(|e| e.key == key) {
            return Err(format!("SKILL.md front matter has '{key}' twice"));
        }
        entries.push(Entry {
            key: key.to_owned(),
            value,
            lines: start..i,
        });
    }
    Ok(Parsed { lines, close, entries })
}

fn top_level_key(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = line.split_once(':')?;
    let valid = !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    (valid && (rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t'))).then_some((key, rest))
}

/// The string value of a key whose first line holds `first` and that continues on `more`.
fn scalar(first: &str, more: &[&str]) -> Result<String, String> {
    let first = strip_comment(first);
    if let Some(style) = first.chars().next().filter(|c| *c == '|' || *c == '>') {
        let body: Vec<&str> = more.iter().map(|l| l.trim()).collect();
        let joined = if style == '|' {
            body.join("\n")
        } else {
            body.iter()
                .filter(|l| !l.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Ok(joined.trim().to_owned());
    }
    let continued = std::iter::once(first)
        .chain(more.iter().map(|l| l.trim()))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if continued.starts_with('"') {
        return serde_json::from_str::<String>(&continued)
            .map_err(|_| "has a double-quoted value that is not closed or has a bad escape".to_owned());
    }
    if let Some(inner) = continued.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| "has a single-quoted value that is not closed".to_owned())?;
        return Ok(inner.replace("''", "'"));
    }
    if continued.starts_with('[') || continued.starts_with('{') || (first.is_empty() && !more.is_empty()) {
        return Err("must be a plain string, not a list or a map".to_owned());
    }
    Ok(continued)
}

fn strip_comment(value: &str) -> &str {
    if value.starts_with('"') || value.starts_with('\'') {
        return value;
    }
    value.split_once(" #").map(|(v, _)| v.trim_end()).unwrap_or(value)
}

/// Reads and checks `name` (required) and `description` (optional, may be empty).
pub fn parse(content: &str) -> Result<FrontMatter, String> {
    let parsed = parse_lines(content)?;
    let get = |key: &str| -> Result<Option<String>, String> {
        match parsed.entries.iter().find(|e| e.key == key) {
            None => Ok(None),
            Some(e) => e.value.clone().map(|v| Some(v.trim().to_owned())),
        }
    };
    let name = get("name")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "SKILL.md front matter must have a non-empty 'name'".to_owned())?;
    let description = get("description")?.unwrap_or_default();
    check(&name, &description).map_err(|e| format!("SKILL.md front matter {e}"))?;
    Ok(FrontMatter { name, description })
}

/// The length rules of a skill's name and description.
pub fn check(name: &str, description: &str) -> Result<(), String> {
    if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(format!(
            "name must be 1 to {MAX_NAME_CHARS} characters long without control characters"
        ));
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "description must be at most {MAX_DESCRIPTION_CHARS} characters long"
        ));
    }
    // Line breaks and tabs are a description's own; a NUL cannot be stored as text.
    if description.contains('\0') {
        return Err("description must not contain NUL characters".to_owned());
    }
    Ok(())
}

/// `content` with its `name` and `description` set, every other line kept as it was: the
/// byte-order mark and line ends of the front matter as they were, everything from its closing
/// line on byte for byte. A key whose value is unchanged keeps its lines too: written again, a
/// `>` or `|` block (read with its lines trimmed and blank ones dropped) lost its paragraphs
/// and indentation when only the name changed.
pub fn with_metadata(content: &str, meta: &FrontMatter) -> Result<String, String> {
    let parsed = parse_lines(content)?;
    let text = content.strip_prefix('\u{feff}').unwrap_or(content);
    let bom = &content[..content.len() - text.len()];
    let newline = match text.split('\n').next().is_some_and(|first| first.ends_with('\r')) {
        true => "\r\n",
        false => "\n",
    };
    let closing_at: usize = text.split_inclusive('\n').take(parsed.close).map(str::len).sum();
    let mut out: Vec<String> = vec!["---".to_owned()];
    let mut done = (false, false);
    let mut i = 1;
    while i < parsed.close {
        match parsed.entries.iter().find(|e| e.lines.start == i) {
            Some(e) if e.key == "name" || e.key == "description" => {
                let is_name = e.key == "name";
                let value = if is_name { &meta.name } else { &meta.description };
                match e.value.as_deref().map(str::trim) == Ok(value.as_str()) {
                    true => out.extend(parsed.lines[e.lines.clone()].iter().map(|l| (*l).to_owned())),
                    false => out.push(format!("{}: {}", e.key, yaml_string(value))),
                }
                if is_name {
                    done.0 = true;
                } else {
                    done.1 = true;
                }
                i = e.lines.end;
            }
            _ => {
                out.push(parsed.lines[i].to_owned());
                i += 1;
            }
        }
    }
    if !done.1 {
        out.insert(1, format!("description: {}", yaml_string(&meta.description)));
    }
    if !done.0 {
        out.insert(1, format!("name: {}", yaml_string(&meta.name)));
    }
    Ok(format!("{bom}{}{newline}{}", out.join(newline), &text[closing_at..]))
}

/// A new `SKILL.md` with the given metadata and `body` below the front matter.
pub fn document(meta: &FrontMatter, body: &str) -> String {
    format!(
        "---\nname: {}\ndescription: {}\n---\n\n{}\n",
        yaml_string(&meta.name),
        yaml_string(&meta.description),
        body.trim()
    )
}

/// The instructions below the front matter (the whole text when there is none).
pub fn body(content: &str) -> &str {
    let Ok(parsed) = parse_lines(content) else {
        return content;
    };
    // Counted on the text as it is: the parsed lines lost their '\r' and the mark before them.
    let text = content.strip_prefix('\u{feff}').unwrap_or(content);
    let skip: usize = text.split_inclusive('\n').take(parsed.close + 1).map(str::len).sum();
    text[skip..].trim_start_matches(['\r', '\n'])
}

/// A YAML scalar for `value`: plain when that reads back unchanged, double-quoted otherwise
/// (a JSON string is a valid YAML double-quoted scalar).
fn yaml_string(value: &str) -> String {
    let special_start = value
        .chars()
        .next()
        .is_none_or(|c| "-?:,[]{}#&*!|>'\"%@`".contains(c) || c.is_whitespace());
    let ambiguous = matches!(
        value.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
    ) || value.parse::<f64>().is_ok();
    let plain = !special_start
        && !ambiguous
        && !value.ends_with(char::is_whitespace)
        && !value.contains(": ")
        && !value.contains(" #")
        && !value.ends_with(':')
        && !value.chars().any(char::is_control);
    if plain {
        value.to_owned()
    } else {
        serde_json::Value::String(value.to_owned()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, description: &str) -> FrontMatter {
        FrontMatter {
            name: name.into(),
            description: description.into(),
        }
    }

    #[test]
    fn reads_plain_quoted_and_block_values() {
        let doc = "---\nname: pdf-tools\ndescription: Fill PDF forms # a comment\nlicense: MIT\n---\n# Body\n";
        assert_eq!(parse(doc).unwrap(), meta("pdf-tools", "Fill PDF forms"));
        let doc = "---\r\nname: \"quoted: name\"\r\ndescription: 'it''s'\r\n---\r\n";
        assert_eq!(parse(doc).unwrap(), meta("quoted: name", "it's"));
        let doc =
            "---\nname: x\ndescription: >\n  folded\n  text\nmetadata:\n  a: b\nallowed-tools: [Read, Bash]\n---\n";
        assert_eq!(parse(doc).unwrap(), meta("x", "folded text"));
        let doc = "---\nname: x\ndescription: |\n  line one\n  line two\n---\n";
        assert_eq!(parse(doc).unwrap().description, "line one\nline two");
        assert_eq!(parse("---\nname: x\n---\n").unwrap().description, "");
    }

    #[test]
    fn refuses_missing_or_malformed() {
        assert!(parse("# Just markdown")
            .unwrap_err()
            .contains("must start with YAML front matter"));
        assert!(parse("---\nname: x\n").unwrap_err().contains("not closed"));
        assert!(parse("---\ndescription: d\n---\n").unwrap_err().contains("'name'"));
        assert!(parse("---\nname: \"open\n---\n").unwrap_err().contains("'name'"));
        assert!(parse("---\nname x\n---\n").unwrap_err().contains("line 2"));
        assert!(parse("---\nname: [a, b]\n---\n").unwrap_err().contains("plain string"));
        assert!(parse("---\nname: a\nname: b\n---\n").unwrap_err().contains("twice"));
        let long = format!("---\nname: {}\n---\n", "n".repeat(65));
        assert!(parse(&long).unwrap_err().contains("1 to 64"));

        // Escaped or raw, a NUL in the description is refused (it cannot be stored as text).
        for doc in [
            "---\nname: x\ndescription: \"a\\u0000b\"\n---\n",
            "---\nname: x\ndescription: a\0b\n---\n",
        ] {
            assert!(
                parse(doc).unwrap_err().contains("description must not contain NUL"),
                "{doc:?}"
            );
        }
    }

    #[test]
    fn rewrites_metadata_and_keeps_the_rest() {
        let doc = "---\nname: old\ndescription: >\n  old\n  text\nlicense: MIT\n---\n# Body\nkeep: me\n";
        let new = with_metadata(doc, &meta("new: name", "true")).unwrap();
        assert_eq!(
            new,
            "---\nname: \"new: name\"\ndescription: \"true\"\nlicense: MIT\n---\n# Body\nkeep: me\n"
        );
        assert_eq!(parse(&new).unwrap(), meta("new: name", "true"));
        let added = with_metadata("---\nlicense: MIT\n---\nbody", &meta("a", "b")).unwrap();
        assert_eq!(parse(&added).unwrap(), meta("a", "b"));
        assert!(added.ends_with("license: MIT\n---\nbody"));
        // Written on Windows: the mark and line ends stay, and the body is not touched.
        let windows = "\u{feff}---\r\nname: old\r\ndescription: d\r\n---\r\n# Body\r\nkeep\n";
        let new = with_metadata(windows, &meta("new", "e")).unwrap();
        assert_eq!(
            new,
            "\u{feff}---\r\nname: new\r\ndescription: e\r\n---\r\n# Body\r\nkeep\n"
        );
    }

    #[test]
    fn an_unchanged_block_keeps_its_paragraphs_and_indentation() {
        let doc = "---\nname: old\ndescription: |\n  Fill forms.\n\n    - indented step\nlicense: MIT\n---\nbody";
        let description = parse(doc).unwrap().description;
        let new = with_metadata(doc, &meta("new", &description)).unwrap();
        assert_eq!(
            new,
            "---\nname: new\ndescription: |\n  Fill forms.\n\n    - indented step\nlicense: MIT\n---\nbody"
        );
    }

    #[test]
    fn documents_round_trip() {
        let doc = document(&meta("技能", "Say \"hi\"\nthen stop"), "# Steps\n1. go");
        assert_eq!(parse(&doc).unwrap(), meta("技能", "Say \"hi\"\nthen stop"));
        assert_eq!(body(&doc), "# Steps\n1. go\n");
        assert_eq!(body("no front matter"), "no front matter");
        // Written on Windows, with a byte order mark and a description of Chinese characters.
        let windows =
            "\u{feff}---\r\nname: pdf\r\ndescription: 填写表格\r\nlicense: MIT\r\n---\r\n\r\n# Steps\r\n1. go";
        assert_eq!(parse(windows).unwrap(), meta("pdf", "填写表格"));
        assert_eq!(body(windows), "# Steps\r\n1. go");
    }
}
