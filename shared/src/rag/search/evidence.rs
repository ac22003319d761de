//! Image evidence for search results: images whose OCR text or caption contains query words
//! (DIRECT_MATCH), and images on the same page or under the same heading as a matched chunk
//! (CONTEXT_MATCH).

use super::{ImageEvidence, SearchResult};
use crate::rag::documents::repo::ImageRow;
use crate::rag::segment;
use crate::AppState;

/// Images per result, at most.
const PER_RESULT: usize = 3;

/// Attaches evidence from `images` (those of the results' documents) to `results` in place.
pub fn attach(state: &AppState, query: &str, images: &[ImageRow], results: &mut [SearchResult]) {
    if images.is_empty() {
        return;
    }
    // Each word once: a repeated word counted twice in the whole, so an image holding every
    // word of "owl owl" scored 0.5, a context match's score.
    let terms = segment::distinct(query);
    // Which words each image's text holds depends on the image alone: segmented once per
    // search, not once per result of its document (jieba on every OCR text, for each hit).
    let direct: Vec<Direct> = images.iter().map(|i| direct_match(i, &terms)).collect();
    for result in results.iter_mut() {
        let page = result.metadata["page"].as_i64().map(|p| p as i32);
        let title = result.metadata["title"].as_str().map(str::to_owned);
        let mut found: Vec<ImageEvidence> = images
            .iter()
            .zip(&direct)
            .filter(|(i, _)| i.document_id == result.document_id)
            .filter_map(|(i, d)| evidence(state, i, d, terms.len(), result.chunk_id, page, title.as_deref()))
            .collect();
        found.sort_by(|a, b| b.match_score.total_cmp(&a.match_score));
        found.truncate(PER_RESULT);
        result.images = found;
    }
}

/// The query's words an image's text holds, and the fields holding them.
#[derive(Default)]
struct Direct {
    terms: Vec<String>,
    fields: Vec<String>,
}

fn direct_match(i: &ImageRow, terms: &[String]) -> Direct {
    let fields = [
        ("ocrText", i.ocr_text.as_deref()),
        ("caption", i.caption.as_deref()),
        ("figureTitle", i.figure_title.as_deref()),
    ];
    let mut found = Direct::default();
    for (name, text) in fields {
        let Some(text) = text else { continue };
        let words: std::collections::HashSet<String> = segment::tokens(text).into_iter().collect();
        let hits: Vec<&String> = terms.iter().filter(|t| words.contains(*t)).collect();
        if !hits.is_empty() {
            found.fields.push(name.to_owned());
            for h in hits {
                if !found.terms.contains(h) {
                    found.terms.push(h.clone());
                }
            }
        }
    }
    found
}

fn evidence(
    state: &AppState,
    i: &ImageRow,
    direct: &Direct,
    term_count: usize,
    chunk: i64,
    page: Option<i32>,
    title: Option<&str>,
) -> Option<ImageEvidence> {
    let (matched_terms, matched_fields) = (direct.terms.clone(), direct.fields.clone());
    let (match_type, match_score, match_reason) = if !matched_terms.is_empty() {
        let score = matched_terms.len() as f64 / term_count.max(1) as f64;
        (
            "DIRECT_MATCH",
            score,
            format!(
                "the image's {} contains {}",
                matched_fields.join(" and "),
                matched_terms.join(", ")
            ),
        )
    } else if i.chunk_id == Some(chunk)
        || (page.is_some() && i.source_page == page)
        || (title.is_some() && i.section_title.as_deref() == title)
    {
        let reason = if page.is_some() && i.source_page == page {
            "on the same page as the matched text"
        } else {
            "under the same heading as the matched text"
        };
        ("CONTEXT_MATCH", 0.5, reason.to_owned())
    } else {
        return None;
    };
    Some(ImageEvidence {
        id: i.id,
        rag_id: i.rag_id,
        document_id: i.document_id,
        chunk_id: i.chunk_id,
        resource_id: i.resource_id,
        image_index: i.image_index,
        image_url: state.link(&format!("/document/image/{}", i.id)),
        source_page: i.source_page,
        document_name: i.document_name.clone(),
        caption: i.caption.clone(),
        figure_title: i.figure_title.clone(),
        ocr_text: i.ocr_text.clone(),
        match_type: match_type.to_owned(),
        match_score,
        match_reason,
        matched_terms,
        matched_fields,
    })
}
