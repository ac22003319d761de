//! The messages sent to the model: system prompt (instruction, tools, memories, knowledge),
//! the short-term history window, then the user's turn.

use crate::agents::conversation_repo::HistoryMessage;
use crate::models::client::ChatMessage;

/// What was gathered for this turn besides the agent's own instruction.
#[derive(Debug, Default)]
pub struct Context {
    pub tool_notes: Vec<String>,
    pub memories: Vec<String>,
    pub knowledge: Vec<String>,
}

pub fn system_prompt(instruction: &str, ctx: &Context) -> String {
    let mut parts: Vec<String> = vec![];
    if !instruction.trim().is_empty() {
        parts.push(instruction.trim().to_owned());
    }
    parts.extend(ctx.tool_notes.iter().cloned());
    if !ctx.memories.is_empty() {
        parts.push(format!(
            "What you remember about this user from earlier conversations:\n{}",
            bullet(&ctx.memories)
        ));
    }
    if !ctx.knowledge.is_empty() {
        let numbered: Vec<String> = ctx
            .knowledge
            .iter()
            .enumerate()
            .map(|(i, k)| format!("[{}] {k}", i + 1))
            .collect();
        parts.push(format!(
            "Use the following knowledge when it is relevant to the question:\n{}",
            numbered.join("\n\n")
        ));
    }
    parts.join("\n\n")
}

fn bullet(items: &[String]) -> String {
    items.iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")
}

pub fn messages(system: String, history: Vec<HistoryMessage>, content: &str, images: Vec<String>) -> Vec<ChatMessage> {
    let mut messages = Vec::with_capacity(history.len() + 2);
    if !system.is_empty() {
        messages.push(ChatMessage::system(system));
    }
    messages.extend(history.into_iter().map(|m| {
        if m.role == "user" {
            ChatMessage::user(m.content)
        } else {
            ChatMessage::assistant(m.content)
        }
    }));
    messages.push(if images.is_empty() {
        ChatMessage::user(content)
    } else {
        ChatMessage::user_with_images(content, images)
    });
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_appear_only_when_present() {
        assert_eq!(system_prompt("  Be brief. ", &Context::default()), "Be brief.");
        let ctx = Context {
            tool_notes: vec!["Skills: x".into()],
            memories: vec!["likes tea".into()],
            knowledge: vec!["Paris is in France".into()],
        };
        let p = system_prompt("", &ctx);
        assert!(p.starts_with("Skills: x"));
        assert!(p.contains("- likes tea"));
        assert!(p.contains("[1] Paris is in France"));
        assert_eq!(messages(String::new(), vec![], "hi", vec![]).len(), 1);
    }
}
