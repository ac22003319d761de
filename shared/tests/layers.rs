//! The import rules of `docs/layers.md`, checked against the source of `shared/src`: no file
//! imports from a floor above its own, no two files import each other around a circle, and
//! only the HTTP floors use axum.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use regex::Regex;

/// A file of `shared/src`, by its path relative to it (`rag/qa.rs`).
type File = String;

struct Floors(Vec<(String, u32, String)>);

impl Floors {
    /// The table of `docs/layers.md`: floor number, name, and the files or folders in backticks.
    fn read() -> Self {
        let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/layers.md"))
            .expect("docs/layers.md");
        let tick = Regex::new(r"`([^`]+)`").expect("pattern");
        let mut entries = Vec::new();
        for line in doc.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (Some(floor), Some(name), Some(files)) = (cells.get(1), cells.get(2), cells.get(3)) else {
                continue;
            };
            let Ok(floor) = floor.parse::<u32>() else { continue };
            for m in tick.captures_iter(files) {
                entries.push((m[1].to_owned(), floor, (*name).to_owned()));
            }
        }
        assert!(entries.len() > 10, "docs/layers.md lost its table");
        Floors(entries)
    }

    /// The floor of the longest entry naming the file or a folder holding it.
    fn of(&self, file: &str) -> Option<(u32, &str)> {
        self.0
            .iter()
            .filter(|(entry, _, _)| {
                if entry.ends_with('/') {
                    file.starts_with(entry.as_str())
                } else {
                    file == entry
                }
            })
            .max_by_key(|(entry, _, _)| entry.len())
            .map(|(_, floor, name)| (*floor, name.as_str()))
    }
}

struct Source {
    files: BTreeMap<File, String>,
}

