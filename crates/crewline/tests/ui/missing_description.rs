use crewline::prelude::*;

#[function_tool]
fn get_weather(location: String) -> String {
    location
}

/// # Arguments
/// * `location` - The city
#[function_tool]
fn get_forecast(location: String) -> String {
    location
}

fn main() {}
