use crewline::prelude::*;

/// Add two numbers.
#[function_tool]
fn add((a, b): (i32, i32)) -> i32 {
    a + b
}

/// Ignore a number.
#[function_tool]
fn ignore(_: i32) {}

fn main() {}
