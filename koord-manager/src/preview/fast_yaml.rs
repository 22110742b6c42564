//! A streaming serde reader for the YAML that `kubectl get -o yaml` prints:
//! block mappings and sequences (including sequences at their key's
//! indentation), plain, quoted and literal (`|`) scalars, single- or
//! multi-line, one-line flow collections, comments and `---` / `...`
//! markers.
//!
//! It drives serde straight from the text, so subtrees the target type skips
//! are stepped over without building events or values; on large snapshots it
//! reads several times faster than a general YAML parser. Scalars resolve
//! as serde_yaml (and serde-saphyr with strict booleans) resolve them.
//!
//! Why it stays: measured in one run (`preview::tests::readers_on_one_snapshot`,
//! release build, this 2-core machine, 2026-12) on the 5,000-node /
//! 50,000-pod snapshots of `hack/bench-manager-preview.sh`, both readers into
//! the same lean structs: 31 MiB as `kubectl` prints it, 0.74 s here against
//! 5.53 s for serde-saphyr 2.2 (7.4x); 31 MiB with every scalar quoted,
//! 0.42 s against 4.78 s (11.5x). serde-saphyr alone misses the preview
//! budget (< 1 s CPU) several times over.
//!
//! Its work is linear in the text: every byte is examined a bounded number
//! of times (the tests count it), and nesting deeper than [`MAX_DEPTH`] is
//! refused with its position — a limit, not a hand-over.
//!
//! Anything outside that subset (anchors, aliases, tags, folded `>` scalars,
//! multi-line flow collections, tabs used as indentation, ...), anything
//! whose meaning it is not sure of, and malformed text make it give up with
//! [`Unsupported`]; the caller then reads the text with serde-saphyr, which
//! accepts all of YAML within its budgets and reports errors with their
//! location. When this reader succeeds, its result is meant to be
//! serde-saphyr's; the tests compare the two on hand-written and randomly
//! damaged text.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};

/// Why the fast reader gave up (the text may still be valid YAML), or — when
/// [`Unsupported::is_limit`] — why the text is refused outright.
#[derive(Debug)]
pub struct Unsupported {
    message: String,
    offset: Option<usize>,
    /// A limit was exceeded: no other reader should try.
    limit: bool,
}

impl Unsupported {
    /// True when the text goes beyond a limit (e.g. nesting deeper than
    /// [`MAX_DEPTH`]); other readers would refuse it too.
    pub fn is_limit(&self) -> bool {
        self.limit
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The byte offset in the text where it happened, when known.
    pub fn offset(&self) -> Option<usize> {
        self.offset
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(offset) => write!(f, "{} (at byte {offset})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Unsupported {}

impl de::Error for Unsupported {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Unsupported {
            message: msg.to_string(),
            offset: None,
            limit: false,
        }
    }
}

type Result<T> = std::result::Result<T, Unsupported>;

/// The deepest nesting of mappings and sequences read; deeper text is
/// refused (serde-saphyr, which reads what this reader leaves, has the same
/// limit).
pub const MAX_DEPTH: usize = super::limits::MAX_NESTING;

/// Deserializes each document of `text` as a `T`, handing it to `each`.
pub fn for_each_document<'a, T, F>(text: &'a str, each: F) -> Result<()>
where
    T: de::Deserialize<'a>,
    F: FnMut(T),
{
    // Carriage returns and byte-order marks change what counts as a line or
    // a column; serde-saphyr handles them.
    if text.as_bytes().contains(&b'\r') || text.starts_with('\u{feff}') {
        return Err(de::Error::custom("carriage return or byte-order mark"));
    }
    read_documents(&mut Reader::new(text), each)
}

fn read_documents<'a, T, F>(reader: &mut Reader<'a>, mut each: F) -> Result<()>
where
    T: de::Deserialize<'a>,
    F: FnMut(T),
{
    let reader = &mut *reader;
    // Only the first document may start without `---`.
    let mut first_document = true;
    loop {
        let Some(first) = reader.next_line_raw()? else {
            return Ok(());
        };
        if reader.is_marker(first, b"---") {
            reader.pos = first + 3;
            reader.finish_line()?;
        } else if !first_document
            || reader.byte(first) == Some(b'%')
            || reader.is_marker(first, b"...")
        {
            return Err(reader.unsupported("directive or document without a start marker"));
        }
        first_document = false;
        let start = reader.start_node(-1, Context::Root)?;
        each(T::deserialize(Node {
            reader: &mut *reader,
            start,
        })?);
        // After the root node: the end of the text or a document marker.
        match reader.next_line_raw()? {
            None => return Ok(()),
            Some(line) if reader.is_marker(line, b"---") => {}
            Some(line) if reader.is_marker(line, b"...") => {
                reader.pos = line + 3;
                reader.finish_line()?;
            }
            Some(_) => return Err(reader.unsupported("content after the document's root node")),
        }
    }
}

/// Where a node starts, which decides what may begin there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    /// Right after `key:` on the same line.
    Value,
    /// Right after a sequence dash, or at a document's start: a mapping or
    /// sequence may begin on the same line.
    Item,
    Root,
}

/// What a node turned out to be; scalars are read at once.
enum Start<'a> {
    Scalar {
        value: Cow<'a, str>,
        plain: bool,
    },
    /// At the first key.
    BlockMap {
        indent: usize,
    },
    /// At the first dash.
    BlockSeq {
        indent: usize,
    },
    /// Just after the opening bracket.
    FlowMap,
    FlowSeq,
}

const EMPTY: Start<'static> = Start::Scalar {
    value: Cow::Borrowed(""),
    plain: true,
};

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    /// Always at a line start, except while a node's own line is read.
    pos: usize,
    depth: usize,
    /// How many flow collections enclose `pos`.
    depth_in_flow: usize,
    /// Whether the last quoted scalar read spanned lines.
    quoted_multiline: bool,
    /// The last [`Self::column`] query and the start of its line, so that
    /// queries moving forward scan each byte once.
    line_cache: std::cell::Cell<(usize, usize)>,
    /// Bytes examined so far, for the tests that check the reader's work
    /// grows linearly with the text.
    #[cfg(test)]
    work: std::cell::Cell<usize>,
}

