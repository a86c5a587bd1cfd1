use crewline::prelude::*;

/// Get the weather.
///
/// # Arguments
/// * `location` - The city
/// * `unti` - The unit
#[function_tool]
fn get_weather(location: String, unit: Option<String>) -> String {
    format!("{location} {unit:?}")
}

fn main() {}