impl Source {
    fn read() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).expect("source folder") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path
                        .strip_prefix(&root)
                        .expect("under src")
                        .to_string_lossy()
                        .replace('\\', "/");
                    files.insert(rel, code_of(&fs::read_to_string(&path).expect("source file")));
                }
            }
        }
        Source { files }
    }

    /// The module path of a file: `rag/qa.rs` is `rag::qa`, `rag/mod.rs` is `rag`.
    fn module_of(file: &str) -> Vec<String> {
        let trimmed = file.trim_end_matches(".rs");
        let mut segs: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
        if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
            segs.pop();
        }
        segs
    }

    fn file_of(&self, module: &[String]) -> Option<File> {
        if module.is_empty() {
            return Some("lib.rs".into());
        }
        let base = module.join("/");
        [format!("{base}.rs"), format!("{base}/mod.rs")]
            .into_iter()
            .find(|f| self.files.contains_key(f))
    }

    /// The file that defines what `path` (absolute, from the crate root) names, looking
    /// through re-exports.
    fn resolve(&self, path: &[String], depth: u32) -> Option<File> {
        let k = (0..=path.len()).rev().find(|k| self.file_of(&path[..*k]).is_some())?;
        let file = self.file_of(&path[..k])?;
        let Some(name) = path.get(k) else { return Some(file) };
        if depth > 8 || defines(&self.files[&file], name) {
            return Some(file);
        }
        let module = Self::module_of(&file);
        for (export, glob) in self.reexports(&file) {
            let Some(target) = self.absolute(&module, &export) else {
                continue;
            };
            if glob {
                let mut item = target.clone();
                item.push(name.clone());
                if let Some(found) = self.resolve(&item, depth + 1) {
                    if found != file && defines(&self.files[&found], name) {
                        return Some(found);
                    }
                }
            } else if target.last() == Some(name) || export.ends_with(&format!(" as {name}")) {
                return self.resolve(&target, depth + 1);
            }
        }
        Some(file)
    }

    /// `path` made absolute, or `None` when it names another crate.
    fn absolute(&self, module: &[String], path: &str) -> Option<Vec<String>> {
        let first = path.split("::").next().unwrap_or_default().trim();
        let keyword = matches!(first, "crate" | "self" | "super");
        let mut child = module.to_vec();
        child.push(first.to_owned());
        (keyword || self.file_of(&child).is_some()).then(|| absolute(module, path))
    }

    /// The paths a file re-exports (`pub use`), and whether each is a glob.
    fn reexports(&self, file: &str) -> Vec<(String, bool)> {
        uses(&self.files[file])
            .into_iter()
            .filter(|(public, _)| *public)
            .flat_map(|(_, tree)| expand(&tree))
            .map(|p| match p.strip_suffix("::*") {
                Some(glob) => (glob.to_owned(), true),
                None => (p, false),
            })
            .collect()
    }

    /// The files `file` imports: its `use` lines (re-exports aside) and the paths in its code,
    /// through the names its `use` lines bring in and its child modules.
    fn imports(&self, file: &str) -> BTreeMap<File, String> {
        let code = &self.files[file];
        let module = Self::module_of(file);
        let used: Vec<String> = uses(code)
            .into_iter()
            .filter(|(public, _)| !public)
            .flat_map(|(_, tree)| expand(&tree))
            .collect();
        let mut aliases = BTreeMap::new();
        let mut paths = Vec::new();
        for p in used {
            let (path, alias) = match p.split_once(" as ") {
                Some((path, alias)) => (path.trim().to_owned(), alias.trim().to_owned()),
                None => (p.clone(), p.rsplit("::").next().unwrap_or_default().to_owned()),
            };
            let path = path.trim_end_matches("::*").to_owned();
            if let Some(abs) = self.absolute(&module, &path) {
                aliases.insert(alias, abs);
            }
            paths.push(path);
        }
        let inline = Regex::new(r"(?:^|[^:\w])(\w+(?:::\w+)+)").expect("pattern");
        for c in inline.captures_iter(&without_uses(code)) {
            let path = &c[1];
            let (first, rest) = path.split_once("::").unwrap_or((path, ""));
            match aliases.get(first) {
                Some(abs) if !matches!(first, "crate" | "self" | "super") => {
                    paths.push(format!("crate::{}::{rest}", abs.join("::")));
                }
                _ => paths.push(path.to_owned()),
            }
        }
        let mut out = BTreeMap::new();
        for p in paths {
            let Some(abs) = self.absolute(&module, &p) else {
                continue;
            };
            if let Some(target) = self.resolve(&abs, 0) {
                if target != file && !is_part_of(file, &target) {
                    out.entry(target).or_insert(p);
                }
            }
        }
        out
    }
}

/// A `mod.rs` dispatching to its own parts: how a module is composed, not an import circle.
fn is_part_of(file: &str, target: &str) -> bool {
    file.strip_suffix("mod.rs").is_some_and(|dir| target.starts_with(dir))
}

/// The code of a file without its comments and its unit tests.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `(is it pub, the use tree)` of every `use` item.
fn uses(code: &str) -> Vec<(bool, String)> {
    let re = Regex::new(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").expect("pattern");
    re.captures_iter(code)
        .map(|c| {
            (
                c.get(1).is_some(),
                c[2].split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect()
}

fn without_uses(code: &str) -> String {
    let re = Regex::new(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;").expect("pattern");
    re.replace_all(code, "").into_owned()
}

/// `a::{b, c::{d, self}}` as `a::b`, `a::c::d`, `a::c`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand(p).into_iter().map(move |rest| match rest.as_str() {
                "self" => prefix.trim_end_matches("::").to_owned(),
                _ => format!("{prefix}{rest}"),
            })
        })
        .collect()
}

/// An import path made absolute from the module it is written in.
fn absolute(module: &[String], path: &str) -> Vec<String> {
    let mut segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut base: Vec<String> = match segs.first().copied() {
        Some("crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some("self") => {
            segs.remove(0);
            module.to_vec()
        }
        Some("super") => {
            let mut base = module.to_vec();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                base.pop();
            }
            base
        }
        // A child module of this one (`pub use stream::spawn_stream` in a `mod.rs`), else
        // another crate's path; the caller tells them apart.
        _ => module.to_vec(),
    };
    base.extend(segs.into_iter().filter(|s| !s.is_empty()).map(str::to_owned));
    base
}

