//! Finishing the OpenAPI document: the security schemes, and the error answers every route can
//! give whether or not its handler lists them, so fuzzers and client generators see the truth.

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::openapi::{OpenApi, ResponseBuilder};

pub fn finish(openapi: &mut OpenApi) {
    add_security_schemes(openapi);
    for item in openapi.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            add_common_errors(operation);
        }
    }
}

fn add_common_errors(operation: &mut Operation) {
    let secured = operation.security.as_ref().is_some_and(|s| !s.is_empty());
    let has_body = operation.request_body.is_some();
    let common = [
        (
            true,
            "400",
            "Bad request: a malformed path, query or body, or a field that breaks a rule (the message names it)",
        ),
        (secured, "401", "Missing, expired or invalid credentials"),
        (secured, "403", "The caller may not do this"),
        (
            true,
            "404",
            "No such resource (named in the path or referenced by the request), or not visible to the caller",
        ),
        (has_body, "413", "Request body too large"),
        (true, "429", "Too many requests; see Retry-After"),
        (
            true,
            "503",
            "The database or file storage is unreachable; nothing was changed",
        ),
    ];
    for (applies, status, description) in common {
        if applies {
            operation
                .responses
                .responses
                .entry(status.to_owned())
                .or_insert_with(|| ResponseBuilder::new().description(description).build().into());
        }
    }
}

fn add_security_schemes(openapi: &mut OpenApi) {
    let components = openapi.components.get_or_insert_with(Default::default);
    for (name, header) in [
        ("svc_auth", "Svc-Auth"),
        ("svc_app_id", "Svc-App-Id"),
        ("svc_token", "Svc-Token"),
    ] {
        components.add_security_scheme(name, SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(header))));
    }
}
