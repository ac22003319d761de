//! The four settings sections of a knowledge base, stored as JSON beside it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::rag::chunk::{ChunkMode, ChunkParams};
use crate::rag::search::fusion;
use crate::{AppError, AppResult};

/// How documents are cut into chunks.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ChunkSettings {
    /// default, delimiter, regex or smart.
    pub mode: String,
    pub max_chunk_tokens: i64,
    pub chunk_overlap: i64,
    pub custom_delimiter: Option<String>,
    pub chunk_regex: Option<String>,
    /// CHAT model proposing boundaries in smart mode.
    pub chunk_model_id: Option<i64>,
    pub merge_short_segments: bool,
    pub image_ocr: bool,
}

impl Default for ChunkSettings {
    fn default() -> Self {
        Self {
            mode: "default".into(),
            max_chunk_tokens: 512,
            chunk_overlap: 64,
            custom_delimiter: None,
            chunk_regex: None,
            chunk_model_id: None,
            merge_short_segments: true,
            image_ocr: false,
        }
    }
}

impl ChunkSettings {
    /// A new `maxChunkTokens` sent without `chunkOverlap` brings the overlap below half of it
    /// when it was not: the default of 64 refused every documented size under 129, naming a
    /// field the caller never sent.
    /// The mode as the flat `chunkMode` takes it (any case): as a section's `mode`, "Smart" was
    /// refused where the flat field took it.
    pub fn normalize(&mut self) {
        self.mode = self.mode.trim().to_ascii_lowercase();
    }

    pub fn fit_overlap(&mut self, overlap_sent: bool) {
        if !overlap_sent && self.chunk_overlap >= self.max_chunk_tokens / 2 {
            self.chunk_overlap = (self.max_chunk_tokens / 8).clamp(0, 64);
        }
    }

    /// The chunker's parameters; smart mode cuts with the default rules until a model
    /// proposes boundaries.
    pub fn params(&self) -> AppResult<ChunkParams> {
        let field = |name: &str, v: i64| {
            usize::try_from(v).map_err(|_| AppError::validation(format!("{name} must not be negative")))
        };
        let mode = match self.mode.as_str() {
            "default" | "smart" => ChunkMode::Default,
            "delimiter" => ChunkMode::Delimiter(
                self.custom_delimiter
                    .clone()
                    .filter(|d| !d.is_empty())
                    .ok_or_else(|| AppError::validation("customDelimiter is required when chunkMode is delimiter"))?,
            ),
            "regex" => ChunkMode::Regex(
                self.chunk_regex
                    .clone()
                    .filter(|r| !r.is_empty())
                    .ok_or_else(|| AppError::validation("chunkRegex is required when chunkMode is regex"))?,
            ),
            _ => {
                return Err(AppError::validation(
                    "chunkMode must be default, delimiter, regex or smart",
                ))
            }
        };
        // Kept with the base whatever the mode, and applied to every document.
        crate::validate::at_most("customDelimiter", self.custom_delimiter.as_deref(), MAX_PATTERN_CHARS)?;
        crate::validate::at_most("chunkRegex", self.chunk_regex.as_deref(), MAX_PATTERN_CHARS)?;
        let params = ChunkParams {
            mode,
            max_tokens: field("maxChunkTokens", self.max_chunk_tokens)?,
            overlap: field("chunkOverlap", self.chunk_overlap)?,
            merge_short: self.merge_short_segments,
        };
        crate::rag::chunk::validate(&params).map_err(|e| AppError::validation(e.to_string()))?;
        Ok(params)
    }
}

/// How documents are read.
/// A custom delimiter or chunk pattern: a separator, not a text.
const MAX_PATTERN_CHARS: usize = 200;
/// OCR languages of one base.
const MAX_OCR_LANGS: usize = 10;
/// The Q&A prompt template, sent with every answer.
const MAX_PROMPT_CHARS: usize = 8000;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ParseSettings {
    /// default or extparse.
    pub engine: String,
    pub do_ocr: bool,
    pub do_table_structure: bool,
    /// placeholder, embedded or referenced (extparse).
    pub image_export_mode: Option<String>,
    pub ocr_lang: Vec<String>,
    pub save_images: bool,
    pub max_image_count: i64,
    pub max_image_bytes: i64,
}

impl Default for ParseSettings {
    fn default() -> Self {
        Self {
            engine: "default".into(),
            do_ocr: false,
            do_table_structure: true,
            image_export_mode: None,
            ocr_lang: vec![],
            save_images: false,
            max_image_count: 50,
            max_image_bytes: 10 * 1024 * 1024,
        }
    }
}

impl ParseSettings {
    /// The engine and image mode in any case, as the flat `parseEngine` takes it.
    pub fn normalize(&mut self) {
        self.engine = self.engine.trim().to_ascii_lowercase();
        if let Some(mode) = &mut self.image_export_mode {
            *mode = mode.trim().to_ascii_lowercase();
        }
    }

    pub fn check(&self) -> AppResult<()> {
        if !matches!(self.engine.as_str(), "default" | "extparse") {
            return Err(AppError::validation("parseEngine must be default or extparse"));
        }
        if let Some(m) = &self.image_export_mode {
            if !matches!(m.as_str(), "placeholder" | "embedded" | "referenced") {
                return Err(AppError::validation(
                    "parseParams.imageExportMode must be placeholder, embedded or referenced",
                ));
            }
        }
        if self.ocr_lang.len() > MAX_OCR_LANGS {
            return Err(AppError::validation(format!(
                "parseParams.ocrLang may hold at most {MAX_OCR_LANGS} languages"
            )));
        }
        for (i, lang) in self.ocr_lang.iter().enumerate() {
            let ok =
                (2..=16).contains(&lang.len()) && lang.chars().all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-');
            if !ok {
                return Err(AppError::validation(format!(
                    "parseParams.ocrLang[{i}] must be a language code such as en or ch_sim (2-16 letters, _ or -)"
                )));
            }
        }
        crate::validate::range("parseParams.maxImageCount", self.max_image_count, 0, 1000)?;
        crate::validate::range("parseParams.maxImageBytes", self.max_image_bytes, 0, 100 * 1024 * 1024)?;
        Ok(())
    }
}