fn is_blank_or_end(byte: Option<u8>) -> bool {
    matches!(byte, None | Some(b' ' | b'\n'))
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Self {
        Reader {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            depth: 0,
            depth_in_flow: 0,
            quoted_multiline: false,
            line_cache: std::cell::Cell::new((0, 0)),
            #[cfg(test)]
            work: std::cell::Cell::new(0),
        }
    }

    /// Counts `bytes` examined (tests only).
    #[inline]
    fn tick(&self, bytes: usize) {
        #[cfg(test)]
        self.work.set(self.work.get() + bytes);
        #[cfg(not(test))]
        let _ = bytes;
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.tick(1);
        self.bytes.get(at).copied()
    }

    fn unsupported(&self, message: &str) -> Unsupported {
        Unsupported {
            message: message.to_owned(),
            offset: Some(self.pos),
            limit: false,
        }
    }

    fn line_end(&self, from: usize) -> usize {
        let end = self
            .bytes
            .get(from..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            .map_or(self.bytes.len(), |i| from + i);
        self.tick(end.saturating_sub(from) + 1);
        end
    }

    /// The byte after the line break at or after `from` (or the end).
    fn next_line_start(&self, from: usize) -> usize {
        (self.line_end(from) + 1).min(self.bytes.len())
    }

    fn column(&self, at: usize) -> usize {
        let (cached_at, cached_start) = self.line_cache.get();
        let line_start = if cached_at <= at {
            // Only the bytes since the last query need a look.
            self.tick(at - cached_at + 1);
            self.bytes[cached_at..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(cached_start, |i| cached_at + i + 1)
        } else {
            let start = self.bytes[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            self.tick(at - start + 1);
            start
        };
        self.line_cache.set((at, line_start));
        at - line_start
    }

    fn is_marker(&self, line_start: usize, marker: &[u8]) -> bool {
        self.bytes
            .get(line_start..line_start + 3)
            .is_some_and(|head| head == marker)
            && is_blank_or_end(self.byte(line_start + 3))
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Unsupported {
                message: format!("nested deeper than {MAX_DEPTH} levels"),
                offset: Some(self.pos),
                limit: true,
            });
        }
        Ok(())
    }

    /// From a line start, skips blank and comment lines; the start of the
    /// next line with content (`pos` moved there), or `None` at the end.
    fn next_line_raw(&mut self) -> Result<Option<usize>> {
        loop {
            let start = self.pos;
            if start >= self.bytes.len() {
                return Ok(None);
            }
            let mut at = start;
            while self.byte(at) == Some(b' ') {
                at += 1;
            }
            match self.byte(at) {
                None => {
                    self.pos = self.bytes.len();
                    return Ok(None);
                }
                Some(b'\n') => self.pos = at + 1,
                Some(b'#') => self.pos = self.next_line_start(at),
                Some(b'\t') => {
                    self.pos = at;
                    return Err(self.unsupported("tab in indentation"));
                }
                Some(_) => return Ok(Some(start)),
            }
        }
    }

    /// Like [`Self::next_line_raw`], but a document marker also ends the
    /// search; the indentation and first content byte of the line.
    fn next_content_line(&mut self) -> Result<Option<(usize, usize)>> {
        let Some(start) = self.next_line_raw()? else {
            return Ok(None);
        };
        if self.is_marker(start, b"---") || self.is_marker(start, b"...") {
            return Ok(None);
        }
        let mut at = start;
        while self.byte(at) == Some(b' ') {
            at += 1;
        }
        Ok(Some((at - start, at)))
    }

    fn skip_spaces(&mut self) {
        while self.byte(self.pos) == Some(b' ') {
            self.pos += 1;
        }
    }

    /// Accepts only spaces and a comment up to the line break, then moves to
    /// the next line.
    fn finish_line(&mut self) -> Result<()> {
        let before = self.pos;
        self.skip_spaces();
        match self.byte(self.pos) {
            None => Ok(()),
            Some(b'\n') => {
                self.pos += 1;
                Ok(())
            }
            Some(b'#')
                if self.pos > before
                    || self.pos == 0
                    || matches!(self.byte(self.pos - 1), Some(b' ' | b'\n')) =>
            {
                self.pos = self.next_line_start(self.pos);
                Ok(())
            }
            Some(_) => Err(self.unsupported("unexpected text after a value")),
        }
    }

    /// Reads what starts at `pos`: a node inside a collection indented
    /// `parent` (-1 at the root).
    fn start_node(&mut self, parent: isize, context: Context) -> Result<Start<'a>> {
        self.skip_spaces();
        match self.byte(self.pos) {
            None | Some(b'\n' | b'#') => {
                self.finish_line()?;
                let Some((indent, content)) = self.next_content_line()? else {
                    return Ok(EMPTY);
                };
                let is_dash =
                    self.byte(content) == Some(b'-') && is_blank_or_end(self.byte(content + 1));
                if indent as isize > parent {
                    self.pos = content;
                    self.start_inline(parent, Context::Item)
                } else if indent as isize == parent && context == Context::Value && is_dash {
                    self.pos = content;
                    Ok(Start::BlockSeq { indent })
                } else {
                    Ok(EMPTY)
                }
            }
            Some(b'\t') => Err(self.unsupported("tab after an indicator")),
            Some(b'-' | b'.')
                if (self.pos == 0 || self.byte(self.pos - 1) == Some(b'\n'))
                    && (self.is_marker(self.pos, b"---") || self.is_marker(self.pos, b"...")) =>
            {
                Ok(EMPTY)
            }
            Some(_) => self.start_inline(parent, context),
        }
    }

    /// A node whose first byte is at `pos`.
    fn start_inline(&mut self, parent: isize, context: Context) -> Result<Start<'a>> {
        let first = self.pos;
        let nested_allowed = context != Context::Value;
        let Some(first_byte) = self.byte(first) else {
            return Ok(EMPTY);
        };
        match first_byte {
            b'-' if is_blank_or_end(self.byte(first + 1)) => {
                if !nested_allowed {
                    return Err(self.unsupported("sequence on a key's line"));
                }
                Ok(Start::BlockSeq {
                    indent: self.column(first),
                })
            }
            quote @ (b'"' | b'\'') => {
                let value = self.quoted(quote, parent)?;
                let multiline = self.quoted_multiline;
                self.skip_spaces();
                if self.byte(self.pos) == Some(b':') && is_blank_or_end(self.byte(self.pos + 1)) {
                    if !nested_allowed || multiline {
                        return Err(self.unsupported("quoted key where a value is expected"));
                    }
                    self.pos = first;
                    return Ok(Start::BlockMap {
                        indent: self.column(first),
                    });
                }
                self.finish_line()?;
                Ok(Start::Scalar {
                    value,
                    plain: false,
                })
            }
            open @ (b'{' | b'[') => {
                self.pos = first + 1;
                Ok(if open == b'{' {
                    Start::FlowMap
                } else {
                    Start::FlowSeq
                })
            }
            b'|' => self.literal(parent).map(|value| Start::Scalar {
                value: Cow::Owned(value),
                plain: false,
            }),
            b'>' | b'&' | b'*' | b'!' | b'%' | b'@' | b'`' | b'?' | b',' | b']' | b'}' | b'#' => {
                Err(self.unsupported("indicator this reader leaves to serde-saphyr"))
            }
            b':' if is_blank_or_end(self.byte(first + 1)) => {
                Err(self.unsupported("empty mapping key"))
            }
            _ => {
                let (end, colon, comment) = self.scan_plain_line(first)?;
                if colon.is_some() {
                    if !nested_allowed {
                        return Err(self.unsupported("mapping on a key's line"));
                    }
                    return Ok(Start::BlockMap {
                        indent: self.column(first),
                    });
                }
                let value = self.plain_rest(first, end, comment, parent)?;
                Ok(Start::Scalar { value, plain: true })
            }
        }
    }

    /// Scans a plain scalar's line from `from`: where its text ends (before
    /// trailing spaces), the `:` that makes it a key, and whether a comment
    /// ends the line.
    fn scan_plain_line(&self, from: usize) -> Result<(usize, Option<usize>, bool)> {
        let mut at = from;
        let (end, colon, comment) = loop {
            match self.byte(at) {
                None | Some(b'\n') => break (at, None, false),
                Some(b':') if is_blank_or_end(self.byte(at + 1)) => break (at, Some(at), false),
                Some(b'#') if at > from && self.byte(at - 1) == Some(b' ') => {
                    break (at, None, true);
                }
                Some(b'\t') => {
                    return Err(Unsupported {
                        message: "tab in a plain scalar".into(),
                        offset: Some(at),
                        limit: false,
                    });
                }
                Some(_) => at += 1,
            }
        };
        let mut trimmed = end;
        while trimmed > from && self.bytes[trimmed - 1] == b' ' {
            trimmed -= 1;
        }
        Ok((trimmed, colon, comment))
    }

    /// A plain scalar whose first line is `from..end`; folds in the more
    /// indented lines that continue it.
    fn plain_rest(
        &mut self,
        from: usize,
        end: usize,
        comment: bool,
        parent: isize,
    ) -> Result<Cow<'a, str>> {
        let first = &self.text[from..end];
        self.pos = self.next_line_start(end);
        if comment {
            return Ok(Cow::Borrowed(first));
        }
        let mut folded: Option<String> = None;
        loop {
            // Count empty lines, then look at the next line with text.
            let mut line = self.pos;
            let mut empty_lines = 0usize;
            let (indent, content) = loop {
                if line >= self.bytes.len() {
                    return Ok(folded.map_or(Cow::Borrowed(first), Cow::Owned));
                }
                let mut at = line;
                while self.byte(at) == Some(b' ') {
                    at += 1;
                }
                match self.byte(at) {
                    Some(b'\n') => {
                        empty_lines += 1;
                        line = at + 1;
                    }
                    None => return Ok(folded.map_or(Cow::Borrowed(first), Cow::Owned)),
                    Some(_) => break (at - line, at),
                }
            };
            if indent as isize <= parent
                || self.is_marker(line, b"---")
                || self.is_marker(line, b"...")
            {
                return Ok(folded.map_or(Cow::Borrowed(first), Cow::Owned));
            }
            if matches!(self.byte(content), Some(b'#' | b'\t')) {
                self.pos = content;
                return Err(self.unsupported("comment or tab inside a multi-line plain scalar"));
            }
            let (text_end, colon, comment) = self.scan_plain_line(content)?;
            if colon.is_some() {
                self.pos = content;
                return Err(self.unsupported("mapping inside a multi-line plain scalar"));
            }
            let value = folded.get_or_insert_with(|| first.to_owned());
            if empty_lines == 0 {
                value.push(' ');
            } else {
                value.extend(std::iter::repeat_n('\n', empty_lines));
            }
            value.push_str(&self.text[content..text_end]);
            self.pos = self.next_line_start(text_end);
            if comment {
                return Ok(folded.map_or(Cow::Borrowed(first), Cow::Owned));
            }
        }
    }

    /// A quoted scalar at `pos` (its opening quote); `pos` ends after the
    /// closing quote. Continuation lines must be indented past `parent`.
    fn quoted(&mut self, quote: u8, parent: isize) -> Result<Cow<'a, str>> {
        let open = self.pos;
        let body = open + 1;
        self.quoted_multiline = false;
        // The common case: one line, nothing to unescape.
        let mut at = body;
        while let Some(byte) = self.byte(at) {
            if byte == quote {
                if quote == b'\'' && self.byte(at + 1) == Some(b'\'') {
                    break;
                }
                self.pos = at + 1;
                return Ok(Cow::Borrowed(&self.text[body..at]));
            }
            if byte == b'\n' || (quote == b'"' && byte == b'\\') {
                break;
            }
            at += 1;
        }
        let mut value = String::new();
        // Length of `value` without the blanks that a line break would drop.
        let mut kept = 0usize;
        let mut run = body;
        at = body;
        loop {
            let Some(byte) = self.byte(at) else {
                self.pos = open;
                return Err(self.unsupported("unterminated quoted scalar"));
            };
            let special = byte == quote || byte == b'\n' || (quote == b'"' && byte == b'\\');
            if !special {
                at += 1;
                continue;
            }
            let segment = &self.text[run..at];
            value.push_str(segment);
            if segment.bytes().any(|b| b != b' ' && b != b'\t') {
                kept = value.len() - (segment.len() - segment.trim_end_matches([' ', '\t']).len());
            }
            if byte == quote {
                if quote == b'\'' && self.byte(at + 1) == Some(b'\'') {
                    value.push('\'');
                    kept = value.len();
                    at += 2;
                    run = at;
                    continue;
                }
                self.pos = at + 1;
                return Ok(Cow::Owned(value));
            }
            if byte == b'\\' {
                if self.byte(at + 1) == Some(b'\n') {
                    // An escaped line break joins the lines without a space.
                    self.quoted_multiline = true;
                    kept = value.len();
                    at = self.continuation(at + 2, parent, &mut value, false)?;
                    kept = kept.max(value.len());
                    run = at;
                    continue;
                }
                at = self.escape(at, &mut value)?;
                kept = value.len();
                run = at;
                continue;
            }
            // A line break folds: trailing blanks go, then a space or the
            // empty lines' breaks.
            self.quoted_multiline = true;
            value.truncate(kept);
            at = self.continuation(at + 1, parent, &mut value, true)?;
            kept = value.len();
            run = at;
        }
    }

    /// Skips the indentation of the lines after a break inside a quoted
    /// scalar, adding a break per empty line (or one space for a folded
    /// break without them); the position of the next text.
    fn continuation(
        &mut self,
        mut line: usize,
        parent: isize,
        value: &mut String,
        folded: bool,
    ) -> Result<usize> {
        let mut empty_lines = 0usize;
        loop {
            if self.is_marker(line, b"---") || self.is_marker(line, b"...") {
                self.pos = line;
                return Err(self.unsupported("document marker inside a quoted scalar"));
            }
            let mut at = line;
            while self.byte(at) == Some(b' ') {
                at += 1;
            }
            match self.byte(at) {
                Some(b'\n') => {
                    empty_lines += 1;
                    line = at + 1;
                }
                None | Some(b'\t') => {
                    self.pos = at;
                    return Err(self.unsupported("tab or end inside a quoted scalar"));
                }
                Some(_) => {
                    if ((at - line) as isize) <= parent {
                        self.pos = at;
                        return Err(self.unsupported("quoted scalar line not indented"));
                    }
                    if empty_lines > 0 {
                        value.extend(std::iter::repeat_n('\n', empty_lines));
                    } else if folded {
                        value.push(' ');
                    }
                    return Ok(at);
                }
            }
        }
    }

    /// Decodes the escape at `at` (a backslash) onto `value`; the position
    /// after it.
    fn escape(&mut self, at: usize, value: &mut String) -> Result<usize> {
        let Some(code) = self.byte(at + 1) else {
            self.pos = at;
            return Err(self.unsupported("unterminated escape"));
        };
        let simple = match code {
            b'0' => Some('\0'),
            b'a' => Some('\u{7}'),
            b'b' => Some('\u{8}'),
            b't' | b'\t' => Some('\t'),
            b'n' => Some('\n'),
            b'v' => Some('\u{b}'),
            b'f' => Some('\u{c}'),
            b'r' => Some('\r'),
            b'e' => Some('\u{1b}'),
            b' ' => Some(' '),
            b'"' => Some('"'),
            b'/' => Some('/'),
            b'\\' => Some('\\'),
            b'N' => Some('\u{85}'),
            b'_' => Some('\u{a0}'),
            b'L' => Some('\u{2028}'),
            b'P' => Some('\u{2029}'),
            _ => None,
        };
        if let Some(ch) = simple {
            value.push(ch);
            return Ok(at + 2);
        }
        let digits = match code {
            b'x' => 2,
            b'u' => 4,
            b'U' => 8,
            _ => {
                self.pos = at;
                return Err(self.unsupported("unknown escape"));
            }
        };
        let hex = self
            .text
            .get(at + 2..at + 2 + digits)
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
        let ch = hex
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .and_then(char::from_u32);
        match ch {
            Some(ch) => {
                value.push(ch);
                Ok(at + 2 + digits)
            }
            None => {
                self.pos = at;
                Err(self.unsupported("invalid escape"))
            }
        }
    }

    /// A literal block scalar at `pos` (its `|`); `pos` ends at the first
    /// line after it.
    fn literal(&mut self, parent: isize) -> Result<String> {
        #[derive(PartialEq)]
        enum Chomp {
            Clip,
            Strip,
            Keep,
        }
        let mut chomp = Chomp::Clip;
        let mut explicit = None;
        let mut at = self.pos + 1;
        for _ in 0..2 {
            match self.byte(at) {
                Some(b'-') if chomp == Chomp::Clip => chomp = Chomp::Strip,
                Some(b'+') if chomp == Chomp::Clip => chomp = Chomp::Keep,
                Some(digit @ b'1'..=b'9') if explicit.is_none() => {
                    explicit = Some(usize::from(digit - b'0'));
                }
                _ => break,
            }
            at += 1;
        }
        if !is_blank_or_end(self.byte(at)) {
            self.pos = at;
            return Err(self.unsupported("block scalar header"));
        }
        self.pos = at;
        self.finish_line()?;
        let base = usize::try_from(parent).unwrap_or(0);
        let indent = match explicit {
            Some(increment) => base + increment,
            None => {
                // The first line with text sets the indentation; empty lines
                // before it may not be indented further.
                let least = usize::try_from(parent + 1).unwrap_or(0).max(1);
                let mut line = self.pos;
                let mut widest_empty = 0usize;
                loop {
                    let mut col = line;
                    while self.byte(col) == Some(b' ') {
                        col += 1;
                    }
                    match self.byte(col) {
                        Some(b'\n') => {
                            widest_empty = widest_empty.max(col - line);
                            line = col + 1;
                        }
                        // Spaces before the end count like an empty line.
                        None => break widest_empty.max(col - line).max(least),
                        Some(b'\t') => {
                            self.pos = col;
                            return Err(self.unsupported("tab in a block scalar's indentation"));
                        }
                        Some(_) => {
                            let found = (col - line).max(least);
                            if widest_empty > found {
                                self.pos = line;
                                return Err(self.unsupported("over-indented empty line"));
                            }
                            break found;
                        }
                    }
                }
            }
        };
        if chomp == Chomp::Keep {
            // Trailing empty lines' indentation rules differ subtly here.
            return Err(self.unsupported("keep-chomped block scalar"));
        }
        let mut value = String::new();
        // Length of `value` up to the end of the last line with text.
        let mut text_len = 0usize;
        let mut ended_with_break = false;
        let mut any_text = false;
        loop {
            let line = self.pos;
            if line >= self.bytes.len() {
                break;
            }
            let mut col = line;
            while col < line + indent && self.byte(col) == Some(b' ') {
                col += 1;
            }
            let full = col == line + indent;
            match self.byte(col) {
                Some(b'\n') => {
                    value.push('\n');
                    self.pos = col + 1;
                }
                None => {
                    self.pos = col;
                    break;
                }
                Some(b'\t') if !full => {
                    self.pos = col;
                    return Err(self.unsupported("tab in a block scalar's indentation"));
                }
                Some(_) if full => {
                    let end = self.line_end(col);
                    value.push_str(&self.text[col..end]);
                    text_len = value.len();
                    any_text = true;
                    ended_with_break = end < self.bytes.len();
                    if ended_with_break {
                        value.push('\n');
                    }
                    self.pos = self.next_line_start(end);
                }
                // A less indented line ends the scalar.
                Some(_) => {
                    self.pos = line;
                    break;
                }
            }
        }
        if self.pos >= self.bytes.len() && !self.text.ends_with('\n') {
            // Readers disagree on a block scalar that ends the text without
            // a line break.
            return Err(
                self.unsupported("block scalar at the end of the text without a line break")
            );
        }
        value.truncate(text_len);
        if chomp == Chomp::Clip && any_text && ended_with_break {
            value.push('\n');
        }
        Ok(value)
    }

    /// A scalar inside a flow collection, at `pos`.
    fn flow_scalar(&mut self) -> Result<Start<'a>> {
        match self.byte(self.pos) {
            Some(quote @ (b'"' | b'\'')) => {
                let value = self.quoted(quote, -1)?;
                if self.quoted_multiline {
                    return Err(self.unsupported("multi-line flow collection"));
                }
                Ok(Start::Scalar {
                    value,
                    plain: false,
                })
            }
            Some(b'[') => {
                self.pos += 1;
                Ok(Start::FlowSeq)
            }
            Some(b'{') => {
                self.pos += 1;
                Ok(Start::FlowMap)
            }
            None
            | Some(
                b'\n' | b'\t' | b'#' | b',' | b']' | b'}' | b'&' | b'*' | b'!' | b'|' | b'>' | b'%'
                | b'@' | b'`' | b'?' | b':',
            ) => Err(self.unsupported("unexpected byte in a flow collection")),
            Some(b'-')
                if is_blank_or_end(self.byte(self.pos + 1))
                    || matches!(
                        self.byte(self.pos + 1),
                        Some(b',' | b'[' | b']' | b'{' | b'}')
                    ) =>
            {
                Err(self.unsupported("dash in a flow collection"))
            }
            Some(_) => {
                let from = self.pos;
                let mut at = from;
                loop {
                    match self.byte(at) {
                        None | Some(b'\n' | b'\t') => {
                            return Err(self.unsupported("multi-line flow collection"));
                        }
                        Some(b',' | b'[' | b']' | b'{' | b'}') => break,
                        Some(b':') if is_blank_or_end(self.byte(at + 1)) => break,
                        Some(b':')
                            if matches!(
                                self.byte(at + 1),
                                Some(b',' | b'?' | b'[' | b']' | b'{' | b'}')
                            ) =>
                        {
                            return Err(self.unsupported("colon before a flow indicator"));
                        }
                        Some(b'#') if self.byte(at - 1) == Some(b' ') => {
                            return Err(self.unsupported("comment in a flow collection"));
                        }
                        Some(_) => at += 1,
                    }
                }
                let value = self.text[from..at].trim_end_matches(' ');
                self.pos = at;
                Ok(Start::Scalar {
                    value: Cow::Borrowed(value),
                    plain: true,
                })
            }
        }
    }

    fn skip_flow_spaces(&mut self) -> Result<()> {
        self.skip_spaces();
        match self.byte(self.pos) {
            None | Some(b'\n' | b'#' | b'\t') => {
                Err(self.unsupported("multi-line flow collection"))
            }
            Some(_) => Ok(()),
        }
    }
}

