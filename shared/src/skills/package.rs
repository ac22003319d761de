//! A skill package in memory: opened from a zip with every safety check, edited, and packed
//! back. Opening refuses zip-slip and absolute paths, symbolic links, encrypted or broken
//! entries, and zip bombs (too many entries, too much unpacked data, a suspicious compression
//! ratio, or an entry whose real size differs from its header) before anything is stored.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read, Write};

use serde::Serialize;
use utoipa::ToSchema;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::path;
use crate::config::SkillLimits;
use crate::AppError;

/// The main instruction file, at the package root.
pub const SKILL_MD: &str = "SKILL.md";

/// Entries smaller than this are not checked for their compression ratio: small text files
/// legitimately compress very well.
const RATIO_CHECK_MIN_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File(Vec<u8>),
}

/// Files and directories by path. Every parent directory of a file is present as well.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Package {
    entries: BTreeMap<String, Node>,
    /// Files an upload marked executable (a script): packed with mode 755, the others 644.
    executable: BTreeSet<String>,
}

/// A node of the file tree (`type` is `file` or `directory`; the root has an empty path).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileNode {
    pub name: String,
    pub path: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Bytes of a file; of all files below a directory.
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(no_recursion)]
    pub children: Option<Vec<FileNode>>,
}

fn refused(message: String) -> AppError {
    AppError::Validation(format!("skill package refused: {message}"))
}

fn too_large(message: String) -> AppError {
    AppError::PayloadTooLarge(format!("skill package refused: {message}"))
}

impl Package {
    /// A package holding only `SKILL.md`.
    pub fn with_skill_md(content: &str) -> Self {
        let mut p = Self::default();
        p.entries
            .insert(SKILL_MD.to_owned(), Node::File(content.as_bytes().to_vec()));
        p
    }

    /// Opens an uploaded zip: `open`'s checks, and every path one the file API can name (it
    /// trims what it is sent, so a path beginning or ending with a space could never be read,
    /// edited or deleted online). Stored packages are opened without this rule: some were
    /// stored before it.
    pub fn open_upload(bytes: &[u8], limits: &SkillLimits) -> Result<Self, AppError> {
        let package = Self::open(bytes, limits)?;
        if let Some(path) = package.entries.keys().find(|p| path::unnameable(p)) {
            return Err(refused(format!(
                "entry path {path:?} begins or ends with a space, which the file API cannot name"
            )));
        }
        if let Some((a, b)) = package.case_twins() {
            return Err(refused(case_clash(a, b)));
        }
        if let Some(p) = package.entries.keys().find(|p| p.chars().any(path::misleading)) {
            return Err(refused(format!("entry path {p:?} {}", path::MISLEADING)));
        }
        package.check_skill_md(limits)?;
        Ok(package)
    }

    /// Agents load SKILL.md whole, as the online editor opens it: a larger one was stored, and
    /// then no agent could use it. Checked on uploads and on every commit (a metadata update
    /// rewrites it); a package stored before still opens.
    pub fn check_skill_md(&self, limits: &SkillLimits) -> Result<(), AppError> {
        match self.file(SKILL_MD).filter(|md| md.len() as u64 > limits.max_file_bytes) {
            Some(md) => Err(too_large(format!(
                "SKILL.md is {} bytes; agents and the online editor read files of at most {} bytes",
                md.len(),
                limits.max_file_bytes
            ))),
            None => Ok(()),
        }
    }

