use crewline::prelude::*;

/// Greet someone.
#[function_tool]
fn greet(name: &str) -> String {
    format!("Hello, {name}")
}

/// Sum some numbers.
#[function_tool]
fn sum(numbers: Option<&'static [i64]>) -> i64 {
    numbers.unwrap_or_default().iter().sum()
}

fn main() {}