/// A node being deserialized.
struct Node<'r, 'a> {
    reader: &'r mut Reader<'a>,
    start: Start<'a>,
}

fn simple_integer(text: &str) -> Option<std::result::Result<u64, i64>> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let well_formed = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    if !well_formed {
        return None;
    }
    if negative {
        text.parse::<i64>().ok().map(Err)
    } else {
        text.parse::<u64>().ok().map(Ok)
    }
}

/// True for every plain scalar YAML may resolve to a number (and a
/// few more).
fn may_be_number(text: &str) -> bool {
    if !text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.')) {
        return false;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    let radix_digits = |prefix: &str, radix: u32| {
        unsigned.strip_prefix(prefix).is_some_and(|digits| {
            let digits = digits.trim_start_matches(['+', '-']);
            !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
        })
    };
    radix_digits("0x", 16)
        || radix_digits("0o", 8)
        || radix_digits("0b", 2)
        || unsigned.starts_with('.')
        || text
            .strip_prefix('+')
            .unwrap_or(text)
            .parse::<f64>()
            .is_ok()
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

impl<'r, 'a> Node<'r, 'a> {
    fn visit_string<V: Visitor<'a>>(value: Cow<'a, str>, visitor: V) -> Result<V::Value> {
        match value {
            Cow::Borrowed(text) => visitor.visit_borrowed_str(text),
            Cow::Owned(text) => visitor.visit_string(text),
        }
    }

    fn mismatch(&self, wanted: &str) -> Unsupported {
        self.reader.unsupported(&format!("not {wanted}"))
    }

    fn plain_scalar(&self) -> Option<&str> {
        match &self.start {
            Start::Scalar { value, plain: true } => Some(value),
            _ => None,
        }
    }

    fn is_empty_plain(&self) -> bool {
        self.plain_scalar().is_some_and(str::is_empty)
    }

    fn visit_collection<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        let Node { reader, start } = self;
        reader.enter()?;
        let value = match start {
            Start::BlockMap { indent } => {
                let mut access = BlockMap {
                    reader: &mut *reader,
                    indent,
                    first: true,
                    done: false,
                };
                let value = visitor.visit_map(&mut access)?;
                if !access.done {
                    return Err(reader.unsupported("mapping not read to its end"));
                }
                value
            }
            Start::BlockSeq { indent } => {
                let mut access = BlockSeq {
                    reader: &mut *reader,
                    indent,
                    first: true,
                    done: false,
                };
                let value = visitor.visit_seq(&mut access)?;
                if !access.done {
                    return Err(reader.unsupported("sequence not read to its end"));
                }
                value
            }
            Start::FlowMap | Start::FlowSeq => {
                let outermost = reader.depth_in_flow == 0;
                let is_map = matches!(start, Start::FlowMap);
                reader.depth_in_flow += 1;
                let mut access = Flow {
                    reader: &mut *reader,
                    first: true,
                    done: false,
                };
                let value = if is_map {
                    visitor.visit_map(&mut access)
                } else {
                    visitor.visit_seq(&mut access)
                };
                let done = access.done;
                reader.depth_in_flow -= 1;
                let value = value?;
                if !done {
                    return Err(reader.unsupported("flow collection not read to its end"));
                }
                if outermost {
                    reader.finish_line()?;
                }
                value
            }
            Start::Scalar { .. } => return Err(reader.unsupported("not a collection")),
        };
        reader.depth -= 1;
        Ok(value)
    }
}