    /// Opens and checks a zip archive. A package whose files all sit in one top-level folder
    /// holding `SKILL.md` (how most tools zip a folder) is moved up to the root.
    pub fn open(bytes: &[u8], limits: &SkillLimits) -> Result<Self, AppError> {
        if bytes.len() as u64 > limits.max_package_bytes {
            return Err(too_large(format!(
                "the zip is {} bytes; the limit is {} bytes",
                bytes.len(),
                limits.max_package_bytes
            )));
        }
        let mut archive = ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| refused(format!("the file is not a valid zip archive ({e})")))?;
        // The archive keeps one of two entries of one name, unsaid, and counts it once.
        if archive.has_duplicate_names() {
            return Err(refused("it holds two entries with the same name".to_owned()));
        }
        // Finder adds an `__MACOSX` entry per file, dropped below: the limit counts what is
        // kept (`check_limits`), this one bounds the work of reading what is dropped.
        if archive.len() > limits.max_entries.saturating_mul(2) {
            return Err(too_large(format!(
                "it has {} entries; the limit is {}",
                archive.len(),
                limits.max_entries
            )));
        }
        let mut package = Self::default();
        let mut unpacked: u64 = 0;
        for index in 0..archive.len() {
            let mut entry = archive.by_index(index).map_err(|e| {
                refused(format!(
                    "entry {} cannot be read ({e}); encrypted entries are not supported",
                    index + 1
                ))
            })?;
            // A name that is not UTF-8 (and has no Unicode path field) is in some local code
            // page the archive does not name: read as CP437, a GBK or Shift-JIS name became
            // other characters, silently, and links to it in SKILL.md broke.
            let Ok(raw) = std::str::from_utf8(entry.name_raw()).map(str::to_owned) else {
                return Err(refused(format!(
                    "entry {:?} has a name that is not UTF-8; zip the folder again with UTF-8 names \
                     (7-Zip, Info-ZIP zip, macOS or a recent Windows)",
                    String::from_utf8_lossy(entry.name_raw())
                )));
            };
            if entry.is_symlink() {
                return Err(refused(format!(
                    "entry {raw:?} is a symbolic link; links are not allowed"
                )));
            }
            let clean = path::clean(&raw).map_err(|e| refused(format!("entry path {raw:?} {e}")))?;
            if path::is_macos_metadata(&clean) {
                continue;
            }
            if entry.is_dir() {
                package.add(&clean, Node::Dir).map_err(refused)?;
                continue;
            }
            let runs = entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0);
            let declared = entry.size();
            let compressed = entry.compressed_size().max(1);
            check_ratio(&raw, declared, compressed, limits)?;
            let room = limits.max_unpacked_bytes.saturating_sub(unpacked);
            if declared > room {
                return Err(unpacked_too_large(limits));
            }
            // The header can lie: read at most what is left, plus one byte to notice a lie.
            let mut data = Vec::new();
            (&mut entry)
                .take(room.saturating_add(1))
                .read_to_end(&mut data)
                .map_err(|e| refused(format!("entry {raw:?} cannot be unpacked ({e})")))?;
            let real = data.len() as u64;
            if real > room {
                return Err(unpacked_too_large(limits));
            }
            if real != declared {
                return Err(refused(format!(
                    "entry {raw:?} unpacks to {real} bytes but its header says {declared}"
                )));
            }
            check_ratio(&raw, real, compressed, limits)?;
            unpacked += real;
            package.add(&clean, Node::File(data)).map_err(refused)?;
            if runs {
                package.executable.insert(clean);
            }
        }
        package.lift_single_folder();
        package.check_limits(limits)?;
        Ok(package)
    }

    /// Adds an entry from an archive; the same path twice, or a file where a directory is, is
    /// refused.
    fn add(&mut self, at: &str, node: Node) -> Result<(), String> {
        self.ensure_parents(at)?;
        match (self.entries.get(at), &node) {
            (None, _) => {
                self.entries.insert(at.to_owned(), node);
                Ok(())
            }
            (Some(Node::Dir), Node::Dir) => Ok(()),
            _ => Err(format!("the path {at:?} appears twice")),
        }
    }

    fn ensure_parents(&mut self, at: &str) -> Result<(), String> {
        let mut dir = path::parent(at);
        while !dir.is_empty() {
            match self.entries.get(dir) {
                Some(Node::File(_)) => return Err(format!("{dir:?} is a file, so {at:?} cannot be inside it")),
                Some(Node::Dir) => {}
                None => {
                    self.entries.insert(dir.to_owned(), Node::Dir);
                }
            }
            dir = path::parent(dir);
        }
        Ok(())
    }

    fn lift_single_folder(&mut self) {
        if self.entries.contains_key(SKILL_MD) {
            return;
        }
        let roots: Vec<&String> = self.entries.keys().filter(|k| !k.contains('/')).collect();
        let [root] = roots.as_slice() else {
            return;
        };
        let prefix = format!("{root}/");
        if !matches!(self.entries.get(&format!("{prefix}{SKILL_MD}")), Some(Node::File(_))) {
            return;
        }
        self.entries = std::mem::take(&mut self.entries)
            .into_iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|rest| (rest.to_owned(), v)))
            // Finder's metadata inside the folder is at the top now, where it is dropped too.
            .filter(|(k, _)| !path::is_macos_metadata(k))
            .collect();
        self.executable = std::mem::take(&mut self.executable)
            .into_iter()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
            .collect();
    }

    /// Entry count and unpacked size within the limits (after every edit too).
    pub fn check_limits(&self, limits: &SkillLimits) -> Result<(), AppError> {
        if self.entries.len() > limits.max_entries {
            return Err(too_large(format!(
                "it would have {} files and directories; the limit is {}",
                self.entries.len(),
                limits.max_entries
            )));
        }
        if self.unpacked_size() > limits.max_unpacked_bytes {
            return Err(unpacked_too_large(limits));
        }
        Ok(())
    }

    fn unpacked_size(&self) -> u64 {
        self.files().map(|(_, data)| data.len() as u64).sum()
    }

    fn files(&self) -> impl Iterator<Item = (&String, &Vec<u8>)> {
        self.entries.iter().filter_map(|(k, v)| match v {
            Node::File(data) => Some((k, data)),
            Node::Dir => None,
        })
    }

    /// Packs the files (and empty directories) into a zip that opens again under `limits`: a
    /// file that deflates past the ratio an upload may have (a long run of one character,
    /// written online) is stored uncompressed instead.
    pub fn to_zip(&self, limits: &SkillLimits) -> anyhow::Result<Vec<u8>> {
        let packed = self.pack(&BTreeSet::new())?;
        let dense = dense_entries(&packed, limits)?;
        if dense.is_empty() {
            return Ok(packed);
        }
        self.pack(&dense)
    }

    /// The zip, with the files in `stored` not compressed.
    fn pack(&self, stored: &BTreeSet<String>) -> anyhow::Result<Vec<u8>> {
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .unix_permissions(0o644);
        for (at, node) in &self.entries {
            match node {
                Node::File(data) => {
                    let method = match stored.contains(at) {
                        true => CompressionMethod::Stored,
                        false => CompressionMethod::Deflated,
                    };
                    let mode = match self.executable.contains(at) {
                        true => 0o755,
                        false => 0o644,
                    };
                    let options = options.compression_method(method).unix_permissions(mode);
                    writer.start_file(at.as_str(), options)?;
                    writer.write_all(data)?;
                }
                Node::Dir if self.is_empty_dir(at) => {
                    writer.add_directory(format!("{at}/"), options.unix_permissions(0o755))?;
                }
                Node::Dir => {}
            }
        }
        Ok(writer.finish()?.into_inner())
    }

    fn is_empty_dir(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        !self
            .entries
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// The bytes of the file at `at`, if it is a file.
    pub fn file(&self, at: &str) -> Option<&[u8]> {
        match self.entries.get(at) {
            Some(Node::File(data)) => Some(data),
            _ => None,
        }
    }

    pub fn is_dir(&self, at: &str) -> bool {
        matches!(self.entries.get(at), Some(Node::Dir))
    }

    pub fn exists(&self, at: &str) -> bool {
        self.entries.contains_key(at)
    }

    /// The whole tree under a root directory node.
    pub fn tree(&self, root_name: &str) -> FileNode {
        let mut root = FileNode {
            name: root_name.to_owned(),
            path: String::new(),
            kind: "directory",
            size: 0,
            children: Some(self.children_of("")),
        };
        root.size = root.children.iter().flatten().map(|c| c.size).sum();
        root
    }

    fn children_of(&self, dir: &str) -> Vec<FileNode> {
        let mut nodes: Vec<FileNode> = self
            .entries
            .iter()
            .filter(|(k, _)| path::parent(k) == dir)
            .map(|(k, v)| match v {
                Node::File(data) => FileNode {
                    name: path::file_name(k).to_owned(),
                    path: k.clone(),
                    kind: "file",
                    size: data.len() as u64,
                    children: None,
                },
                Node::Dir => {
                    let children = self.children_of(k);
                    FileNode {
                        name: path::file_name(k).to_owned(),
                        path: k.clone(),
                        kind: "directory",
                        size: children.iter().map(|c| c.size).sum(),
                        children: Some(children),
                    }
                }
            })
            .collect();
        nodes.sort_by(|a, b| (a.kind != "directory", &a.name).cmp(&(b.kind != "directory", &b.name)));
        nodes
    }

    /// Creates or replaces the file at `at` (parent directories are created).
    pub fn write_file(&mut self, at: &str, data: Vec<u8>) -> Result<(), AppError> {
        if self.is_dir(at) {
            return Err(AppError::validation(format!("path {at:?} is a directory, not a file")));
        }
        self.check_case("path", at)?;
        self.ensure_parents(at)
            .map_err(|e| AppError::validation(format!("path: {e}")))?;
        self.entries.insert(at.to_owned(), Node::File(data));
        Ok(())
    }

    /// Creates an empty directory (and its parents).
    pub fn create_dir(&mut self, at: &str) -> Result<(), AppError> {
        self.check_case("path", at)?;
        self.ensure_parents(at)
            .map_err(|e| AppError::validation(format!("path: {e}")))?;
        self.entries.insert(at.to_owned(), Node::Dir);
        Ok(())
    }

    /// The entries at and below `paths` (whatever is there, nothing included), to tell whether
    /// another change touched them.
    pub fn part(&self, paths: &[&str]) -> Vec<(String, Vec<u8>)> {
        self.entries
            .iter()
            .filter(|(k, _)| paths.iter().any(|at| path::is_within(k, at)))
            .map(|(k, node)| match node {
                // A directory as an entry of no bytes whose name ends with '/': never a file's.
                Node::Dir => (format!("{k}/"), Vec::new()),
                Node::File(data) => (k.clone(), data.clone()),
            })
            .collect()
    }

    /// Removes a file, or a directory with everything in it.
    pub fn remove(&mut self, at: &str) -> Result<(), AppError> {
        if !self.exists(at) {
            return Err(AppError::NotFound(format!("no file or directory at path {at:?}")));
        }
        self.entries.retain(|k, _| !path::is_within(k, at));
        self.executable.retain(|k| !path::is_within(k, at));
        Ok(())
    }

    /// Moves a file or directory (with its contents) to a path that does not exist yet.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), AppError> {
        if !self.exists(from) {
            return Err(AppError::NotFound(format!("no file or directory at oldPath {from:?}")));
        }
        if self.exists(to) {
            return Err(AppError::business(format!("newPath {to:?} already exists")));
        }
        if path::is_within(to, from) {
            return Err(AppError::validation(format!(
                "newPath {to:?} is inside oldPath {from:?}; a directory cannot move into itself"
            )));
        }
        // Renaming "Notes.md" to "notes.md" is a change of case, not a clash with itself.
        if let Some(twin) = self.case_twin_of(to, Some(from)) {
            return Err(AppError::validation(format!("newPath: {}", case_clash(twin, to))));
        }
        let mut moved = Vec::new();
        for (k, v) in self.entries.iter().filter(|(k, _)| path::is_within(k, from)) {
            // What lies below moves deeper with it: each new path must still be one a package
            // may hold, or the stored package would no longer open.
            let new = format!("{to}{}", &k[from.len()..]);
            path::clean(&new)
                .map_err(|e| AppError::validation(format!("newPath would move {k:?} to {new:?}, which {e}")))?;
            moved.push((new, v.clone()));
        }
        self.ensure_parents(to)
            .map_err(|e| AppError::validation(format!("newPath: {e}")))?;
        self.entries.retain(|k, _| !path::is_within(k, from));
        self.entries.extend(moved);
        let (runs_moved, runs_kept): (BTreeSet<String>, BTreeSet<String>) = std::mem::take(&mut self.executable)
            .into_iter()
            .partition(|k| path::is_within(k, from));
        self.executable = runs_kept;
        self.executable
            .extend(runs_moved.iter().map(|k| format!("{to}{}", &k[from.len()..])));
        Ok(())
    }
}

