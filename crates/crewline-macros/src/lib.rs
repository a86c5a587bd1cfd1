//! Procedural macros for crewline. Use them through the `crewline` crate.
// SKELETON: owned by the macros helper.

use proc_macro::TokenStream;

/// Turns a function or method into a tool.
#[proc_macro_attribute]
pub fn function_tool(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// On an impl block: makes its `#[function_tool]` methods discoverable.
#[proc_macro_attribute]
pub fn tools(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}
