use crewline::prelude::*;

/// Divide two numbers.
#[function_tool]
fn divide(a: f64, b: f64) -> Result<f64, String> {
    if b == 0.0 {
        return Err("division by zero".to_owned());
    }
    Ok(a / b)
}

fn main() {}