impl<'a> Deserializer<'a> for Node<'_, 'a> {
    type Error = Unsupported;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        let Start::Scalar { value, plain } = self.start else {
            return self.visit_collection(visitor);
        };
        if !plain {
            return Self::visit_string(value, visitor);
        }
        if is_null(&value) {
            return visitor.visit_unit();
        }
        if let Some(flag) = boolean(&value) {
            return visitor.visit_bool(flag);
        }
        if may_be_number(&value) {
            // YAML also reads hex, octal, floats, infinities...; only
            // plain decimal integers are resolved here.
            return match simple_integer(&value) {
                Some(Ok(unsigned)) => visitor.visit_u64(unsigned),
                Some(Err(signed)) => visitor.visit_i64(signed),
                None => Err(self.reader.unsupported("number-like plain scalar")),
            };
        }
        Self::visit_string(value, visitor)
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.plain_scalar().and_then(boolean) {
            Some(flag) => visitor.visit_bool(flag),
            None => Err(self.mismatch("a boolean")),
        }
    }

    fn deserialize_i8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.plain_scalar().and_then(simple_integer) {
            Some(Ok(unsigned)) => match i64::try_from(unsigned) {
                Ok(signed) => visitor.visit_i64(signed),
                Err(_) => Err(self.mismatch("an i64")),
            },
            Some(Err(signed)) => visitor.visit_i64(signed),
            None => Err(self.mismatch("an integer")),
        }
    }

    fn deserialize_u8<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u16<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.plain_scalar().and_then(simple_integer) {
            Some(Ok(unsigned)) => visitor.visit_u64(unsigned),
            _ => Err(self.mismatch("an unsigned integer")),
        }
    }

    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        // Only integers and plain decimal fractions; serde-saphyr handles the rest.
        let number = self.plain_scalar().and_then(|text| {
            let digits = text.strip_prefix('-').unwrap_or(text);
            let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
            let decimal = !whole.is_empty()
                && (whole.len() == 1 || !whole.starts_with('0'))
                && whole.bytes().all(|b| b.is_ascii_digit())
                && fraction.bytes().all(|b| b.is_ascii_digit())
                && !(digits.contains('.') && fraction.is_empty());
            decimal.then(|| text.parse::<f64>().ok()).flatten()
        });
        match number {
            Some(number) => visitor.visit_f64(number),
            None => Err(self.mismatch("a decimal number")),
        }
    }

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.start {
            Start::Scalar { value, .. } => Self::visit_string(value, visitor),
            _ => Err(self.mismatch("a string")),
        }
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'a>>(self, _visitor: V) -> Result<V::Value> {
        Err(self.mismatch("bytes"))
    }

    fn deserialize_byte_buf<V: Visitor<'a>>(self, _visitor: V) -> Result<V::Value> {
        Err(self.mismatch("bytes"))
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        if self.plain_scalar().is_some_and(is_null) {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        if self.plain_scalar().is_some_and(is_null) {
            visitor.visit_unit()
        } else {
            Err(self.mismatch("null"))
        }
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.start {
            Start::BlockSeq { .. } | Start::FlowSeq => self.visit_collection(visitor),
            _ if self.is_empty_plain() => visitor.visit_seq(Empty),
            _ => Err(self.mismatch("a sequence")),
        }
    }

    fn deserialize_tuple<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        match self.start {
            Start::BlockMap { .. } | Start::FlowMap => self.visit_collection(visitor),
            _ if self.is_empty_plain() => visitor.visit_map(Empty),
            _ => Err(self.mismatch("a mapping")),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        // Unit variants written as scalars; tagged forms go to serde-saphyr.
        match self.start {
            Start::Scalar { value, .. } if !value.is_empty() => {
                let variant: de::value::CowStrDeserializer<'a, Unsupported> =
                    value.into_deserializer();
                visitor.visit_enum(variant)
            }
            _ => Err(self.mismatch("a unit variant")),
        }
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value> {
        if let Start::Scalar { .. } = self.start {
            return visitor.visit_unit();
        }
        self.visit_collection(IgnoredAny)?;
        visitor.visit_unit()
    }
}

