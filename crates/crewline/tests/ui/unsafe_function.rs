use crewline::prelude::*;

/// Read raw memory.
#[function_tool]
unsafe fn peek(address: usize) -> u8 {
    unsafe { *(address as *const u8) }
}

fn main() {}
