//! AI drafts of `SKILL.md`: generated from a requirement or optimised from the current
//! content by the default CHAT model (metered and charged to the caller). Drafts are never
//! saved. Without a usable model (none, disabled, quota used up, or the call failed)
//! generation falls back to a rule-based template and optimisation keeps the current content,
//! each saying why in `warnings`. A `name` or `description` the request gives is what the
//! caller chose: the model is told it, and the draft carries it whatever front matter the
//! model wrote.

use super::front_matter::{self, FrontMatter};
use super::package::SKILL_MD;
use super::{files, service, storage, Draft, GenerateRequest, OptimizeRequest};
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

/// The extra instruction, held to the requirement's length: both go into a paid prompt.
fn instruction(value: Option<String>) -> AppResult<Option<String>> {
    let text = validate::optional(value);
    validate::at_most("optimizeInstruction", text.as_deref(), MAX_REQUIREMENT_CHARS)?;
    Ok(text)
}

/// The SKILL.md to improve, when the client sends its unsaved text: no larger than a file the
/// online editor may save.
fn current_content(state: &AppState, value: Option<String>) -> AppResult<Option<String>> {
    let text = validate::optional(value);
    let limit = state.config().skill_limits.max_file_bytes;
    if text.as_ref().is_some_and(|t| t.len() as u64 > limit) {
        return Err(AppError::validation(format!(
            "currentContent must be at most {limit} bytes, as a file of a skill"
        )));
    }
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

/// The name and description a request gives, each kept in the draft over the model's.
#[derive(Default)]
struct Chosen {
    name: Option<String>,
    description: Option<String>,
}

impl Chosen {
    fn new(name: Option<String>, description: Option<String>) -> Self {
        Self {
            name: validate::optional(name),
            description: validate::optional(description),
        }
    }

    /// What the model is told to keep.
    fn prompt_lines(&self) -> String {
        let mut lines = String::new();
        if let Some(name) = &self.name {
            lines.push_str(&format!("\nThe skill's name must be: {name}"));
        }
        if let Some(description) = &self.description {
            lines.push_str(&format!("\nThe skill's description must be: {description}"));
        }
        lines
    }

    /// `declared` with the chosen values in place of the model's.
    fn over(&self, declared: FrontMatter) -> FrontMatter {
        FrontMatter {
            name: self.name.clone().unwrap_or(declared.name),
            description: self.description.clone().unwrap_or(declared.description),
        }
    }
}

pub async fn generate(state: &AppState, user: &CurrentUser, req: GenerateRequest) -> AppResult<Draft> {
    let need = requirement(req.requirement)?;
    let instruction = instruction(req.optimize_instruction)?;
    let chosen = Chosen::new(req.name, req.description);
    let meta = chosen.over(FrontMatter {
        name: slug(&need),
        description: summary(&need),
    });
    within_limits(&meta)?;
    let prompt = format!(
        "Write a skill for this requirement:\n{need}\n\nPreferred name: {}\nPreferred description: {}{}{}",
        meta.name,
        meta.description,
        chosen.prompt_lines(),
        instruction_line(instruction.as_deref())
    );
    Ok(match ask(state, user, prompt).await? {
        Ok(reply) => from_reply(reply, meta, &chosen),
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
    let instruction = instruction(req.optimize_instruction)?;
    let sent = current_content(state, req.current_content)?;
    let (row, package) = storage::current(state, id).await?;
    let current = match sent {
        Some(text) => text,
        // Held to the limit a sent one has: it goes into the same paid prompt.
        None => {
            files::file_bytes(state, &package, SKILL_MD)?;
            service::skill_md_text(&package)?
        }
    };
    let chosen = Chosen::new(req.name, req.description);
    let meta = chosen.over(front_matter::parse(&current).unwrap_or(FrontMatter {
        name: row.name.clone(),
        description: row.description.clone(),
    }));
    within_limits(&meta)?;
    let prompt = format!(
        "Improve this SKILL.md according to the requirement, keeping what already works.\n\
         Requirement: {need}{}{}\n\nCurrent SKILL.md:\n{current}",
        chosen.prompt_lines(),
        instruction_line(instruction.as_deref())
    );
    Ok(match ask(state, user, prompt).await? {
        Ok(reply) => from_reply(reply, meta, &chosen),
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
    // Past API Gateway's limit the client would get its 504 while the call goes on, paid for.
    let model = match gateway::default_model(state, ModelType::Chat).await {
        Ok(model) => model.within(state.config().buffered_model_timeout),
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
/// instructions, under front matter built from `meta`; one with it keeps it, but for what the
/// request chose. One cut at its token limit says so: saved as it is, the skill would lose its
/// end without anyone knowing.
fn from_reply(reply: Reply, meta: FrontMatter, chosen: &Chosen) -> Draft {
    let mut draft = draft_of(&reply.text, meta, chosen);
    if reply.cut {
        draft.warnings.push(
            "the model's answer was cut off at its token limit (the quota left or the model's maxTokens); \
             the end of the draft is missing"
                .to_owned(),
        );
    }
    draft
}

fn draft_of(reply: &str, meta: FrontMatter, chosen: &Chosen) -> Draft {
    let text = strip_fence(reply);
    match front_matter::parse(text) {
        Ok(declared) => {
            let kept = chosen.over(declared.clone());
            let content = match kept == declared {
                true => text.to_owned(),
                // Parsed a line above, so it can be rewritten; the fallback only keeps it whole.
                false => front_matter::with_metadata(text, &kept)
                    .unwrap_or_else(|_| front_matter::document(&kept, front_matter::body(text))),
            };
            Draft {
                name: kept.name,
                description: kept.description,
                skill_content: format!("{}\n", content.trim_end()),
                warnings: vec![],
            }
        }
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
        let none = Chosen::default();
        let d = from_reply(reply(good, false), meta.clone(), &none);
        assert_eq!((d.name.as_str(), d.warnings.len()), ("pdf-forms", 0));
        assert!(d.skill_content.starts_with("---\nname: pdf-forms") && d.skill_content.ends_with("# Steps\n"));
        // Cut at its token limit, it says so.
        let cut = from_reply(reply(good, true), meta.clone(), &none);
        assert_eq!(cut.warnings.len(), 1);
        assert!(
            cut.warnings[0].contains("cut off at its token limit"),
            "{:?}",
            cut.warnings
        );
        // A name the request chose replaces the model's; the rest of its front matter stays.
        let chosen = Chosen::new(Some("form-filler".into()), None);
        let d = from_reply(reply(good, false), meta.clone(), &chosen);
        assert_eq!((d.name.as_str(), d.description.as_str()), ("form-filler", "Fill forms"));
        assert_eq!(
            d.skill_content,
            "---\nname: form-filler\ndescription: Fill forms\n---\n# Steps\n"
        );
        let bare = from_reply(reply("Just instructions.", false), meta, &none);
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
