use crewline::prelude::*;

/// Get the weather.
#[function_tool(nmae = "weather")]
fn get_weather(city: String) -> String {
    city
}

/// Get the forecast.
#[function_tool]
fn get_forecast(city: String, #[arg(defualt = 3)] days: u8) -> String {
    format!("{city} {days}")
}

fn main() {}