fn defines(code: &str, name: &str) -> bool {
    let re = Regex::new(&format!(
        r"\b(fn|struct|enum|type|const|static|trait|mod|union)\s+{}\b|macro_rules!\s*{}\b",
        regex::escape(name),
        regex::escape(name)
    ))
    .expect("pattern");
    re.is_match(code)
}

fn graph() -> (Source, BTreeMap<File, BTreeMap<File, String>>) {
    let source = Source::read();
    let graph = source.files.keys().map(|f| (f.clone(), source.imports(f))).collect();
    (source, graph)
}

#[test]
fn every_file_has_a_floor_and_imports_only_from_its_own_or_lower_floors_and_the_map_names_only_real_files() {
    let floors = Floors::read();
    let (source, graph) = graph();
    let mut wrong = Vec::new();
    for file in source.files.keys() {
        let Some((floor, name)) = floors.of(file) else {
            wrong.push(format!("{file}: on no floor of docs/layers.md"));
            continue;
        };
        for (target, path) in &graph[file] {
            let Some((to, to_name)) = floors.of(target) else {
                continue;
            };
            if to > floor {
                wrong.push(format!(
                    "{file} ({floor} {name}) imports {path} from {target} ({to} {to_name})"
                ));
            }
        }
    }
    for (entry, _, _) in &floors.0 {
        if !source
            .files
            .keys()
            .any(|f| f == entry || entry.ends_with('/') && f.starts_with(entry.as_str()))
        {
            wrong.push(format!("{entry}: named in docs/layers.md but no such file"));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against docs/layers.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_files_import_each_other_around_a_circle() {
    let (_, graph) = graph();
    let circles = strongly_connected(&graph);
    let shown: Vec<String> = circles
        .iter()
        .map(|c| {
            c.iter()
                .map(|f| {
                    let to: Vec<&str> = graph[f]
                        .iter()
                        .filter(|(t, _)| c.contains(*t))
                        .map(|(_, p)| p.as_str())
                        .collect();
                    format!("  {f} uses {}", to.join(", "))
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    assert!(circles.is_empty(), "import circles:\n{}", shown.join("\n--\n"));
}

#[test]
fn only_the_http_floors_use_axum() {
    let floors = Floors::read();
    let (source, _) = graph();
    let web = Regex::new(r"\b(axum|utoipa_axum|tower_http|tower|lambda_http)::").expect("pattern");
    let offenders: Vec<&String> = source
        .files
        .iter()
        .filter(|(f, code)| floors.of(f).is_some_and(|(floor, _)| floor < 7) && web.is_match(code))
        .map(|(f, _)| f)
        .collect();
    assert!(
        offenders.is_empty(),
        "below the http floor but using axum: {offenders:?}"
    );
}

#[test]
fn the_checker_sees_what_it_must() {
    assert_eq!(expand("a::{b, c::{d, self}}"), ["a::b", "a::c::d", "a::c"]);
    let module = vec!["rag".to_owned(), "qa".to_owned()];
    assert_eq!(
        absolute(&module, "super::search::run"),
        vec!["rag".to_owned(), "search".to_owned(), "run".to_owned()]
    );
    let (source, graph) = graph();
    assert!(source.files.len() > 100);
    // A use line, an inline path and a re-export looked through.
    assert!(graph["rag/qa.rs"].contains_key("domain/stream.rs"));
    assert!(graph["housekeeping.rs"].contains_key("memory/lifecycle.rs"));
    assert!(graph["http/auth.rs"].contains_key("domain/caller.rs"));
}

/// Tarjan's strongly connected components with more than one file.
fn strongly_connected(graph: &BTreeMap<File, BTreeMap<File, String>>) -> Vec<BTreeSet<File>> {
    struct State<'a> {
        graph: &'a BTreeMap<File, BTreeMap<File, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<File>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph[v].keys().filter(|w| graph.contains_key(*w)) {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.low[w.as_str()].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w.as_str()) {
                let low = s.index[w.as_str()].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}
