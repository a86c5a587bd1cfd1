/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Another tool already has this name.
    #[error("a tool named `{0}` is already registered; tool names must be unique")]
    DuplicateName(String),
    /// The name is not one a model can call.
    #[error(
        "`{0}` is not a valid tool name: use 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-`"
    )]
    InvalidName(String),
    /// The argument schema is unusable.
    #[error("the argument schema of tool `{name}` is invalid: {reason}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The tool is strict, and its normalised schema breaks one of OpenAI strict mode's rules.
    #[error("tool `{name}`: `{path}` {rule}", path = if path.is_empty() { "/" } else { path })]
    NotStrict {
        /// The tool.
        name: String,
        /// The JSON pointer of the offending place in the schema the model is shown (`""`:
        /// the root).
        path: String,
        /// The rule it breaks, and what to do about it.
        rule: String,
    },
    /// No tool has this name (from [`ToolRegistry::subset`](crate::ToolRegistry::subset)).
    #[error("no tool named `{0}` is registered")]
    UnknownTool(String),
}
