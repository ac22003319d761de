//! The SAM template and the workspace agree: every function crate is deployed, and every
//! deployed function is built from a crate of the workspace.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root")
}

#[test]
fn every_function_is_in_the_template_and_back() {
    let template = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    let deployed: BTreeSet<String> = template
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Binary:").map(|b| b.trim().to_owned()))
        .collect();
    let mut crates = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("functions")).unwrap() {
        let manifest = std::fs::read_to_string(entry.unwrap().path().join("Cargo.toml")).unwrap();
        let bin = manifest
            .split("[[bin]]")
            .nth(1)
            .and_then(|b| {
                b.lines()
                    .find_map(|l| l.trim().strip_prefix("name = ").map(|n| n.trim_matches('"').to_owned()))
            })
            .expect("every function crate declares its binary");
        crates.insert(bin);
    }
    assert!(!crates.is_empty());
    assert_eq!(deployed, crates, "template binaries vs function crates");
}
