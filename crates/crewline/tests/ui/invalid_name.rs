use crewline::prelude::*;

/// Get the weather.
#[function_tool(name = "get weather!")]
async fn get_weather(city: String) -> String {
    city
}

/// Get the weather, in French.
#[function_tool]
async fn météo(city: String) -> String {
    city
}

fn main() {}
