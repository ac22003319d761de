//! AI drafts of `SKILL.md`: generated from a requirement or optimised from the current
//! content by the default CHAT model (metered and charged to the caller). Drafts are never
//! saved. Without a usable model (none, disabled, quota used up, or the call failed)
//! generation falls back to a rule-based template and optimisation keeps the current content,
//! each saying why in `warnings`.

use super::front_matter::{self, FrontMatter};
use super::{service, storage, Draft, GenerateRequest, OptimizeRequest};
use crate::domain::CurrentUser;
use crate::models::client::{ChatMessage, ChatRequest};
use crate::models::gateway::{self, Billing};
use crate::models::ModelType;
use crate::{validate, AppError, AppResult, AppState};

const MAX_REQUIREMENT_CHARS: usize = 4000;

const SYSTEM_PROMPT: &str = "You write Agent Skills. A skill is a folder whose main file SKILL.md \
starts with YAML front matter between '---' lines holding 'name' (at most 64 characters, lowercase \
words joined by hyphens) and 'description' (one or two sentences: what the skill does and when to \
use it), followed by clear Markdown instructions: when to apply the skill, step-by-step procedure, \
examples and edge cases. Answer with the complete SKILL.md only, without code fences or comments.";

fn requirement(value: Option<String>) -> AppResult<String> {
    let text = validate::required("requirement", value)?;
    validate::length("requirement", &text, 1, MAX_REQUIREMENT_CHARS)?;
    Ok(text)
}

/// A name and description a skill can be saved with, checked before the paid call: a draft
/// carrying others was refused when saved.
fn within_limits(meta: &FrontMatter) -> AppResult<()> {
    front_matter::check(&meta.name, &meta.description).map_err(AppError::Validation)
}

fn instruction_line(instruction: Option<&str>) -> String {
    instruction
        .map(|i| format!("\nAdditional instruction: {i}"))
        .unwrap_or_default()
}

pub async fn generate(state: &AppState, user: &CurrentUser, req: GenerateRequest) -> AppResult<Draft> {
    let need = requirement(req.requirement)?;
    let instruction = validate::optional(req.optimize_instruction);
    let meta = FrontMatter {
        name: validate::optional(req.name).unwrap_or_else(|| slug(&need)),
        description: validate::optional(req.description).unwrap_or_else(|| summary(&need)),
    };
    within_limits(&meta)?;
    let prompt = format!(
        "Write a skill for this requirement:\n{need}\n\nPreferred name: {}\nPreferred description: {}{}",
        meta.name,
        meta.description,
        instruction_line(instruction.as_deref())
    );
    Ok(match ask(state, user, prompt).await? {
        Ok(reply) => from_reply(reply, meta),
        Err(reason) => Draft {
            skill_content: front_matter::document(&meta, &template_body(&need)),
            name: meta.name,
            description: meta.description,
            warnings: vec![format!(
                "AI generation is unavailable ({reason}); a rule-based template was returned instead"
            )],
        },
    })
}

pub async fn optimize(state: &AppState, user: &CurrentUser, id: i64, req: OptimizeRequest) -> AppResult<Draft> {
    let need = requirement(req.requirement)?;
    let (row, package) = storage::current(state, id).await?;
    let current = match validate::optional(req.current_content) {
        Some(text) => text,
        None => service::skill_md_text(&package)?,
    };
    let declared = front_matter::parse(&current).ok();
    let meta = FrontMatter {
        name: validate::optional(req.name)
            .or_else(|| declared.as_ref().map(|m| m.name.clone()))
            .unwrap_or_else(|| row.name.clone()),
        description: validate::optional(req.description)
            .or_else(|| declared.map(|m| m.description))
            .unwrap_or_else(|| row.description.clone()),
    };
    within_limits(&meta)?;
    let prompt = format!(
        "Improve this SKILL.md according to the requirement, keeping what already works.\n\
         Requirement: {need}{}\n\nCurrent SKILL.md:\n{current}",
        instruction_line(validate::optional(req.optimize_instruction).as_deref())
    );
    Ok(match ask(state, user, prompt).await? {
        Ok(reply) => from_reply(reply, meta),
        Err(reason) => Draft {
            name: meta.name,
            description: meta.description,
            skill_content: current,
            warnings: vec![format!(
                "AI optimization is unavailable ({reason}); the current content was kept"
            )],
        },
    })
}

/// A model's answer to a draft request.
struct Reply {
    text: String,
    /// It stopped at its token limit (finish reason `length`): the draft is cut short.
    cut: bool,
}

