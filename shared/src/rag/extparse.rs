//! The `extparse` engine: documents converted by a Docling-serve compatible endpoint
//! (`POST /v1/convert/file`, answer in Markdown), for OCR of scanned PDFs and table structure.

use std::time::Duration;

use serde_json::Value;

use crate::rag::bases::ParseSettings;
use crate::rag::document::ParsedDocument;
use crate::rag::parse::{self, ParseOptions, MAX_UNPACKED_BYTES as MAX_CONVERTED_BYTES};
use crate::text::excerpt;
use crate::upstream::{read_body, BodyError};
use crate::AppState;

/// Conversion can take minutes for long scanned documents.
const TIMEOUT: Duration = Duration::from_secs(600);

/// How much of the converter's own error text a failed document keeps.
const MAX_ERROR_CHARS: usize = 500;

/// Why a conversion failed: `Retry` for the endpoint being unreachable or overloaded,
/// `Fail` for an answer that will not change.
pub enum ExtparseError {
    Retry(String),
    Fail(String),
}

/// How the converter hands over images: as asked, else embedded in the Markdown as `data:`
/// URIs when images are to be kept (the only form the Markdown parser takes them from), else
/// as placeholders.
fn export_mode(settings: &ParseSettings, options: &ParseOptions) -> String {
    match (&settings.image_export_mode, options.save_images) {
        (Some(mode), _) => mode.clone(),
        (None, true) => "embedded".into(),
        (None, false) => "placeholder".into(),
    }
}

pub async fn convert(
    state: &AppState,
    settings: &ParseSettings,
    file_name: &str,
    bytes: Vec<u8>,
    options: &ParseOptions,
) -> Result<ParsedDocument, ExtparseError> {
    let Some(base) = state.config().extparse_url.clone() else {
        return Err(ExtparseError::Fail(
            "the extparse engine needs EXTPARSE_URL (a Docling-serve compatible endpoint); switch parseEngine to default".into(),
        ));
    };
    let part = reqwest::multipart::Part::bytes(bytes).file_name(file_name.to_owned());
    let mut form = reqwest::multipart::Form::new()
        .part("files", part)
        .text("to_formats", "md")
        .text("do_ocr", settings.do_ocr.to_string())
        .text("do_table_structure", settings.do_table_structure.to_string())
        .text("image_export_mode", export_mode(settings, options));
    for lang in &settings.ocr_lang {
        form = form.text("ocr_lang", lang.clone());
    }
    let url = format!("{base}/v1/convert/file");
    let resp = state
        .models()
        .http()
        .post(&url)
        .multipart(form)
        .timeout(TIMEOUT)
        .send()
        .await
        .map_err(|e| ExtparseError::Retry(format!("the extparse endpoint cannot be reached: {}", e.without_url())))?;
    let status = resp.status();
    if status.is_server_error() || status.as_u16() == 429 {
        return Err(ExtparseError::Retry(format!(
            "the extparse endpoint answered HTTP {status}"
        )));
    }
    // The answer is the converted document, so it is held to what a document may unpack to.
    let bytes = read_body(resp, MAX_CONVERTED_BYTES).await.map_err(|e| match e {
        BodyError::TooLarge(_) => ExtparseError::Fail(format!("the extparse answer is too large to index: {e}")),
        BodyError::Network(e) => ExtparseError::Retry(format!("reading the extparse answer failed: {e}")),
    })?;
    let body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ExtparseError::Retry(format!("the extparse answer is not JSON: {e}")))?;
    if !status.is_success()
        || body["status"]
            .as_str()
            .is_some_and(|s| s != "success" && s != "partial_success")
    {
        // The converter's words are shown to the base's owner: one line, bounded.
        let errors = body
            .get("errors")
            .or_else(|| body.get("detail"))
            .map(|e| excerpt(&e.to_string(), MAX_ERROR_CHARS))
            .unwrap_or_default();
        return Err(ExtparseError::Fail(format!(
            "the extparse endpoint could not convert the file (HTTP {status}): {errors}"
        )));
    }
    let markdown = body
        .pointer("/document/md_content")
        .and_then(Value::as_str)
        .ok_or_else(|| ExtparseError::Fail("the extparse answer has no document.md_content".into()))?;
    parse::parse("converted.md", markdown.as_bytes(), options).map_err(|e| ExtparseError::Fail(e.to_string()))
}
