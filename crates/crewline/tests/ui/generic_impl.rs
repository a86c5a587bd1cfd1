use crewline::prelude::*;

struct Agent<T> {
    value: T,
}

#[tools]
impl<T: Clone + Send + Sync + 'static> Agent<T> {
    /// Say hello.
    #[function_tool]
    fn hello(&self) -> String {
        let _ = self.value.clone();
        "hello".to_owned()
    }
}

fn main() {}
