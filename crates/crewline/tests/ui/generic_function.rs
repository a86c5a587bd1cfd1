use crewline::prelude::*;

/// Echo a value.
#[function_tool]
fn echo<T: serde::Serialize>(value: T) -> T {
    value
}

fn main() {}
