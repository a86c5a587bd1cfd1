use std::{cell::Cell, rc::Rc};

use crewline::prelude::*;

struct Agent {
    calls: Rc<Cell<u32>>,
}

#[tools]
impl Agent {
    /// Count a call.
    #[function_tool]
    fn count(&self) -> u32 {
        self.calls.set(self.calls.get() + 1);
        self.calls.get()
    }

    /// Read the count.
    #[function_tool]
    async fn read(&self) -> u32 {
        self.calls.get()
    }
}

fn main() {}
