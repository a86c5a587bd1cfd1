use crewline::prelude::*;

/// Get the weather.
#[function_tool(export = "crew,smolagents")]
fn get_weather(city: String) -> String {
    city
}

/// Get the forecast.
#[function_tool(export = " , ")]
fn get_forecast(city: String) -> String {
    city
}

fn main() {}
