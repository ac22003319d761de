//! The tools an agent offers its model in one chat turn, and their execution.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::agents::web_search::{self, WebSearch};
use crate::agents::AgentRow;
use crate::domain::Owner;
use crate::models::client::ToolSpec;
use crate::text::prefix_chars;
use crate::AppState;

/// Text handed back to the model from one tool call is cut to this many characters.
pub const MAX_RESULT_CHARS: usize = 16_000;
const WEB_RESULTS: usize = 5;

#[derive(Debug, Clone)]
enum Target {
    WebSearch,
    /// A tool of an MCP server, by its own name there, called in the session of whoever chats.
    Mcp {
        server_id: i64,
        tool: String,
        party: Owner,
    },
    /// Reads SKILL.md of one of these skills, by name.
    LoadSkill(HashMap<String, i64>),
    /// Reads another file of one of these skills.
    ReadSkillFile(HashMap<String, i64>),
}

/// What a tool answered.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub text: String,
    pub ok: bool,
}

impl ToolOutput {
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            text: message.into(),
            ok: false,
        }
    }
}

#[derive(Default)]
pub struct Toolbox {
    specs: Vec<ToolSpec>,
    targets: HashMap<String, Target>,
    /// Lines for the system prompt about what the tools give access to.
    pub prompt_notes: Vec<String>,
    /// The agent's MCP servers whose tools could not be listed for this turn (the reasons are
    /// logged): the answer goes on without them and says so.
    pub unavailable: Vec<i64>,
}

/// What a turn switched off for itself.
#[derive(Debug, Clone, Default)]
pub struct Disabled {
    pub mcp_server_ids: Vec<i64>,
    pub skill_ids: Vec<i64>,
}

impl Toolbox {
    /// The agent's tools, minus what the turn disabled, for `party` to chat with.
    pub async fn for_agent(state: &AppState, agent: &AgentRow, disabled: &Disabled, party: Owner) -> Self {
        let mut tools = Self::default();
        if agent.mcp_enabled {
            tools.add_mcp(state, agent, disabled, party).await;
        }
        if agent.skill_enabled {
            tools.add_skills(state, agent, disabled).await;
        }
        if agent.web_search_enabled && web_search::provider(state).is_some() {
            tools.add(
                ToolSpec {
                    name: "web_search".into(),
                    description: "Search the web. Returns titles, URLs and snippets of the top results.".into(),
                    parameters: json!({ "type": "object", "properties": { "query": { "type": "string" } }, "required": ["query"] }),
                },
                Target::WebSearch,
            );
        }
        tools
    }

