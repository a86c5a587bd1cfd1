//! The text of a caught panic, for the error that reports it.

use std::any::Any;

/// The message a panic was raised with (`panic!("...")` gives a `&str` or a `String`), or
/// "a panic without a message" for any other payload.
///
/// ```
/// let caught = std::panic::catch_unwind(|| panic!("tool broke: {}", 7)).unwrap_err();
/// assert_eq!(crewline_core::panic_message(caught.as_ref()), "tool broke: 7");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_formatted_and_other_payloads() {
        let text: Box<dyn Any + Send> = Box::new("plain");
        let formatted: Box<dyn Any + Send> = Box::new(String::from("formatted 7"));
        let other: Box<dyn Any + Send> = Box::new(7_u32);
        assert_eq!(panic_message(text.as_ref()), "plain");
        assert_eq!(panic_message(formatted.as_ref()), "formatted 7");
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
    }
}