/// The entries of an empty plain scalar read as a collection.
struct Empty;

impl<'a> MapAccess<'a> for Empty {
    type Error = Unsupported;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, _seed: K) -> Result<Option<K::Value>> {
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, _seed: V) -> Result<V::Value> {
        Err(de::Error::custom("no value in an empty mapping"))
    }
}

impl<'a> SeqAccess<'a> for Empty {
    type Error = Unsupported;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, _seed: T) -> Result<Option<T::Value>> {
        Ok(None)
    }
}

struct BlockMap<'r, 'a> {
    reader: &'r mut Reader<'a>,
    indent: usize,
    first: bool,
    done: bool,
}

/// YAML's limit on the length of an implicit key (serde-saphyr's too).
const MAX_KEY_LEN: usize = 1024;

impl<'a> MapAccess<'a> for BlockMap<'_, 'a> {
    type Error = Unsupported;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.done {
            return Ok(None);
        }
        let reader = &mut *self.reader;
        if !self.first {
            match reader.next_content_line()? {
                Some((indent, content)) if indent == self.indent => reader.pos = content,
                Some((indent, _)) if indent > self.indent => {
                    return Err(reader.unsupported("over-indented line in a mapping"));
                }
                _ => {
                    self.done = true;
                    return Ok(None);
                }
            }
        }
        self.first = false;
        let key_start = reader.pos;
        let (key, plain) = match reader.byte(key_start) {
            Some(quote @ (b'"' | b'\'')) => {
                let key = reader.quoted(quote, self.indent as isize)?;
                if reader.quoted_multiline {
                    return Err(reader.unsupported("multi-line key"));
                }
                reader.skip_spaces();
                (key, false)
            }
            Some(b'-' | b'?' | b':') if is_blank_or_end(reader.byte(key_start + 1)) => {
                return Err(reader.unsupported("a key this reader leaves to serde-saphyr"));
            }
            Some(
                b'[' | b']' | b'{' | b'}' | b'|' | b'>' | b'&' | b'*' | b'!' | b'%' | b'@' | b'`'
                | b',' | b'#',
            ) => {
                return Err(reader.unsupported("a key this reader leaves to serde-saphyr"));
            }
            _ => {
                let (end, colon, _) = reader.scan_plain_line(key_start)?;
                let Some(colon) = colon else {
                    return Err(reader.unsupported("a mapping line without a key"));
                };
                reader.pos = colon;
                (Cow::Borrowed(&reader.text[key_start..end]), true)
            }
        };
        if reader.pos - key_start > MAX_KEY_LEN {
            return Err(reader.unsupported("key too long"));
        }
        if reader.byte(reader.pos) != Some(b':') || !is_blank_or_end(reader.byte(reader.pos + 1)) {
            return Err(reader.unsupported("key without a colon"));
        }
        reader.pos += 1;
        seed.deserialize(Node {
            reader,
            start: Start::Scalar { value: key, plain },
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value> {
        let start = self
            .reader
            .start_node(self.indent as isize, Context::Value)?;
        seed.deserialize(Node {
            reader: &mut *self.reader,
            start,
        })
    }
}

struct BlockSeq<'r, 'a> {
    reader: &'r mut Reader<'a>,
    indent: usize,
    first: bool,
    done: bool,
}

impl<'a> SeqAccess<'a> for BlockSeq<'_, 'a> {
    type Error = Unsupported;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.done {
            return Ok(None);
        }
        let reader = &mut *self.reader;
        if !self.first {
            match reader.next_content_line()? {
                Some((indent, content))
                    if indent == self.indent
                        && reader.byte(content) == Some(b'-')
                        && is_blank_or_end(reader.byte(content + 1)) =>
                {
                    reader.pos = content;
                }
                Some((indent, _)) if indent > self.indent => {
                    return Err(reader.unsupported("over-indented line in a sequence"));
                }
                // Less indented, or the next key of the mapping that holds
                // this sequence at its own indentation.
                _ => {
                    self.done = true;
                    return Ok(None);
                }
            }
        }
        self.first = false;
        reader.pos += 1;
        let start = reader.start_node(self.indent as isize, Context::Item)?;
        seed.deserialize(Node { reader, start }).map(Some)
    }
}

/// The entries of a one-line flow mapping or sequence.
struct Flow<'r, 'a> {
    reader: &'r mut Reader<'a>,
    first: bool,
    done: bool,
}

impl<'a> Flow<'_, 'a> {
    /// Steps over the separator before the next entry; false at the end.
    fn next_entry(&mut self, close: u8) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let reader = &mut *self.reader;
        reader.skip_flow_spaces()?;
        if !self.first {
            if reader.byte(reader.pos) == Some(b',') {
                reader.pos += 1;
                reader.skip_flow_spaces()?;
            } else if reader.byte(reader.pos) != Some(close) {
                return Err(reader.unsupported("flow entries not separated by commas"));
            }
        }
        if reader.byte(reader.pos) == Some(close) {
            reader.pos += 1;
            self.done = true;
            return Ok(false);
        }
        self.first = false;
        Ok(true)
    }
}

