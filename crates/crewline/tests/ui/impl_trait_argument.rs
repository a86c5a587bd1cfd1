use crewline::prelude::*;

/// Show something.
#[function_tool]
fn show(value: impl std::fmt::Display) -> String {
    value.to_string()
}

fn main() {}
