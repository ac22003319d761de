//! Reading document images with the default vision model (`imageOcr`): each image gets a
//! description with any text it shows, stored as the image's `ocrText`.

use base64::Engine;

use crate::models::client::{ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing, ModelHandle};
use crate::models::ModelType;
use crate::rag::document::ExtractedImage;
use crate::AppState;

const PROMPT: &str =
    "Transcribe all text visible in this image, then describe what the image shows in one or two sentences.";

/// The CHAT model marked `defaultVisionModel`, else any enabled GLOBAL one with `vision`, of an
/// enabled provider: the marked one of a provider switched off was taken, found unusable, and
/// no picture was read, though another model could read them.
async fn vision_model(state: &AppState) -> Option<ModelHandle> {
    let id: Option<i64> = sqlx::query_scalar(
        "SELECT c.id FROM model_configs c JOIN model_providers p ON p.id = c.provider_id
         WHERE c.model_type = 'CHAT' AND c.is_enabled AND p.is_enabled AND c.scope = 'GLOBAL'
           AND (c.config_json->>'defaultVisionModel' = 'true' OR c.config_json->'capabilities' ? 'vision')
         ORDER BY (c.config_json->>'defaultVisionModel' = 'true') DESC NULLS LAST, c.id LIMIT 1",
    )
    .fetch_optional(state.db())
    .await
    .ok()
    .flatten();
    gateway::load(state, id?, ModelType::Chat).await.ok()
}

/// One text per image (None where it could not be read). A missing vision model or a failed
/// call never fails the document: the images are still saved.
pub async fn read_images(state: &AppState, user_id: i64, images: &[ExtractedImage]) -> Vec<Option<String>> {
    let mut out = vec![None; images.len()];
    if images.is_empty() {
        return out;
    }
    let Some(model) = vision_model(state).await else {
        tracing::warn!("imageOcr is on but no vision model is configured (defaultVisionModel or capabilities: vision)");
        return out;
    };
    for (slot, image) in out.iter_mut().zip(images) {
        let uri = format!(
            "data:{};base64,{}",
            image.mime,
            base64::engine::general_purpose::STANDARD.encode(&image.bytes)
        );
        let req = ChatRequest {
            messages: vec![ChatMessage::user_with_images(PROMPT, vec![uri])],
            max_tokens: Some(400),
            ..Default::default()
        };
        match gateway::chat(state, &model, Billing::User(user_id), "image-ocr", &req).await {
            Ok(answer) if !answer.content.trim().is_empty() => *slot = Some(answer.content.trim().to_owned()),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, index = image.index, "reading a document image failed"),
        }
    }
    out
}