impl<'a> MapAccess<'a> for Flow<'_, 'a> {
    type Error = Unsupported;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if !self.next_entry(b'}')? {
            return Ok(None);
        }
        let reader = &mut *self.reader;
        let key = reader.flow_scalar()?;
        if !matches!(key, Start::Scalar { .. }) {
            return Err(reader.unsupported("collection as a flow key"));
        }
        reader.skip_flow_spaces()?;
        if reader.byte(reader.pos) != Some(b':') {
            return Err(reader.unsupported("flow key without a value"));
        }
        reader.pos += 1;
        seed.deserialize(Node { reader, start: key }).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value> {
        let reader = &mut *self.reader;
        reader.skip_flow_spaces()?;
        let start = if matches!(reader.byte(reader.pos), Some(b',' | b'}')) {
            EMPTY
        } else {
            reader.flow_scalar()?
        };
        seed.deserialize(Node { reader, start })
    }
}

impl<'a> SeqAccess<'a> for Flow<'_, 'a> {
    type Error = Unsupported;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if !self.next_entry(b']')? {
            return Ok(None);
        }
        let reader = &mut *self.reader;
        let start = reader.flow_scalar()?;
        seed.deserialize(Node { reader, start }).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::Value;

    fn fast(text: &str) -> Result<Vec<Value>> {
        let mut documents = Vec::new();
        for_each_document(text, |value: Option<Value>| {
            documents.push(value.unwrap_or(Value::Null));
        })?;
        Ok(documents)
    }

