//! Procedural macros for crewline. Use them through the `crewline` crate, whose docs show them
//! in context; generated code reaches its support through `::crewline::__private`.
//!
//! - `attr`: the macros' own attributes (`#[function_tool(..)]`, `#[tools(..)]`, `#[arg(..)]`);
//! - `docs`: descriptions read from doc comments (`# Arguments`);
//! - `spec`: the checks and the tool model shared by both macros;
//! - `codegen`: the arguments struct and the `Tool` impl shared by both macros;
//! - `free_fn`: `#[function_tool]` on a free function;
//! - `impl_block`: `#[tools]` on an impl block.

mod attr;
mod codegen;
mod docs;
mod free_fn;
mod impl_block;
mod spec;

use proc_macro::TokenStream;

/// Turns a function into a tool the model can call.
///
/// On a free `fn` or `async fn`, it keeps the function as is and adds a unit struct named after
/// it (`get_weather` → `GetWeatherTool`, same visibility) that implements `Tool`, `Default`,
/// `Clone`, `Copy` and `Debug`: `registry.register(GetWeatherTool)?`.
///
/// On a method, it needs `#[tools]` on the impl block (see [`tools`]).
///
/// # Examples
///
#[doc = include_str!("doc/function_tool.md")]
///
/// - The description is the doc comment before its first heading; each argument's description
///   comes from the `# Arguments` list (`* \`name\` - text`, `- \`name\`: text` or
///   `* name - text`), or from `#[arg(description = "..")]`.
/// - `Option<T>` arguments are optional; `#[arg(default = expr)]` (or `#[arg(default)]` for
///   `Default::default()`) makes any other argument optional, with that default.
/// - The function returns `Result<T, E>` with `T: Serialize` and `E: Into<ToolError>`, or any
///   `T: Serialize` (`()` is `null`; a `String` is the model's content as is).
/// - An `async fn` is awaited; a plain `fn` runs on Tokio's blocking pool, so it may block, and
///   a panic in it becomes a `ToolError`.
/// - `Tool::result_schema` is the JSON Schema of `T` (of the `T` of `Result<T, E>`) when it
///   implements `schemars::JsonSchema`, and `None` otherwise (and for `()`).
/// - Options: `#[function_tool(name = "..", description = "..", crate = path)]`, the policy's
///   `timeout_ms = N`, `confirm`, `cache_ttl_s = N`, `cancellable = false`,
///   `export = "crew,mcp,remote"` (the targets the tool is offered to; default: its registry's
///   default, the crew only: MCP and remote exports are opt-in), and `strict` (or
///   `strict = false`: OpenAI strict mode, checked at registration; default: its registry's),
///   and `dedupes_by_key` (its downstream dedupes by `IdempotencyKey::current()`, so a call
///   whose outcome is unknown may run again under the same key), and `background` (the call
///   answers "started" at once and its result comes back into the conversation when it
///   lands; see `crewline_tools::progress`).
#[proc_macro_attribute]
pub fn function_tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    free_fn::expand(attr.into(), item.into()).into()
}

/// On an impl block: makes its `#[function_tool]` methods tools of the type, found by
/// `registry.discover(&Arc::new(agent))`.
///
/// # Examples
///
#[doc = include_str!("doc/tools.md")]
///
/// Tool methods take `&self` (or no receiver); the type must be `Send + Sync + 'static` and
/// the impl block not generic. Each tool holds an `Arc` of the agent; the type implements
/// `ToolProvider`, listing its tools in method order. The methods stay ordinary methods.
/// Option: `#[tools(crate = path)]`.
#[proc_macro_attribute]
pub fn tools(attr: TokenStream, item: TokenStream) -> TokenStream {
    impl_block::expand(attr.into(), item.into()).into()
}
