//! Where a tool may be offered: the crew's own tool loop, an MCP server, a remote agent.

use std::fmt;

/// A place a registry's tools can be exported to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The crew's own tool loop (the model of a crewline session).
    Crew,
    /// An MCP server (and the agents, such as smolagents, that consume it).
    Mcp,
    /// A remote agent calling over the network.
    Remote,
}

impl Target {
    /// Every target, in declaration order.
    pub const ALL: [Target; 3] = [Target::Crew, Target::Mcp, Target::Remote];

    /// The target's name as the `export = ".."` option spells it (`crew`, `mcp`, `remote`).
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Crew => "crew",
            Target::Mcp => "mcp",
            Target::Remote => "remote",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The targets a tool is exported to (default: the crew only).
///
/// MCP and remote exports are opt-in, per tool (`#[function_tool(export = "crew,mcp")]`,
/// [`ToolPolicy::exports`](crate::ToolPolicy::exports)) or per registry
/// ([`ToolRegistry::with_default_exports`](crate::ToolRegistry::with_default_exports), for the
/// tools that set none): a tool written for a call's model is never offered to any MCP client
/// or remote agent that reaches the server just because it was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exports {
    /// Offered to the crew's own tool loop.
    pub crew: bool,
    /// Offered through MCP.
    pub mcp: bool,
    /// Offered to remote agents.
    pub remote: bool,
}

impl Default for Exports {
    fn default() -> Self {
        Self::crew_only()
    }
}

impl Exports {
    /// Exported to the crew's own tool loop only (the default).
    pub const fn crew_only() -> Self {
        Self::none().with(Target::Crew, true)
    }

    /// Exported everywhere.
    pub const fn all() -> Self {
        Self {
            crew: true,
            mcp: true,
            remote: true,
        }
    }

    /// Exported nowhere.
    pub const fn none() -> Self {
        Self {
            crew: false,
            mcp: false,
            remote: false,
        }
    }

    /// Exported to exactly `targets`.
    pub fn only(targets: &[Target]) -> Self {
        targets
            .iter()
            .fold(Self::none(), |exports, target| exports.with(*target, true))
    }

    /// The same exports, with `target` allowed or not.
    pub const fn with(mut self, target: Target, allowed: bool) -> Self {
        match target {
            Target::Crew => self.crew = allowed,
            Target::Mcp => self.mcp = allowed,
            Target::Remote => self.remote = allowed,
        }
        self
    }

    /// Whether the tool is exported to `target`.
    pub const fn allows(self, target: Target) -> bool {
        match target {
            Target::Crew => self.crew,
            Target::Mcp => self.mcp,
            Target::Remote => self.remote,
        }
    }
}

/// The naming rules an export target imposes on tool names, beyond the registry's own
/// (`[a-zA-Z0-9_-]{1,64}`, always enforced at registration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NameRules {
    /// Nothing beyond the registry's rule.
    #[default]
    Standard,
    /// The name must be a Python identifier and not a keyword (for consumers such as
    /// smolagents, which turn each tool into a Python function).
    Python,
}

/// The 35 keywords of Python 3.11.
pub const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

impl NameRules {
    /// `Ok` if `name` follows these rules, otherwise why not.
    pub fn check(self, name: &str) -> Result<(), String> {
        match self {
            NameRules::Standard => Ok(()),
            NameRules::Python => check_python(name),
        }
    }
}

fn check_python(name: &str) -> Result<(), String> {
    if PYTHON_KEYWORDS.contains(&name) {
        return Err(format!("`{name}` is a Python keyword"));
    }
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err("an empty name is not a Python identifier".to_owned());
    };
    // Registered names are ASCII (`[a-zA-Z0-9_-]`), so ASCII identifier rules suffice; other
    // characters are rejected rather than checked against Unicode XID.
    if !(first.is_ascii_alphabetic() || first == '_') {
        return Err(format!(
            "`{name}` is not a Python identifier: it must start with a letter or `_`"
        ));
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        return Err(format!(
            "`{name}` is not a Python identifier: `{bad}` is not allowed (use letters, digits and `_`)"
        ));
    }
    Ok(())
}

/// Why a registry could not be exported to a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A tool exported to the target has a name the target cannot take.
    #[error("tool `{tool}` cannot be exported to {target}: {reason}")]
    InvalidName {
        /// The tool.
        tool: String,
        /// The target.
        target: Target,
        /// What is wrong with the name.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_default_to_the_crew_only() {
        let exports = Exports::default();
        assert!(exports.allows(Target::Crew));
        assert!(!exports.allows(Target::Mcp) && !exports.allows(Target::Remote));
        assert!(Target::ALL.iter().all(|t| Exports::all().allows(*t)));
        let only = Exports::only(&[Target::Mcp]);
        assert!(only.allows(Target::Mcp));
        assert!(!only.allows(Target::Crew) && !only.allows(Target::Remote));
    }

    #[test]
    fn python_rules_reject_keywords_and_non_identifiers() {
        assert!(NameRules::Python.check("get_weather").is_ok());
        assert!(NameRules::Python.check("_private").is_ok());
        assert!(
            NameRules::Python
                .check("def")
                .unwrap_err()
                .contains("keyword")
        );
        assert!(NameRules::Python.check("None").is_err());
        assert!(NameRules::Python.check("get-weather").is_err());
        assert!(NameRules::Python.check("3d").is_err());
        assert!(NameRules::Python.check("match").is_ok()); // a soft keyword only
        assert!(NameRules::Standard.check("def").is_ok());
    }
}
