//! Which stdio MCP servers may run. A stdio server is a command the service starts on its own
//! host, as its own user, whenever anyone who can see the server lists or calls its tools: its
//! code reads what the service's user can read (the database password in the environment is
//! withheld, but files, the network position and the instance role are not). So stdio is off
//! unless the operator turns it on (`MCP_STDIO_ENABLED`), and then runs only the commands the
//! operator listed (`MCP_STDIO_COMMANDS`). Both are checked when a server is saved (400) and
//! again before each start, so a server saved before the rules changed does not run either.

use crate::config::Config;
use crate::AppError;

#[derive(Clone, Debug, Default)]
pub struct StdioPolicy {
    enabled: bool,
    /// An entry with a `/` is an exact path; one without is a bare command name, matched only by
    /// a command given as that same bare name (so `/tmp/x/node` is not `node`).
    commands: Vec<String>,
}

impl StdioPolicy {
    pub fn from_config(config: &Config) -> Self {
        Self {
            enabled: config.mcp_stdio_enabled,
            commands: config.mcp_stdio_commands.clone(),
        }
    }

    /// Ok when a stdio server may run `command`; the refusal names the field to change.
    pub fn check(&self, command: &str) -> Result<(), AppError> {
        if !self.enabled {
            return Err(AppError::validation(
                "transportType 3 (stdio) is disabled on this service: stdio servers run a command on \
                 the service's host; the operator enables them with MCP_STDIO_ENABLED",
            ));
        }
        if !self.commands.iter().any(|allowed| allowed == command) {
            return Err(AppError::validation(format!(
                "command {command:?} is not allowed for stdio servers on this service (MCP_STDIO_COMMANDS)"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_only_listed_commands_when_on() {
        let off = StdioPolicy::default();
        assert!(off.check("node").unwrap_err().to_string().contains("transportType"));
        let on = StdioPolicy {
            enabled: true,
            commands: vec!["node".into(), "/opt/mcp/server".into()],
        };
        assert!(on.check("node").is_ok());
        assert!(on.check("/opt/mcp/server").is_ok());
        for refused in ["/tmp/x/node", "server", "bash", "node "] {
            assert!(
                on.check(refused).unwrap_err().to_string().contains("command"),
                "{refused}"
            );
        }
    }
}