/// One call to the default CHAT model. `Ok(Err(reason))` is a reason to fall back (no usable
/// model, no quota, a failed call), shown in the warning; a failure of the service itself (its
/// database) is passed on as one, not folded into a template a client would take for an
/// answer.
async fn ask(state: &AppState, user: &CurrentUser, prompt: String) -> AppResult<Result<Reply, String>> {
    let fallback = |e: AppError| match e.is_server_side() {
        true => Err(e),
        false => Ok(Err(e.told())),
    };
    let model = match gateway::default_model(state, ModelType::Chat).await {
        Ok(model) => model,
        Err(e) => return fallback(e),
    };
    let req = ChatRequest {
        messages: vec![ChatMessage::system(SYSTEM_PROMPT), ChatMessage::user(prompt)],
        tools: vec![],
        temperature: None,
        max_tokens: None,
    };
    let reply = match gateway::chat(state, &model, Billing::of(user), "skill-draft", &req).await {
        Ok(reply) => reply,
        Err(e) => return fallback(AppError::from(e)),
    };
    let text = reply.content.trim().to_owned();
    if text.is_empty() {
        return Ok(Err("the model returned an empty answer".to_owned()));
    }
    Ok(Ok(Reply {
        text,
        cut: reply.finish_reason == "length",
    }))
}

/// The draft in a model's answer. An answer without valid front matter is kept as the
/// instructions, under front matter built from `meta`. One cut at its token limit says so:
/// saved as it is, the skill would lose its end without anyone knowing.
fn from_reply(reply: Reply, meta: FrontMatter) -> Draft {
    let mut draft = draft_of(&reply.text, meta);
    if reply.cut {
        draft.warnings.push(
            "the model's answer was cut off at its token limit (the quota left or the model's maxTokens); \
             the end of the draft is missing"
                .to_owned(),
        );
    }
    draft
}

fn draft_of(reply: &str, meta: FrontMatter) -> Draft {
    let text = strip_fence(reply);
    match front_matter::parse(text) {
        Ok(declared) => Draft {
            name: declared.name,
            description: declared.description,
            skill_content: format!("{}\n", text.trim_end()),
            warnings: vec![],
        },
        Err(why) => Draft {
            skill_content: front_matter::document(&meta, text),
            name: meta.name,
            description: meta.description,
            warnings: vec![format!(
                "the model's answer had no usable front matter ({why}); name and description were filled in"
            )],
        },
    }
}

fn strip_fence(reply: &str) -> &str {
    let t = reply.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let body = rest.split_once('\n').map(|(_, b)| b).unwrap_or("");
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// A name from the first words of the requirement: lowercase ASCII words joined by hyphens.
fn slug(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(5)
        .map(str::to_ascii_lowercase)
        .collect();
    let name = words.join("-");
    if name.is_empty() {
        "new-skill".to_owned()
    } else {
        name.chars().take(front_matter::MAX_NAME_CHARS).collect()
    }
}

fn summary(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let limit = 200;
    if one_line.chars().count() <= limit {
        one_line
    } else {
        format!("{}...", one_line.chars().take(limit).collect::<String>())
    }
}

fn template_body(need: &str) -> String {
    format!(
        "# Purpose\n\n{need}\n\n## When to use\n\nUse this skill when a request matches the purpose above.\n\n\
         ## Steps\n\n1. Confirm the inputs you need and ask for anything missing.\n\
         2. Carry out the task step by step, following the purpose above.\n\
         3. Check the result against the request before answering.\n\n\
         ## Output\n\nAnswer clearly and concisely; state any assumptions you made.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_drafts() {
        let meta = FrontMatter {
            name: "fallback".into(),
            description: "d".into(),
        };
        let good = "```markdown\n---\nname: pdf-forms\ndescription: Fill forms\n---\n# Steps\n```";
        let reply = |text: &str, cut| Reply {
            text: text.to_owned(),
            cut,
        };
        let d = from_reply(reply(good, false), meta.clone());
        assert_eq!((d.name.as_str(), d.warnings.len()), ("pdf-forms", 0));
        assert!(d.skill_content.starts_with("---\nname: pdf-forms") && d.skill_content.ends_with("# Steps\n"));
        // Cut at its token limit, it says so.
        let cut = from_reply(reply(good, true), meta.clone());
        assert_eq!(cut.warnings.len(), 1);
        assert!(
            cut.warnings[0].contains("cut off at its token limit"),
            "{:?}",
            cut.warnings
        );
        let bare = from_reply(reply("Just instructions.", false), meta);
        assert_eq!(bare.name, "fallback");
        assert_eq!(bare.warnings.len(), 1);
        assert_eq!(front_matter::parse(&bare.skill_content).unwrap().name, "fallback");
        assert!(bare.skill_content.contains("Just instructions."));
    }

    #[test]
    fn names_from_requirements() {
        assert_eq!(
            slug("Summarise PDF invoices, then file them!"),
            "summarise-pdf-invoices-then-file"
        );
        assert_eq!(slug("总结发票"), "new-skill");
        assert_eq!(summary(&"word ".repeat(100)).chars().count(), 203);
    }
}
