use crewline::prelude::*;

struct Agent;

impl Agent {
    /// Say hello.
    #[function_tool]
    fn hello(&self, name: String) -> String {
        format!("Hello, {name}")
    }
}

fn main() {}