    /// The documents as the preview's fallback reads them.
    fn fallback_documents(text: &str) -> std::result::Result<Vec<Value>, serde_saphyr::Error> {
        let documents = serde_saphyr::from_str_multiple_with_options::<
            Option<Value>,
            Vec<Option<Value>>,
        >(text, super::super::saphyr_options(text))?;
        Ok(documents
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }

    /// Whether the fast reader accepted `text`; when it did, its documents
    /// must be the fallback's (empty documents aside).
    fn agrees_with_fallback(text: &str) -> bool {
        let Ok(documents) = fast(text) else {
            return false;
        };
        let expected = match fallback_documents(text) {
            Ok(expected) => expected,
            Err(err) => panic!("accepted {text:?}, which serde-saphyr rejects: {err}"),
        };
        let non_null = |values: &[Value]| -> Vec<Value> {
            values.iter().filter(|v| !v.is_null()).cloned().collect()
        };
        assert_eq!(
            non_null(&documents),
            non_null(&expected),
            "read differently: {text:?}"
        );
        true
    }

    /// (text, read by the fast reader)
    const CASES: &[(&str, bool)] = &[
        ("a: 1\nb: x\n", true),
        ("a:\n  b: 1\n  c: [1, 2, x]\n", true),
        ("a:\n- 1\n- two\n-\n- c: d\n  e: f\nb: 2\n", true),
        ("- - a\n  - b\n- c\n", true),
        ("a: \"x\\ty\\u00e9\\x41\\U0001F600\"\nb: 'it''s'\n", true),
        ("a: some long\n  plain text\n\n  after empty\nb: 1\n", true),
        ("a: \"quoted long\n  text  \n\n  more\"\nb: 1\n", true),
        ("a: \"esc\\\n  aped\\ \n  x\"\n", true),
        (
            "a: |\n  line1\n   line2\n\n  line3\n\nb: |-\n  x\n  y\nc: |\n  last\n",
            true,
        ),
        ("a: |2\n    indented\n   less\n", true),
        (
            "# comment\n---\na: 1 # trailing\n# between\nb: \"x\" # c\n...\n---\nc: 3\n",
            true,
        ),
        ("---\n---\na: b\n", true),
        ("a: {}\nb: []\nc: {x: 1, \"y\": [a, b], z: }\n", true),
        (
            "a: null\nb: ~\nc:\nd: true\ne: False\nf: -5\nk: 12345678901234567890\n",
            true,
        ),
        ("g: 007\n", false),
        ("h: 1.5\n", false),
        ("i: 0x10\n", false),
        ("j: .inf\n", false),
        ("uid: 0b9c2c1e\nargs: [--port=8080, -v]\n", true),
        ("a: &x 1\nb: *x\n", false),
        ("a: !tag x\n", false),
        ("a: >\n  folded\n", false),
        ("? complex\n: key\n", false),
        ("%YAML 1.2\n---\na: 1\n", false),
        (
            "kubernetes.io/hostname: n1\nf:metadata:\n  .: {}\n  k:{\"type\":\"Ready\"}: {}\n",
            true,
        ),
        ("image: registry:5000/app:1\nurl: http://x/y#frag\n", true),
        ("\"quoted key\": 1\n'single': 2\n", true),
        ("a:\n  - x\n  - y\n", true),
        ("a: 'multi\n  line'\n", true),
        ("a: \"\"\nb: ''\n", true),
        ("- a\n-\n  b\n", true),
        ("key:    \n  value\n", true),
        ("a: |\n\n  text\n", true),
        ("a: |-\n  text\n\n\nb: 1\n", true),
        ("a: ключ\nб: \"в\"\n", true),
        ("", true),
        ("# only a comment\n", true),
        ("just a scalar\n", true),
        ("- 1\n- 2\n", true),
        // Malformed: left to serde-saphyr.
        ("a: 1\n  b: 2\n", false),
        ("a: b: c\n", false),
        ("a: 'x' y\n", false),
        ("a: [1, 2\n  , 3]\n", false),
        ("a: \"unterminated\n", false),
        ("a:\tb\n", false),
        ("a: 1\r\nb: 2\r\n", false),
        ("a: {z:}\n", false),
        ("a: 1\n...\nb: 2\n", false),
        // Read differently by YAML readers: left to serde-saphyr.
        ("a: |\n  no final line break", false),
        ("a: [b, -]\n", false),
    ];

    /// Shaped like `kubectl get pods -o yaml`: a `List`, literal blocks,
    /// wrapped plain and double-quoted strings, flow sequences.
    const KUBECTL: &str = r#"apiVersion: v1
items:
- apiVersion: v1
  kind: Pod
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{},"name":"web","namespace":"default"}}
      note: a long annotation value that kubectl wraps over several lines because
        it is longer than eighty characters
    creationTimestamp: "2026-01-01T00:00:00Z"
    labels:
      app: web
      koordinator.sh/qosClass: LS
    name: web
    namespace: default
    uid: 0b9c2c1e-2f0e-4a35-9d59-0a6a2a3d7c11
  spec:
    containers:
    - args:
      - --port=8080
      - '8080'
      command: ["/bin/web", "-v"]
      image: registry:5000/web:1.2
      name: web
      resources:
        limits:
          cpu: "2"
          memory: 4Gi
        requests:
          cpu: 500m
          memory: 1Gi
      securityContext: {}
    nodeName: node-a
    priority: 9500
    tolerations:
    - effect: NoExecute
      key: node.kubernetes.io/not-ready
      operator: Exists
      tolerationSeconds: 300
  status:
    conditions:
    - lastProbeTime: null
      message: "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane:
        }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 No preemption
        victims found for incoming pod."
      status: "True"
      type: Ready
    phase: Running
    qosClass: Burstable
