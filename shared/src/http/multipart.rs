//! Reads a multipart form into named text fields and files, with a size limit.

use std::collections::HashMap;

use axum::extract::multipart::{Multipart, MultipartError};
use axum::http::StatusCode;

use crate::domain::UploadedFile;
use crate::AppError;

#[derive(Debug, Default)]
pub struct Form {
    pub texts: HashMap<String, String>,
    pub files: Vec<UploadedFile>,
}

impl Form {
    pub fn text(&self, name: &str) -> Option<String> {
        self.texts
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// An optional whole-number field, naming it when it is not one.
    pub fn number(&self, name: &str) -> Result<Option<i64>, AppError> {
        self.text(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| AppError::validation(format!("{name} must be a whole number")))
            })
            .transpose()
    }

    pub fn take_files(&mut self, field: &str) -> Vec<UploadedFile> {
        let (matching, rest) = std::mem::take(&mut self.files)
            .into_iter()
            .partition(|f| f.field == field);
        self.files = rest;
        matching
    }
}

/// A multipart body; anything else is a 400 that says what was expected.
pub struct MultipartBody(pub Multipart);

impl<S: Send + Sync> axum::extract::FromRequest<S> for MultipartBody {
    type Rejection = AppError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, AppError> {
        Multipart::from_request(req, state)
            .await
            .map(MultipartBody)
            .map_err(|e| AppError::validation(format!("request body must be multipart/form-data: {}", e.body_text())))
    }
}

fn multipart_error(err: MultipartError, limit: u64) -> AppError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::PayloadTooLarge(format!("upload exceeds the limit of {limit} bytes"))
    } else {
        AppError::validation(format!("malformed multipart body: {}", err.body_text()))
    }
}

/// How much of a form is read before it is refused. Every bound is checked while the body
/// streams in, so a request never makes the service hold more than these in memory.
#[derive(Debug, Clone, Copy)]
pub struct FormLimits {
    /// Any one file; above it, 413.
    pub max_file_bytes: u64,
    /// Files in the form; one more is a 400 before its bytes are read.
    pub max_files: usize,
}

impl FormLimits {
    pub fn one_file(max_file_bytes: u64) -> Self {
        Self {
            max_file_bytes,
            max_files: 1,
        }
    }
}

/// A text field's size: ids, options and names, never content.
const MAX_TEXT_FIELD_BYTES: usize = 64 * 1024;
const MAX_TEXT_FIELDS: usize = 64;

/// Collects the form within `limits`.
pub async fn read_form(MultipartBody(mut multipart): MultipartBody, limits: FormLimits) -> Result<Form, AppError> {
    let max_file_bytes = limits.max_file_bytes;
    let mut form = Form::default();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(e, max_file_bytes))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        match field.file_name().map(str::to_owned) {
            Some(file_name) if file_name.contains('\0') => {
                return Err(AppError::Validation(format!(
                    "{name}: file name must not contain NUL characters"
                )));
            }
            Some(_) if form.files.len() >= limits.max_files => {
                return Err(AppError::validation(match limits.max_files {
                    1 => format!("{name}: send one file per upload"),
                    n => format!("{name}: at most {n} files per upload"),
                }));
            }
            Some(file_name) => {
                // Read chunk by chunk so an oversized file is refused without being buffered.
                let mut buf = bytes::BytesMut::new();
                let mut field = field;
                while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(e, max_file_bytes))? {
                    if (buf.len() + chunk.len()) as u64 > max_file_bytes {
                        return Err(AppError::PayloadTooLarge(format!(
                            "{name}: file {file_name:?} exceeds the limit of {max_file_bytes} bytes"
                        )));
                    }
                    buf.extend_from_slice(&chunk);
                }
                form.files.push(UploadedFile {
                    field: name,
                    file_name,
                    bytes: buf.freeze(),
                });
            }
            None => {
                if form.texts.len() >= MAX_TEXT_FIELDS {
                    return Err(AppError::validation("too many form fields"));
                }
                let mut raw = Vec::new();
                let mut field = field;
                while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(e, max_file_bytes))? {
                    if raw.len() + chunk.len() > MAX_TEXT_FIELD_BYTES {
                        return Err(AppError::validation(format!(
                            "{name}: a form field may hold at most {MAX_TEXT_FIELD_BYTES} bytes"
                        )));
                    }
                    raw.extend_from_slice(&chunk);
                }
                let text =
                    String::from_utf8(raw).map_err(|_| AppError::validation(format!("{name}: must be UTF-8 text")))?;
                if text.contains('\0') {
                    return Err(AppError::Validation(format!("{name}: must not contain NUL characters")));
                }
                form.texts.insert(name, text);
            }
        }
    }
    Ok(form)
}
