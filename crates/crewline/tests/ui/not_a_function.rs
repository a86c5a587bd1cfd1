use crewline::prelude::*;

/// Not a function.
#[function_tool]
struct Weather;

#[tools]
trait Agent {}

fn main() {}