    /// The bound servers' tools, named `mcp<serverId>__<tool>` so two servers' tools never
    /// clash; a server that cannot be reached is skipped for this turn.
    async fn add_mcp(&mut self, state: &AppState, agent: &AgentRow, disabled: &Disabled, party: Owner) {
        let ids: Vec<i64> = agent
            .mcp_server_ids
            .iter()
            .copied()
            .filter(|id| !disabled.mcp_server_ids.contains(id))
            .collect();
        if ids.is_empty() {
            return;
        }
        // Only servers the agent's creator may use now: a server shared by an administrator
        // who was demoted since is no longer theirs to offer (it stayed bound).
        let ids = match crate::mcp::repo::usable_by(state.db(), agent.creator_id, &ids).await {
            Ok(ids) if !ids.is_empty() => ids,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(agent_id = agent.id, error = %e, "reading the agent's MCP servers failed; chatting without them");
                return;
            }
        };
        let servers = match crate::mcp::tools_of_servers(state, party, &ids).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(agent_id = agent.id, error = %e, "listing MCP tools failed; chatting without them");
                return;
            }
        };
        for (server_id, tools) in servers {
            let tools = match tools {
                Ok(t) => t,
                Err(reason) => {
                    tracing::warn!(agent_id = agent.id, server_id, %reason, "MCP server unavailable; its tools are skipped");
                    self.unavailable.push(server_id);
                    continue;
                }
            };
            for t in tools {
                self.add(
                    ToolSpec {
                        name: mcp_tool_name(server_id, &t.name),
                        description: format!("[{}] {}", t.server_name, t.description),
                        parameters: t.input_schema,
                    },
                    Target::Mcp {
                        server_id,
                        tool: t.name,
                        party,
                    },
                );
            }
        }
    }

    /// Skills are listed by name and description; their instructions cost context only once
    /// the model loads them.
    async fn add_skills(&mut self, state: &AppState, agent: &AgentRow, disabled: &Disabled) {
        let ids: Vec<i64> = agent
            .skill_ids
            .iter()
            .copied()
            .filter(|id| !disabled.skill_ids.contains(id))
            .collect();
        let skills = match crate::skills::briefs(state.db(), &ids).await {
            Ok(s) if !s.is_empty() => s,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(agent_id = agent.id, error = %e, "loading the agent's skills failed; chatting without them");
                return;
            }
        };
        // Names are not unique: two bound skills of one name are told apart by their ids, or
        // every load of either gave the first one's instructions.
        let labels: Vec<String> = skills
            .iter()
            .map(|s| match skills.iter().filter(|o| o.name == s.name).count() {
                1 => s.name.clone(),
                _ => format!("{} #{}", s.name, s.id),
            })
            .collect();
        let catalog: Vec<String> = skills
            .iter()
            .zip(&labels)
            .map(|(s, label)| format!("- {label}: {}", s.description))
            .collect();
        self.prompt_notes.push(format!(
            "You have these skills. When one fits the request, call load_skill with its name first and follow \
             its instructions; read_skill_file reads other files of a skill when its instructions point to them.\n{}",
            catalog.join("\n")
        ));
        let by_name: HashMap<String, i64> = labels.iter().cloned().zip(skills.iter().map(|s| s.id)).collect();
        let names = &labels;
        self.add(
            ToolSpec {
                name: "load_skill".into(),
                description: "Load the instructions (SKILL.md) of one of your skills.".into(),
                parameters: json!({ "type": "object", "properties": { "name": { "type": "string", "enum": names } }, "required": ["name"] }),
            },
            Target::LoadSkill(by_name.clone()),
        );
        self.add(
            ToolSpec {
                name: "read_skill_file".into(),
                description: "Read a file of one of your skills, by its path inside the skill.".into(),
                parameters: json!({ "type": "object", "properties": { "skill": { "type": "string", "enum": names }, "path": { "type": "string" } }, "required": ["skill", "path"] }),
            },
            Target::ReadSkillFile(by_name),
        );
    }

    /// Adds a tool under its name or, when that is taken (two tools of one server that read
    /// the same once made fit for models, `a.b` and `a_b`), under the name with a number: a
    /// name sent twice sent every call of both tools to the one added last.
    fn add(&mut self, mut spec: ToolSpec, target: Target) {
        let wanted = spec.name.clone();
        let mut n = 1;
        while self.targets.contains_key(&spec.name) {
            n += 1;
            let suffix = format!("_{n}");
            spec.name = format!("{}{suffix}", prefix_chars(&wanted, MAX_NAME_CHARS - suffix.len()));
        }
        self.targets.insert(spec.name.clone(), target);
        self.specs.push(spec);
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The MCP server behind a tool name, for the `tool_call` event.
    pub fn server_of(&self, name: &str) -> Option<i64> {
        match self.targets.get(name) {
            Some(Target::Mcp { server_id, .. }) => Some(*server_id),
            _ => None,
        }
    }

    /// Runs a tool; every failure becomes a result the model can read.
    pub async fn call(&self, state: &AppState, name: &str, arguments: &Value) -> ToolOutput {
        let Some(target) = self.targets.get(name) else {
            return ToolOutput::failed(format!("there is no tool named {name}"));
        };
        let mut out = match target {
            Target::WebSearch => web(state, arguments).await,
            Target::Mcp { server_id, tool, party } => mcp(state, *party, *server_id, tool, arguments).await,
            Target::LoadSkill(skills) => skill_file(state, skills, arguments, "name", None).await,
            Target::ReadSkillFile(skills) => skill_file(state, skills, arguments, "skill", Some("path")).await,
        };
        truncate(&mut out.text);
        out
    }
}

/// Function names must match `^[a-zA-Z0-9_-]{1,64}$` for OpenAI-compatible models.
fn mcp_tool_name(server_id: i64, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("mcp{server_id}__{clean}")
        .chars()
        .take(MAX_NAME_CHARS)
        .collect()
}