kind: List
metadata:
  resourceVersion: ""
"#;

    #[test]
    fn kubectl_output_is_read_fast() {
        assert!(agrees_with_fallback(KUBECTL), "{:?}", fast(KUBECTL).err());
    }

    #[test]
    fn reads_like_the_fallback_or_gives_up() {
        for (text, read_fast) in CASES {
            let accepted = agrees_with_fallback(text);
            assert_eq!(accepted, *read_fast, "{text:?}: {:?}", fast(text).err());
        }
    }

    #[test]
    fn damaged_text_is_read_like_the_fallback_or_left_to_it() {
        // Every truncation, deletion, replacement and insertion of one byte
        // must either agree with serde-saphyr or give up; never panic.
        let mut texts: Vec<&str> = CASES.iter().map(|(text, _)| *text).collect();
        texts.push(include_str!("../../tests/data/preview-snapshot.yaml"));
        texts.push(KUBECTL);
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut accepted = 0usize;
        for text in texts {
            let bytes = text.as_bytes();
            for at in 0..bytes.len() {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let replacement = b" \n:-#'\"|{}[],x0\t"[(seed >> 33) as usize % 16];
                let mut variants = vec![bytes[..at].to_vec()];
                let mut deleted = bytes.to_vec();
                deleted.remove(at);
                variants.push(deleted);
                let mut replaced = bytes.to_vec();
                replaced[at] = replacement;
                variants.push(replaced);
                let mut inserted = bytes.to_vec();
                inserted.insert(at, replacement);
                variants.push(inserted);
                for variant in variants {
                    if let Ok(variant) = std::str::from_utf8(&variant) {
                        accepted += usize::from(agrees_with_fallback(variant));
                    }
                }
            }
        }
        assert!(accepted > 1000, "only {accepted} variants read fast");
    }

    /// Reads `text` and returns whether it was read and the bytes examined.
    fn work(text: &str) -> (bool, usize) {
        let mut reader = Reader::new(text);
        let read = read_documents(&mut reader, |_: Option<Value>| {}).is_ok();
        (read, reader.work.get())
    }

    #[test]
    fn work_grows_linearly_with_the_text() {
        let n = 20_000;
        let deep_dedents: String = (0..n / 100)
            .map(|i| {
                (0..100)
                    .map(|d| format!("{}k{i}x{d}:\n", " ".repeat(d)))
                    .collect::<String>()
                    + &format!("{}v: x\n", " ".repeat(100))
            })
            .collect();
        let shapes = [
            // One long line of quoted flow entries.
            format!("x: [{}]\n", vec!["\"a\""; n].join(", ")),
            format!(
                "x: {{{}}}\n",
                (0..n)
                    .map(|i| format!("'k{i}': 'v'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("x: [{}]\n", vec!["a"; n].join(", ")),
            // Nested sequences opened on one line, many times.
            format!("x:\n{}", format!("{}y\n", "- ".repeat(100)).repeat(n / 100)),
            // Deep block mappings closing many levels at once.
            deep_dedents,
            // Quoted keys and long wrapped scalars.
            (0..n)
                .map(|i| format!("\"key {i}\": \"value\"\n"))
                .collect(),
            format!("x: {}\n", vec!["word"; n].join("\n  ")),
        ];
        for text in shapes {
            let (read, work) = work(&text);
            assert!(read, "{}", &text[..200.min(text.len())]);
            assert!(
                work <= 16 * text.len(),
                "{} bytes examined for {} bytes of {:?}...",
                work,
                text.len(),
                &text[..80.min(text.len())]
            );
        }
    }

    #[test]
    fn work_stays_linear_at_the_deepest_nesting_read() {
        // Just inside MAX_DEPTH (the document's mapping is the first level):
        // what a depth-quadratic reader would spend most on.
        let depth = MAX_DEPTH - 2;
        let repeat = 200;
        let flow = format!(
            "x:\n{}",
            format!("- {}y{}\n", "[".repeat(depth), "]".repeat(depth)).repeat(repeat)
        );
        let flow_maps = format!(
            "x:\n{}",
            format!("- {}y{}\n", "{k: ".repeat(depth), "}".repeat(depth)).repeat(repeat)
        );
        let block: String = (0..repeat)
            .map(|i| {
                (0..depth)
                    .map(|d| format!("{}k{i}x{d}:\n", " ".repeat(d)))
                    .collect::<String>()
                    + &format!("{}v: x\n", " ".repeat(depth))
            })
            .collect();
        let sequences = format!(
            "x:\n{}",
            format!("{}y\n", "- ".repeat(depth)).repeat(repeat)
        );
        for text in [flow, flow_maps, block, sequences] {
            let (read, work) = work(&text);
            assert!(read, "{}", &text[..200.min(text.len())]);
            assert!(
                work <= 16 * text.len(),
                "{} bytes examined for {} bytes of {:?}...",
                work,
                text.len(),
                &text[..80.min(text.len())]
            );
        }
        // One level deeper is refused as a limit, without a hand-over.
        let too_deep = format!("x: {}y{}\n", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let refused = for_each_document(&too_deep, |_: Option<Value>| {}).unwrap_err();
        assert!(refused.is_limit(), "{refused}");
    }

    #[test]
    fn unknown_fields_are_skipped() {
        #[derive(Deserialize)]
        struct Kind {
            kind: String,
        }
        let text = "kind: Pod\nspec:\n  containers:\n  - name: a\n    args: |\n      x\n  other: {a: [1, 2]}\nstatus: 'x'\n";
        let mut kinds = Vec::new();
        for_each_document(text, |object: Kind| kinds.push(object.kind)).unwrap();
        assert_eq!(kinds, ["Pod"]);
    }
}
