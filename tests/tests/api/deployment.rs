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

/// One `Type: Api` event of the template.
struct Route {
    path: String,
    method: String,
    binary: String,
    streamed: bool,
}

fn template_routes() -> Vec<Route> {
    let template = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    let mut routes: Vec<Route> = Vec::new();
    let mut binary = String::new();
    for line in template.lines() {
        let trimmed = line.trim();
        if line.starts_with("  ") && !line.starts_with("   ") && trimmed.ends_with(':') {
            binary.clear();
        } else if let Some(b) = trimmed.strip_prefix("Binary:") {
            binary = b.trim().to_owned();
        } else if let Some(p) = trimmed.strip_prefix("Path: /") {
            routes.push(Route {
                path: format!("/{p}"),
                method: String::new(),
                binary: binary.clone(),
                streamed: false,
            });
        } else if let (Some(m), Some(r)) = (trimmed.strip_prefix("Method:"), routes.last_mut()) {
            r.method = m.trim().to_ascii_lowercase();
        } else if let (Some("RESPONSE_STREAM"), Some(r)) = (
            trimmed.strip_prefix("ResponseTransferMode:").map(str::trim),
            routes.last_mut(),
        ) {
            r.streamed = true;
        }
    }
    routes
}

/// The event API Gateway picks for `method path`: at each segment a literal child before a
/// `{name}` child before a greedy `{name+}` one, without backtracking.
fn resolve<'a>(routes: &'a [Route], method: &str, path: &str) -> Option<&'a Route> {
    let split = |p: &'a str| p.trim_matches('/').split('/').collect::<Vec<_>>();
    let resources: Vec<(Vec<&str>, &Route)> = routes.iter().map(|r| (split(&r.path), r)).collect();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut prefix: Vec<&str> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let children: Vec<&str> = resources
            .iter()
            .filter(|(p, _)| p.len() > i && p[..i] == prefix[..])
            .map(|(p, _)| p[i])
            .collect();
        let next = children
            .iter()
            .find(|c| *c == seg)
            .or_else(|| children.iter().find(|c| c.starts_with('{') && !c.ends_with("+}")));
        match next {
            Some(next) => prefix.push(next),
            None => {
                prefix.push(children.iter().find(|c| c.ends_with("+}"))?);
                break;
            }
        }
    }
    resources
        .iter()
        .find(|(p, r)| p[..] == prefix[..] && (r.method == "any" || r.method == method))
        .map(|(_, r)| *r)
}

/// Every route the service serves reaches, through the one REST API, a function that serves
/// it: the streamed ones their streaming function in STREAM mode, the others a buffered one.
#[test]
fn every_route_reaches_its_function_through_the_one_api() {
    const STREAMED: [(&str, &str); 6] = [
        ("/rag/qa/stream", "qa-stream"),
        ("/open-api/rag/qa/stream", "qa-stream"),
        ("/agent/{agentId}/chat", "agent-chat"),
        ("/agent/create/stream", "agent-chat"),
        ("/openapi/v1/agent/chat", "external-chat"),
        ("/openapi/v1/agent/chat/sync", "external-chat"),
    ];
    let routes = template_routes();
    let (_, spec) = local_server::api().split_for_parts();
    let spec = serde_json::to_value(&spec).unwrap();
    let paths = spec["paths"].as_object().expect("paths");
    assert!(paths.len() > 50);
    for (path, item) in paths {
        // A value in every path parameter, as a client would send.
        let concrete: String = path
            .split('/')
            .map(|s| if s.starts_with('{') { "7" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        let methods =
            item.as_object().unwrap().keys().filter(|k| {
                ["get", "put", "post", "delete", "options", "head", "patch", "trace"].contains(&k.as_str())
            });
        for method in methods {
            let route = resolve(&routes, method, &format!("/api{concrete}"))
                .unwrap_or_else(|| panic!("{method} /api{path} reaches no function of the template"));
            let streamed = STREAMED.iter().find(|(p, _)| p == path);
            match streamed {
                Some((_, binary)) => assert!(
                    route.streamed && route.binary == *binary,
                    "{method} /api{path} must stream from {binary}, goes to {} ({})",
                    route.binary,
                    route.path
                ),
                None => assert!(
                    !route.streamed && !STREAMED.iter().any(|(_, b)| *b == route.binary),
                    "{method} /api{path} goes to the streaming function {} ({})",
                    route.binary,
                    route.path
                ),
            }
        }
    }
}
