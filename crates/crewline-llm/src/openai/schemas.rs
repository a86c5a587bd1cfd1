//! The tools' schemas as JSON, written once per set of definitions and per worker thread.
//!
//! Every model request of every turn of every call sends the same tools, and writing their
//! JSON Schemas was about 9 k instructions of a 356 k text turn (BENCHMARKS.md, issue 19).
//! A crew's definitions are one `Arc<[ToolDefinition]>` shared by all its calls, so the
//! written array is kept per allocation.
//!
//! Each entry holds a [`Weak`] to the definitions it was written from. That makes the cache
//! exact, not a guess by address: while the `Weak` lives the allocation cannot be freed and
//! reused for other definitions, and `Arc::get_mut` (hence `Arc::make_mut` in place) refuses
//! to hand out a `&mut` to it, so definitions equal by address are equal by content.

use std::{
    cell::RefCell,
    rc::Rc,
    sync::{Arc, Weak},
};

use crewline_core::ToolDefinition;
use serde_json::value::RawValue;

/// How many sets of definitions a thread keeps written: a router's sub-agents each have one.
const ENTRIES: usize = 8;

/// One written set of definitions.
struct Entry {
    definitions: Weak<[ToolDefinition]>,
    json: Rc<RawValue>,
}

thread_local! {
    static WRITTEN: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// `tools` as the JSON array of OpenAI tools (see [`ToolDefinition::openai`]), written the
/// first time this thread sees these definitions; `None` if they cannot be written as JSON
/// (the caller then writes them itself and reports the error) or the thread is exiting.
pub(crate) fn written(tools: &Arc<[ToolDefinition]>) -> Option<Rc<RawValue>> {
    WRITTEN
        .try_with(|cell| {
            let mut entries = cell.borrow_mut();
            let address = Arc::as_ptr(tools);
            if let Some(entry) = entries
                .iter()
                .find(|e| std::ptr::addr_eq(e.definitions.as_ptr(), address))
            {
                return Some(Rc::clone(&entry.json));
            }
            let json = write(tools)?;
            // Entries whose definitions are gone are dropped first, then the oldest.
            entries.retain(|e| e.definitions.strong_count() > 0);
            if entries.len() >= ENTRIES {
                entries.remove(0);
            }
            entries.push(Entry {
                definitions: Arc::downgrade(tools),
                json: Rc::clone(&json),
            });
            Some(json)
        })
        .ok()
        .flatten()
}

fn write(tools: &[ToolDefinition]) -> Option<Rc<RawValue>> {
    let openai: Vec<_> = tools.iter().map(ToolDefinition::openai).collect();
    let text = serde_json::to_string(&openai).ok()?;
    RawValue::from_string(text).ok().map(Rc::from)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(description: &str) -> ToolDefinition {
        ToolDefinition::new(
            "get_weather",
            description,
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )
    }

    fn direct(tools: &[ToolDefinition]) -> String {
        let openai: Vec<_> = tools.iter().map(ToolDefinition::openai).collect();
        serde_json::to_string(&openai).unwrap()
    }

    #[test]
    fn the_written_array_is_the_definitions_in_openai_shape() {
        let tools: Arc<[ToolDefinition]> =
            vec![tool("Weather."), tool("Again.").with_strict(true)].into();
        let first = written(&tools).unwrap();
        assert_eq!(first.get(), direct(&tools));
        // The second request of the same definitions gets the same text, not a rewrite.
        let second = written(&tools).unwrap();
        assert!(Rc::ptr_eq(&first, &second));
    }

    #[test]
    fn definitions_changed_in_place_are_written_again() {
        let mut tools: Arc<[ToolDefinition]> = vec![tool("Old.")].into();
        assert!(written(&tools).unwrap().get().contains("Old."));
        // `make_mut` may not change an allocation the cache has seen: it copies it.
        Arc::make_mut(&mut tools)[0].description = "New.".to_owned();
        let json = written(&tools).unwrap();
        assert!(json.get().contains("New."), "{}", json.get());
    }

    #[test]
    fn new_definitions_after_old_ones_are_dropped_are_written_again() {
        for round in 0..(ENTRIES * 3) {
            let description = format!("Round {round}.");
            let tools: Arc<[ToolDefinition]> = vec![tool(&description)].into();
            assert_eq!(written(&tools).unwrap().get(), direct(&tools));
        }
        let kept = WRITTEN.with(|cell| cell.borrow().len());
        assert!(kept <= ENTRIES, "{kept} entries kept");
    }
}
