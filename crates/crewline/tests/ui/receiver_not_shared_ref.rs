use crewline::prelude::*;

struct Agent {
    count: u32,
}

#[tools]
impl Agent {
    /// Count one more.
    #[function_tool]
    fn increment(&mut self) -> u32 {
        self.count += 1;
        self.count
    }

    /// Consume the agent.
    #[function_tool]
    fn finish(self) -> u32 {
        self.count
    }
}

fn main() {}