/// Paths that differ only in case: extracted on macOS or Windows, one overwrites the other
/// (`skill.md` over `SKILL.md`).
fn case_clash(existing: &str, new: &str) -> String {
    format!(
        "{new:?} differs from {existing:?} only in case; extracted on macOS or Windows one would overwrite the other"
    )
}

impl Package {
    /// Two entries whose paths differ only in case, if any.
    fn case_twins(&self) -> Option<(&str, &str)> {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for at in self.entries.keys() {
            if let Some(first) = seen.insert(at.to_lowercase(), at) {
                return Some((first, at));
            }
        }
        None
    }

    /// An entry other than `at` itself whose path is `at`'s, or one of its directories', in
    /// another case; what lies within `moving` (a rename's source) does not count.
    fn case_twin_of(&self, at: &str, moving: Option<&str>) -> Option<&str> {
        let mut dir = at;
        while !dir.is_empty() {
            let lower = dir.to_lowercase();
            let twin = self
                .entries
                .keys()
                .find(|k| *k != dir && k.to_lowercase() == lower && !moving.is_some_and(|m| path::is_within(k, m)));
            if let Some(twin) = twin {
                return Some(twin);
            }
            dir = path::parent(dir);
        }
        None
    }

    /// Refuses a new path (or a directory it creates) that differs from an entry only in case.
    fn check_case(&self, field: &str, at: &str) -> Result<(), AppError> {
        match self.case_twin_of(at, None) {
            Some(twin) => Err(AppError::validation(format!("{field}: {}", case_clash(twin, at)))),
            None => Ok(()),
        }
    }
}