/// The longest function name OpenAI-compatible models take.
const MAX_NAME_CHARS: usize = 64;

async fn mcp(state: &AppState, party: Owner, server_id: i64, tool: &str, arguments: &Value) -> ToolOutput {
    match crate::mcp::call_tool(state, party, server_id, tool, arguments.clone()).await {
        Ok(out) => ToolOutput {
            text: out.text,
            ok: !out.is_error,
        },
        Err(e) => ToolOutput::failed(e.told()),
    }
}

fn truncate(text: &mut String) {
    let kept = prefix_chars(text, MAX_RESULT_CHARS).len();
    if kept < text.len() {
        text.truncate(kept);
        text.push_str("\n[truncated]");
    }
}

fn string_arg<'a>(arguments: &'a Value, key: &str) -> Result<&'a str, ToolOutput> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ToolOutput::failed(format!("the argument {key} (a string) is required")))
}

async fn web(state: &AppState, arguments: &Value) -> ToolOutput {
    let query = match string_arg(arguments, "query") {
        Ok(q) => q,
        Err(e) => return e,
    };
    let Some(provider) = web_search::provider(state) else {
        return ToolOutput::failed("web search is not configured");
    };
    match provider.search(query, WEB_RESULTS).await {
        Ok(results) => ToolOutput {
            text: serde_json::to_string(&results).unwrap_or_default(),
            ok: true,
        },
        Err(e) => ToolOutput::failed(e),
    }
}

/// A file of a skill: SKILL.md's instructions (without the front matter) or another path.
async fn skill_file(
    state: &AppState,
    skills: &HashMap<String, i64>,
    arguments: &Value,
    skill_key: &str,
    path_key: Option<&str>,
) -> ToolOutput {
    let name = match string_arg(arguments, skill_key) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let Some(&id) = skills.get(name) else {
        return ToolOutput::failed(format!("there is no skill named {name}"));
    };
    let path = match path_key.map(|k| string_arg(arguments, k)) {
        None => crate::skills::SKILL_MD,
        Some(Ok(p)) => p,
        Some(Err(e)) => return e,
    };
    match crate::skills::read_text_file(state, id, path).await {
        Ok(text) if path_key.is_none() => ToolOutput {
            text: crate::skills::front_matter::body(&text).to_owned(),
            ok: true,
        },
        Ok(text) => ToolOutput { text, ok: true },
        Err(e) => ToolOutput::failed(e.told()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_are_cut() {
        let mut t = "é".repeat(MAX_RESULT_CHARS + 5);
        truncate(&mut t);
        assert!(t.ends_with("[truncated]"));
        assert_eq!(t.chars().count(), MAX_RESULT_CHARS + "\n[truncated]".len());
        assert_eq!(mcp_tool_name(3, "get-sum"), "mcp3__get-sum");
        assert_eq!(mcp_tool_name(3, "a.b c"), "mcp3__a_b_c");
        assert_eq!(mcp_tool_name(3, &"x".repeat(100)).len(), 64);
        let e = string_arg(&json!({"query": " "}), "query").unwrap_err();
        assert!(!e.ok && e.text.contains("query"));
    }

    #[test]
    fn tools_whose_names_read_the_same_get_names_of_their_own() {
        let mut toolbox = Toolbox::default();
        let long = "x".repeat(100);
        for tool in ["a.b", "a_b", "a b", &long, &format!("{long}y")] {
            let spec = ToolSpec {
                name: mcp_tool_name(3, tool),
                description: String::new(),
                parameters: json!({}),
            };
            let target = Target::Mcp {
                server_id: 3,
                tool: tool.to_owned(),
                party: Owner::User(1),
            };
            toolbox.add(spec, target);
        }
        let names: Vec<&str> = toolbox.specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(&names[..3], ["mcp3__a_b", "mcp3__a_b_2", "mcp3__a_b_3"]);
        assert_eq!((names[3].len(), names[4].len()), (64, 64));
        assert!(names[4].ends_with("_2"));
        match toolbox.targets.get("mcp3__a_b_2") {
            Some(Target::Mcp { tool, .. }) => assert_eq!(tool, "a_b"),
            _ => panic!("a_b is reachable under its own name"),
        }
    }
}
