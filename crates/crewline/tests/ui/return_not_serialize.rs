use crewline::prelude::*;

struct Report {
    text: String,
}

/// Write a report.
#[function_tool]
async fn report(topic: String) -> Report {
    Report { text: topic }
}

fn main() {}