/// How the base is searched.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SearchSettings {
    pub result_count: i64,
    pub rerank_enabled: bool,
    pub rerank_model_id: Option<i64>,
    pub enter_rerank_count: i64,
    pub threshold_enabled: bool,
    pub threshold: f64,
    /// RRF or WEIGHTED_SUM.
    pub fusion_strategy: String,
    pub rrf_k: i64,
    pub dense_weight: f64,
    pub question_rewrite: bool,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            result_count: 5,
            rerank_enabled: false,
            rerank_model_id: None,
            enter_rerank_count: 20,
            threshold_enabled: false,
            threshold: 0.0,
            fusion_strategy: fusion::DEFAULT_STRATEGY.into(),
            rrf_k: 60,
            dense_weight: fusion::DEFAULT_DENSE_WEIGHT,
            question_rewrite: false,
        }
    }
}

impl SearchSettings {
    pub fn check(&self) -> AppResult<()> {
        use crate::validate::range;
        range("searchParams.resultCount", self.result_count, 1, 100)?;
        // Search hands a reranker at most 200 candidates (`search::retrieve`); more was accepted
        // and silently not used.
        range("searchParams.enterRerankCount", self.enter_rerank_count, 1, 200)?;
        range("searchParams.rrfK", self.rrf_k, 1, 1000)?;
        // Without a reranker, search would pass over reranking without a word; with fewer
        // candidates than results, it would return fewer than asked.
        if self.rerank_enabled && self.rerank_model_id.is_none() {
            return Err(AppError::validation(
                "searchParams.rerankModelId is required when searchParams.rerankEnabled is true",
            ));
        }
        if self.rerank_enabled && self.enter_rerank_count < self.result_count {
            return Err(AppError::validation(
                "searchParams.enterRerankCount must be at least searchParams.resultCount when reranking",
            ));
        }
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(AppError::validation("searchParams.threshold must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.dense_weight) {
            return Err(AppError::validation("searchParams.denseWeight must be between 0 and 1"));
        }
        if !matches!(self.fusion_strategy.as_str(), "RRF" | "WEIGHTED_SUM") {
            return Err(AppError::validation(
                "searchParams.fusionStrategy must be RRF or WEIGHTED_SUM",
            ));
        }
        Ok(())
    }
}

/// How answers are generated (Q&A).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ModelSettings {
    /// CHAT model; the default CHAT model when empty.
    pub model_id: Option<i64>,
    pub nearby_slice_count: i64,
    /// Template with {context} and {query}.
    pub prompt: Option<String>,
}

impl ModelSettings {
    pub fn check(&self) -> AppResult<()> {
        crate::validate::range("modelParams.nearbySliceCount", self.nearby_slice_count, 0, 10)?;
        crate::validate::at_most("modelParams.prompt", self.prompt.as_deref(), MAX_PROMPT_CHARS)?;
        if let Some(p) = &self.prompt {
            if !p.contains("{context}") || !p.contains("{query}") {
                return Err(AppError::validation(
                    "modelParams.prompt must contain {context} and {query}",
                ));
            }
        }
        Ok(())
    }
}

/// The checks above name fields as the flat create and update requests write them
/// (`chunkMode`, `maxChunkTokens`, `parseEngine` ...). `PUT /rag/{id}/config` sends the same
/// settings as sections (`chunkParams.mode` ...): its refusals name the fields as that request
/// wrote them.
pub fn named_in_section(section: &str, e: AppError) -> AppError {
    const IN_SECTIONS: [(&str, &str); 6] = [
        ("chunkMode", "mode"),
        ("maxChunkTokens", "maxChunkTokens"),
        ("chunkOverlap", "chunkOverlap"),
        ("customDelimiter", "customDelimiter"),
        ("chunkRegex", "chunkRegex"),
        ("parseEngine", "engine"),
    ];
    match e {
        AppError::Validation(message) => AppError::Validation(IN_SECTIONS.iter().fold(message, |m, (flat, field)| {
            m.replace(flat, &format!("{section}.{field}"))
        })),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkSettings;

    fn sized(max_chunk_tokens: i64, chunk_overlap: i64) -> ChunkSettings {
        ChunkSettings {
            max_chunk_tokens,
            chunk_overlap,
            ..ChunkSettings::default()
        }
    }

    #[test]
    fn a_smaller_size_sent_alone_brings_the_overlap_under_half_of_it() {
        let mut small = sized(100, 64);
        small.fit_overlap(false);
        assert_eq!(small.chunk_overlap, 12);
        assert!(small.params().is_ok());
        let mut smallest = sized(16, 64);
        smallest.fit_overlap(false);
        assert_eq!(smallest.chunk_overlap, 2);
        assert!(smallest.params().is_ok());
        // A valid overlap stays; one sent is the caller's and is judged as sent.
        let mut kept = sized(1024, 64);
        kept.fit_overlap(false);
        assert_eq!(kept.chunk_overlap, 64);
        let mut sent = sized(100, 64);
        sent.fit_overlap(true);
        assert_eq!(sent.chunk_overlap, 64);
        assert!(sent.params().is_err());
    }
}
