use crewline::prelude::*;

/// Charge a card.
#[function_tool(timeout_ms = 0)]
fn charge(amount: u32) -> u32 {
    amount
}

/// Refund a card.
#[function_tool(confirm, confirm = false)]
fn refund(amount: u32) -> u32 {
    amount
}

fn main() {}