/// The entries of a zip that `check_ratio` would refuse.
fn dense_entries(zip: &[u8], limits: &SkillLimits) -> anyhow::Result<BTreeSet<String>> {
    let mut archive = ZipArchive::new(Cursor::new(zip))?;
    let mut dense = BTreeSet::new();
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i)?;
        let name = entry.name()?.into_owned();
        if check_ratio(&name, entry.size(), entry.compressed_size().max(1), limits).is_err() {
            dense.insert(name);
        }
    }
    Ok(dense)
}

fn check_ratio(raw: &str, size: u64, compressed: u64, limits: &SkillLimits) -> Result<(), AppError> {
    if size >= RATIO_CHECK_MIN_BYTES && size / compressed > limits.max_compression_ratio {
        return Err(refused(format!(
            "entry {raw:?} expands {}x ({compressed} to {size} bytes), more than the allowed {}x; \
             this looks like a zip bomb",
            size / compressed,
            limits.max_compression_ratio
        )));
    }
    Ok(())
}

fn unpacked_too_large(limits: &SkillLimits) -> AppError {
    too_large(format!(
        "its files unpack to more than {} bytes",
        limits.max_unpacked_bytes
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SkillLimits {
        SkillLimits {
            max_package_bytes: 1024 * 1024,
            max_entries: 20,
            max_unpacked_bytes: 4 * 1024 * 1024,
            max_compression_ratio: 100,
            max_file_bytes: 1024 * 1024,
        }
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        let o = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        for (name, data) in entries {
            w.start_file(*name, o).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn message(result: Result<Package, AppError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn opens_and_round_trips() {
        let bytes = zip_of(&[("SKILL.md", b"---\nname: a\n---\n"), ("scripts/run.py", b"print(1)")]);
        let p = Package::open(&bytes, &limits()).unwrap();
        assert!(p.is_dir("scripts"));
        assert_eq!(p.file("scripts/run.py"), Some(b"print(1)".as_slice()));
        let again = Package::open(&p.to_zip(&limits()).unwrap(), &limits()).unwrap();
        assert_eq!(again, p);
        let tree = p.tree("a");
        let names: Vec<&str> = tree
            .children
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["scripts", "SKILL.md"]);
        assert_eq!(tree.size, 8 + 16);
    }

    #[test]
    fn lifts_a_single_top_folder() {
        let bytes = zip_of(&[
            ("my-skill/SKILL.md", b"x"),
            ("my-skill/ref/a.md", b"y"),
            ("__MACOSX/._x", b"z"),
            ("my-skill/__MACOSX/._y", b"w"),
        ]);
        let p = Package::open(&bytes, &limits()).unwrap();
        assert_eq!(p.file("SKILL.md"), Some(b"x".as_slice()));
        assert_eq!(p.file("ref/a.md"), Some(b"y".as_slice()));
        assert!(!p.exists("my-skill"));
        assert!(!p.exists("__MACOSX") && !p.exists("__MACOSX/._y"));
    }

    #[test]
    fn refuses_unsafe_paths() {
        let slip = zip_of(&[("SKILL.md", b"x"), ("../../evil.sh", b"rm -rf /")]);
        assert!(message(Package::open(&slip, &limits())).contains("contains '..'"));
        let abs = zip_of(&[("/etc/cron.d/x", b"x")]);
        assert!(message(Package::open(&abs, &limits())).contains("is absolute"));
        let win = zip_of(&[("..\\evil", b"x")]);
        assert!(message(Package::open(&win, &limits())).contains("backslash"));
        let dup = zip_of(&[("a", b"x"), ("a/b", b"y")]);
        assert!(message(Package::open(&dup, &limits())).contains("is a file"));
    }

    #[test]
    fn refuses_two_entries_of_one_name() {
        let mut bytes = zip_of(&[("SKILL.md", b"one"), ("SKILL.mx", b"two")]);
        // Writers refuse a second entry of a name; other tools write one (the local header's
        // name and the central directory's both renamed).
        let mut from = 0;
        while let Some(at) = bytes[from..].windows(8).position(|w| w == b"SKILL.mx") {
            bytes[from + at..from + at + 8].copy_from_slice(b"SKILL.md");
            from += at + 8;
        }
        assert!(message(Package::open(&bytes, &limits())).contains("two entries with the same name"));
    }

    #[test]
    fn uploads_name_only_paths_the_file_api_can_name() {
        // A directory's path ends at its name: "docs /a.md" holds "docs ".
        for name in ["notes.md ", " notes.md", "docs/a.md ", "docs /a.md"] {
            let bytes = zip_of(&[("SKILL.md", b"x"), (name, b"y")]);
            assert!(
                message(Package::open_upload(&bytes, &limits())).contains("begins or ends with a space"),
                "{name:?}"
            );
            assert!(Package::open(&bytes, &limits()).is_ok(), "stored: {name:?}");
        }
        let inner = zip_of(&[("SKILL.md", b"x"), ("my docs/ a b.md", b"y")]);
        assert!(Package::open_upload(&inner, &limits())
            .unwrap()
            .exists("my docs/ a b.md"));
    }

    #[test]
    fn refuses_symlinks() {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        w.add_symlink("link", "/etc/passwd", SimpleFileOptions::default())
            .unwrap();
        let bytes = w.finish().unwrap().into_inner();
        assert!(message(Package::open(&bytes, &limits())).contains("symbolic link"));
    }

    #[test]
    fn refuses_zip_bombs() {
        let zeros = vec![0u8; 2 * 1024 * 1024];
        let bomb = zip_of(&[("SKILL.md", b"x"), ("zeros.bin", &zeros)]);
        assert!(message(Package::open(&bomb, &limits())).contains("zip bomb"));
        let lax = SkillLimits {
            max_compression_ratio: 100_000,
            max_unpacked_bytes: 1024 * 1024,
            ..limits()
        };
        let err = Package::open(&bomb, &lax).unwrap_err();
        assert!(matches!(err, AppError::PayloadTooLarge(_)), "{err}");
        let many: Vec<(String, Vec<u8>)> = (0..21).map(|i| (format!("f{i}"), vec![])).collect();
        let many: Vec<(&str, &[u8])> = many.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        let refused = message(Package::open(&zip_of(&many), &limits()));
        assert!(refused.contains("21 files and directories"), "{refused}");
        let far_too_many: Vec<(String, Vec<u8>)> = (0..41).map(|i| (format!("f{i}"), vec![])).collect();
        let far_too_many: Vec<(&str, &[u8])> = far_too_many.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        assert!(message(Package::open(&zip_of(&far_too_many), &limits())).contains("41 entries"));
        let big = SkillLimits {
            max_package_bytes: 10,
            ..limits()
        };
        assert!(message(Package::open(&bomb, &big)).contains("the limit is 10 bytes"));
    }

    #[test]
    fn a_script_stays_executable() {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        let plain = SimpleFileOptions::default();
        w.start_file("skill/SKILL.md", plain).unwrap();
        w.write_all(b"x").unwrap();
        w.start_file("skill/scripts/run.sh", plain.unix_permissions(0o755))
            .unwrap();
        w.write_all(b"#!/bin/sh\necho hi\n").unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let mut p = Package::open_upload(&bytes, &limits()).unwrap();
        p.rename("scripts", "tools").unwrap();
        p.write_file("tools/other.sh", b"echo".to_vec()).unwrap();
        let packed = p.to_zip(&limits()).unwrap();
        let mut archive = ZipArchive::new(Cursor::new(packed.as_slice())).unwrap();
        let mode = |archive: &mut ZipArchive<Cursor<&[u8]>>, name: &str| {
            archive.by_name(name).unwrap().unix_mode().unwrap() & 0o777
        };
        assert_eq!(mode(&mut archive, "tools/run.sh"), 0o755);
        assert_eq!(mode(&mut archive, "tools/other.sh"), 0o644);
        assert_eq!(mode(&mut archive, "SKILL.md"), 0o644);
        // Opened again (an edit's package), it is still marked.
        let again = Package::open(&packed, &limits()).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn paths_that_differ_only_in_case_are_refused() {
        let twins = zip_of(&[("SKILL.md", b"x"), ("skill.md", b"y")]);
        let err = Package::open_upload(&twins, &limits()).unwrap_err().to_string();
        assert!(err.contains("only in case"), "{err}");
        // Stored packages still open: some were stored before the rule.
        assert!(Package::open(&twins, &limits()).is_ok());

        let mut p = Package::open_upload(&zip_of(&[("SKILL.md", b"x"), ("Docs/a.md", b"a")]), &limits()).unwrap();
        for refused in [
            p.clone().write_file("docs/b.md", vec![]),
            p.clone().create_dir("DOCS"),
            p.clone().write_file("skill.md", vec![]),
            p.clone().rename("Docs/a.md", "docs/a.md"),
        ] {
            let err = refused.unwrap_err().to_string();
            assert!(err.contains("only in case"), "{err}");
        }
        // The same path written again, or a change of case of one's own name, is no clash.
        p.write_file("Docs/a.md", b"b".to_vec()).unwrap();
        p.rename("Docs", "docs").unwrap();
        assert!(p.file("docs/a.md").is_some());
    }

    #[test]
    fn finder_metadata_does_not_count_against_the_entry_limit() {
        let named: Vec<(String, Vec<u8>)> = (0..15)
            .flat_map(|i| [(format!("f{i}"), vec![1]), (format!("__MACOSX/._f{i}"), vec![2])])
            .chain([("SKILL.md".to_owned(), b"x".to_vec())])
            .collect();
        let entries: Vec<(&str, &[u8])> = named.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        let package = Package::open(&zip_of(&entries), &limits()).unwrap();
        assert_eq!(package.files().count(), 16);
    }

    #[test]
    fn refuses_names_that_are_not_utf8() {
        let mut bytes = zip_of(&[("SKILL.md", b"x"), ("docs/aX.md", b"y")]);
        // No UTF-8 flag on an ASCII name: patched, it is a byte of some local code page.
        let at: Vec<usize> = bytes
            .windows(10)
            .enumerate()
            .filter(|(_, w)| *w == b"docs/aX.md")
            .map(|(i, _)| i + 6)
            .collect();
        assert_eq!(at.len(), 2, "the local and the central header");
        for i in at {
            bytes[i] = 0xB5;
        }
        let err = message(Package::open(&bytes, &limits()));
        assert!(err.contains("not UTF-8"), "{err}");
    }

    #[test]
    fn an_upload_whose_skill_md_agents_could_not_read_is_refused() {
        let small = SkillLimits {
            max_file_bytes: 10,
            ..limits()
        };
        let bytes = zip_of(&[("SKILL.md", b"0123456789A")]);
        let err = Package::open_upload(&bytes, &small).unwrap_err();
        assert!(matches!(err, AppError::PayloadTooLarge(_)), "{err}");
        assert!(err.to_string().contains("SKILL.md is 11 bytes"), "{err}");
        assert!(Package::open_upload(&zip_of(&[("SKILL.md", b"0123456789")]), &small).is_ok());
    }

    #[test]
    fn refuses_lying_headers_and_garbage() {
        let mut bytes = zip_of(&[("a.txt", b"hello world")]);
        // Patch the central directory's uncompressed size (offset 24 in its header) to 5.
        let cd = bytes.windows(4).rposition(|w| w == [0x50, 0x4b, 0x01, 0x02]).unwrap();
        bytes[cd + 24..cd + 28].copy_from_slice(&5u32.to_le_bytes());
        let err = message(Package::open(&bytes, &limits()));
        assert!(err.contains("skill package refused"), "{err}");
        assert!(message(Package::open(b"not a zip", &limits())).contains("not a valid zip"));
    }

    #[test]
    fn edits() {
        let mut p = Package::with_skill_md("x");
        p.write_file("a/b/c.md", b"c".to_vec()).unwrap();
        p.create_dir("empty").unwrap();
        assert!(p.write_file("a", b"no".to_vec()).is_err());
        assert!(p.write_file("SKILL.md/x", b"no".to_vec()).is_err());
        p.rename("a", "z").unwrap();
        assert_eq!(p.file("z/b/c.md"), Some(b"c".as_slice()));
        assert!(!p.exists("a/b"));
        assert!(p.rename("z", "z/inner").is_err());
        assert!(p.rename("z", "SKILL.md").is_err());
        assert!(p.rename("missing", "q").is_err());
        p.remove("z").unwrap();
        assert!(!p.exists("z/b/c.md"));
        let reopened = Package::open(&p.to_zip(&limits()).unwrap(), &limits()).unwrap();
        assert!(reopened.is_dir("empty"));
        assert_eq!(reopened, p);
    }

    /// Whatever an edit leaves is a package that opens again: a file written online that
    /// deflates past the ratio an upload may have is stored uncompressed, and a rename that
    /// would move a file below the deepest allowed path is refused.
    #[test]
    fn edited_packages_open_again() {
        let mut p = Package::with_skill_md("x");
        p.write_file("data.txt", vec![b'a'; 200_000]).unwrap();
        p.write_file("small.txt", vec![b'b'; 1000]).unwrap();
        let zip = p.to_zip(&limits()).unwrap();
        assert_eq!(Package::open(&zip, &limits()).unwrap(), p);
        let mut archive = ZipArchive::new(Cursor::new(zip.as_slice())).unwrap();
        let method = |archive: &mut ZipArchive<_>, name| archive.by_name(name).unwrap().compression();
        assert_eq!(method(&mut archive, "data.txt"), CompressionMethod::Stored);
        assert_eq!(method(&mut archive, "small.txt"), CompressionMethod::Deflated);

        let deep: Vec<String> = (0..15).map(|i| format!("d{i}")).collect();
        p.write_file(&format!("{}/f.md", deep.join("/")), b"f".to_vec())
            .unwrap();
        let err = p.rename("d0", "x/d0").unwrap_err().to_string();
        assert!(err.contains("deeper than 16 levels"), "{err}");
        assert!(p.exists("d0") && !p.exists("x"), "nothing moved");
        assert!(Package::open(&p.to_zip(&limits()).unwrap(), &limits()).is_ok());
    }
}
