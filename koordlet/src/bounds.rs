//! Bounds on what outside input may cost (issue 16): a cgroup parent, an
//! annotation value or a file path from a request is logged, audited and
//! echoed in errors at most [`MAX_LOGGED_BYTES`] long, followed by how long
//! it really was, so one request cannot fill the logs or the audit ring.

use std::borrow::Cow;
use std::fmt;

/// How much of an outside value a log line, an audit record or an error
/// message keeps.
pub const MAX_LOGGED_BYTES: usize = 256;

/// `text` cut to `max` bytes (at a character boundary) and followed by
/// `…(N bytes)` when it is longer; borrowed when it fits.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

/// [`truncate`] at [`MAX_LOGGED_BYTES`].
pub fn for_log(text: &str) -> Cow<'_, str> {
    truncate(text, MAX_LOGGED_BYTES)
}

/// [`for_log`] of an owned string, reusing it when it fits.
pub fn cut(text: String) -> String {
    if text.len() <= MAX_LOGGED_BYTES {
        text
    } else {
        for_log(&text).into_owned()
    }
}

/// Displays a value through [`for_log`]: `tracing::warn!(parent = %Bounded(&p))`.
pub struct Bounded<'a>(pub &'a str);

impl fmt::Display for Bounded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&for_log(self.0))
    }
}

/// Displays a path through [`for_log`].
pub struct BoundedPath<'a>(pub &'a std::path::Path);

impl fmt::Display for BoundedPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&for_log(&self.0.to_string_lossy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_pass_long_ones_are_cut_with_their_length() {
        assert_eq!(truncate("abc", 3), "abc");
        assert!(matches!(truncate("abc", 3), Cow::Borrowed(_)));
        assert_eq!(truncate("abcdef", 3), "abc…(6 bytes)");
        // Never inside a UTF-8 character.
        assert_eq!(truncate("aé", 2), "a…(3 bytes)");
        let huge = "x".repeat(10 << 20);
        let cut = for_log(&huge);
        assert!(cut.len() < MAX_LOGGED_BYTES + 32, "{}", cut.len());
        assert!(cut.ends_with("(10485760 bytes)"));
        assert_eq!(format!("{}", Bounded("short")), "short");
        assert_eq!(cut_owned_len(&huge), cut.len());
    }

    fn cut_owned_len(text: &str) -> usize {
        super::cut(text.to_string()).len()
    }
}
