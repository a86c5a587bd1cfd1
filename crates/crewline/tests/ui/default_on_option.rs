use crewline::prelude::*;

/// Get the forecast.
#[function_tool]
fn get_forecast(#[arg(default = Some(3))] days: Option<u8>) -> String {
    format!("{days:?}")
}

fn main() {}
