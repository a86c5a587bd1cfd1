//! What a log line may carry of a tool's result or arguments: a bounded excerpt.

use std::fmt;

/// The most bytes of an id from outside (the platform's call id, a request id) that logs and
/// spans carry: enough to find a call by, not a megabyte in every line of it.
pub const MAX_ID_BYTES: usize = 64;

/// `id` as logs and spans carry it: whole up to [`MAX_ID_BYTES`], else cut on a character
/// boundary and marked with `…`.
pub fn id_excerpt(id: &str) -> std::borrow::Cow<'_, str> {
    if id.len() <= MAX_ID_BYTES {
        return id.into();
    }
    let mut end = MAX_ID_BYTES;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &id[..end]).into()
}

/// The most bytes of a tool result, argument or error text a log line carries.
pub const LOG_EXCERPT_BYTES: usize = 256;

/// A text as a log line shows it: whole when short, else its first [`LOG_EXCERPT_BYTES`]
/// (cut on a character boundary) and its full length. Log it with `%`.
#[derive(Debug, Clone, Copy)]
pub struct Excerpt<'a>(&'a str);

/// The excerpt of `text` that a log line may carry (see [`Excerpt`]).
pub fn excerpt(text: &str) -> Excerpt<'_> {
    Excerpt(text)
}

impl Excerpt<'_> {
    /// The part of the text shown.
    pub fn head(&self) -> &str {
        prefix(self.0, LOG_EXCERPT_BYTES)
    }
}

/// `text`'s first `max` bytes at most, cut on a character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self.head();
        if head.len() == self.0.len() {
            f.write_str(head)
        } else {
            write!(f, "{head}… ({} bytes in all)", self.0.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_whole_and_long_ones_cut_on_a_char_boundary() {
        assert_eq!(excerpt("fine").to_string(), "fine");
        let long = "é".repeat(1000);
        let shown = excerpt(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(LOG_EXCERPT_BYTES / 2)));
        assert!(shown.ends_with("… (2000 bytes in all)"), "{shown}");
        assert!(shown.len() < LOG_EXCERPT_BYTES + 32);
        // An odd cap falls inside a two-byte char: the cut moves back to its start.
        assert_eq!(
            excerpt(&format!("a{long}")).head().len(),
            LOG_EXCERPT_BYTES - 1
        );
    }
}
