//! Which stdio MCP servers may run. A stdio server is a command the service starts on its own
//! host, as its own user, whenever anyone who can see the server lists or calls its tools: its
//! code reads what the service's user can read (the service's environment is withheld, see
//! `hide_environment_from_children`, but files, the network position and the instance role
//! are not). So stdio is off unless the operator turns it on (`MCP_STDIO_ENABLED`), and then
//! runs only the commands the operator listed (`MCP_STDIO_COMMANDS`), with no variable that
//! makes them run other code.
//! All are checked when a server is saved (400) and again before each start, so a server saved
//! before the rules changed does not run either.

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

/// Refuses a variable that makes a listed command run other code: where bare names are looked
/// up, libraries loaded first, code an interpreter loads before its script or takes as
/// options. Any of them turns `MCP_STDIO_COMMANDS` into "anything".
pub fn check_env(key: &str) -> Result<(), AppError> {
    const NAMES: [&str; 15] = [
        "PATH",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "GCONV_PATH",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "BASH_ENV",
        "ENV",
        "JAVA_TOOL_OPTIONS",
    ];
    const PREFIXES: [&str; 5] = ["LD_", "DYLD_", "PYTHON", "_JAVA_", "JDK_JAVA_"];
    let upper = key.to_ascii_uppercase();
    if NAMES.contains(&upper.as_str()) || PREFIXES.iter().any(|p| upper.starts_with(p)) {
        return Err(AppError::validation(format!(
            "envVars.{key} is not allowed: it chooses what program or code runs, and only the commands in MCP_STDIO_COMMANDS may run"
        )));
    }
    Ok(())
}

/// Keeps this process's `/proc/<pid>` files, its environment among them (the database URL,
/// the JWT and encryption keys), from the stdio servers it starts. They run as the service's
/// user, and a child of the same user may read its parent's environment there: clearing the
/// child's own environment did not keep the keys from it. A process that is not dumpable has
/// those files owned by root (and cannot be traced by its user either). A server running as
/// root reads them anyway: stdio servers belong on a service that does not run as root.
pub fn hide_environment_from_children() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_DUMPABLE takes integer arguments and changes no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_environment_is_hidden_from_children() {
        hide_environment_from_children().expect("prctl");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }, 0);
        // The process still reads its own files.
        assert!(std::fs::read("/proc/self/environ").is_ok());
    }

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
