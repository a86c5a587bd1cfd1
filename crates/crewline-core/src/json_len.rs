//! The length of a value as JSON, without writing the text: what byte budgets count.

use serde::Serialize;

/// Counts the bytes written into it and keeps none; past `max`, refuses to take more.
struct Counter {
    bytes: usize,
    max: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes = self.bytes.saturating_add(buf.len());
        if self.bytes > self.max {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `value` as JSON (what cannot be serialised is not counted).
pub fn json_len(value: &impl Serialize) -> usize {
    let mut counter = Counter {
        bytes: 0,
        max: usize::MAX,
    };
    // Writing into a counter cannot fail below `usize::MAX`; a value that does not serialise
    // counts what was written before the error.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.bytes
}

/// The length of `value` as JSON, or `None` once it passes `max`: a huge value is not walked
/// to its end.
pub fn json_len_within(value: &impl Serialize, max: usize) -> Option<usize> {
    let mut counter = Counter { bytes: 0, max };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_length_is_that_of_the_json_text() {
        let value = json!({"city": "Paris", "days": [1, 2, 3]});
        assert_eq!(json_len(&value), value.to_string().len());
        assert_eq!(
            json_len_within(&value, 1_000),
            Some(value.to_string().len())
        );
    }

    #[test]
    fn a_value_past_the_limit_is_none() {
        let value = json!({"text": "x".repeat(100)});
        assert_eq!(json_len_within(&value, 50), None);
        assert_eq!(
            json_len_within(&value, json_len(&value)),
            Some(json_len(&value))
        );
    }
}
