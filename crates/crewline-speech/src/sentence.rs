//! Sentence aggregation: streamed text chunks in, complete sentences out.
//!
//! A platform's text-to-speech front-end receives the crew's reply as small chunks (a few
//! characters each, cut anywhere) and must start speaking as soon as it has a whole sentence:
//! speaking fragments sounds broken, waiting for the whole reply adds seconds of silence.
//! [`SentenceAggregator`] decides where sentences end from the text alone, so the sentences it
//! yields do not depend on where the chunks were cut.
//!
//! # Rules
//! - A sentence ends after a run of end marks (`.`, `!`, `?`, `…`, `?!`, `!!!`), together with
//!   the quotes and brackets that close it (`."`, `?)`, `!」`).
//! - Latin marks (`. ! ?`) end a sentence only when whitespace follows (so `3.5`, `$1,200.50`,
//!   `example.com` and `Yahoo!Mail` stay whole). CJK, Indic and other scripts' marks (`。！？`,
//!   `।`, `؟`, `։`, `።`, `။`, `។`) end it whatever follows, since those scripts put no space
//!   after them.
//! - A period after a known abbreviation does not end a sentence: titles (`Dr.`, `Mr.`, `Prof.`),
//!   `e.g.`, `i.e.`, `vs.`, single-letter initials (`J. K. Rowling`), and `No.`, `p.`, `Fig.`
//!   before a number (`No. 5`). After `etc.`, `Inc.`, `Jr.` and dotted initialisms (`U.S.`,
//!   `a.m.`, `Ph.D.`) it ends a sentence only if the next word starts one (an uppercase or
//!   uncased letter, or an opening quote). A number alone at the start of a line (`1.`) is a
//!   list marker.
//! - An ellipsis (`...`, `…`) ends a sentence only if the next word starts one
//!   (`I don't know... Let me check.`), not in `I was thinking... maybe`.
//! - After a closing quote, a lowercase next word continues the sentence (`"Stop!" she said.`).
//! - A line break ends a sentence (lists and headings in a reply have no end marks).
//! - A sentence shorter than the minimum length ([`SentenceAggregator::with_min_chars`]) is
//!   not yielded on its own: it is merged with what follows, so `Hi! How are you?` is spoken as
//!   one sentence rather than a clipped `Hi!`.
//! - Optionally ([`SentenceAggregator::max_chars`]), a sentence that has grown past a maximum
//!   length is cut at the next clause mark (`, ; :` followed by a space, `，、；：`), so a long
//!   run-on sentence does not hold back the first audio. Off by default.
//!
//! Whether a mark ends a sentence can depend on up to the next word, so a sentence is yielded
//! once the text after it decides it; what is left is yielded by [`SentenceAggregator::flush`]
//! at the end of the turn, or dropped by [`SentenceAggregator::discard`] on an interrupt.
//!
//! # Whitespace
//! Sentences are trimmed: the whitespace between two sentences (and around the whole text)
//! belongs to neither and is dropped. Whitespace inside a sentence, line breaks included, is
//! kept as it came. So the yielded sentences, concatenated with the whitespace between them
//! put back, are exactly the input.
//!
//! Not handled: scripts without sentence punctuation (Thai), Armenian written with an ASCII
//! `:` for `։`, and abbreviations outside the lists below (a period after an unknown
//! abbreviation followed by a space ends a sentence).

/// The shortest sentence, in characters, yielded on its own by default.
pub const DEFAULT_MIN_CHARS: usize = 8;

/// Titles and Latin abbreviations after which a period never ends a sentence.
const NEVER_FINAL: &[&str] = &[
    "mr", "mrs", "ms", "mx", "dr", "prof", "rev", "hon", "st", "mt", "ft", "gen", "col", "capt",
    "lt", "sgt", "gov", "sen", "rep", "pres", "supt", "messrs", "mme", "mlle", "vs", "cf", "viz",
    "e.g", "i.e", "approx", "ca", "dept", "est", "ave", "blvd",
];

/// Abbreviations that continue a sentence when a number follows (`No. 5`, `p. 12`).
const BEFORE_NUMBER: &[&str] = &[
    "no", "nos", "nr", "p", "pp", "fig", "figs", "vol", "vols", "art", "sec", "ch", "eq", "op",
    "ref", "tel",
];

/// Abbreviations that often end a sentence: a period after one ends it only if the next word
/// starts a sentence.
const MAYBE_FINAL: &[&str] = &[
    "etc", "inc", "ltd", "co", "corp", "jr", "sr", "bros", "llc", "plc", "esq", "al",
];

/// Splits streamed text into sentences; see the [module docs](self) for the rules.
#[derive(Debug, Clone)]
pub struct SentenceAggregator {
    /// Text received and not yet yielded.
    buffer: String,
    /// Where the next scan of `buffer` starts: every mark before it was decided, and none
    /// ended a sentence.
    scan_from: usize,
    /// The shortest sentence yielded on its own, in characters.
    min_chars: usize,
    /// Past this many characters, a clause mark ends the sentence.
    max_chars: Option<usize>,
}

impl Default for SentenceAggregator {
    fn default() -> Self {
        Self::new()
    }
}

/// What a scan of the buffer found.
enum Scan {
    /// A sentence ends at this byte offset.
    Boundary(usize),
    /// No sentence ends before this offset; the rest needs more text.
    Undecided(usize),
}

/// Whether one run of end marks ends a sentence.
enum Decision {
    /// Yes, and the sentence ends at this byte offset (after the closing quotes).
    End(usize),
    /// No; scanning goes on from this offset.
    Continue(usize),
    /// The text after the marks does not say yet.
    NeedMore,
}

impl SentenceAggregator {
    /// An aggregator yielding sentences of at least [`DEFAULT_MIN_CHARS`] characters.
    pub fn new() -> Self {
        Self::with_min_chars(DEFAULT_MIN_CHARS)
    }

    /// An aggregator yielding sentences of at least `min_chars` characters (shorter ones are
    /// merged with the next; 0 or 1 yields every sentence).
    pub fn with_min_chars(min_chars: usize) -> Self {
        Self {
            buffer: String::new(),
            scan_from: 0,
            min_chars,
            max_chars: None,
        }
    }

    /// Cuts a sentence longer than `max_chars` characters at its next clause mark (`None`:
    /// never). The cut is made from the text alone, so it too is the same wherever the
    /// stream was cut.
    #[must_use]
    pub fn max_chars(mut self, max_chars: Option<usize>) -> Self {
        self.max_chars = max_chars;
        self
    }

    /// The minimum sentence length, in characters.
    pub fn min_chars(&self) -> usize {
        self.min_chars
    }

    /// Adds a chunk and returns the sentences it completed, in order.
    pub fn push(&mut self, chunk: &str) -> Vec<String> {
        self.buffer.push_str(chunk);
        let mut sentences = Vec::new();
        loop {
            match self.scan() {
                Scan::Boundary(end) => {
                    let sentence = self.buffer[..end].trim().to_owned();
                    self.buffer.drain(..end);
                    self.scan_from = 0;
                    sentences.push(sentence);
                }
                Scan::Undecided(resume) => {
                    self.scan_from = resume;
                    return sentences;
                }
            }
        }
    }

    /// Ends the turn: returns the text not yet yielded (trimmed), if any, and empties the
    /// aggregator.
    pub fn flush(&mut self) -> Option<String> {
        let rest = self.buffer.trim().to_owned();
        self.buffer.clear();
        self.scan_from = 0;
        (!rest.is_empty()).then_some(rest)
    }

    /// Drops the text not yet yielded (the caller barged in) and returns it.
    pub fn discard(&mut self) -> String {
        self.scan_from = 0;
        std::mem::take(&mut self.buffer)
    }

    /// The text received and not yet yielded.
    pub fn pending(&self) -> &str {
        &self.buffer
    }

    /// Finds the first sentence end in the buffer, or where scanning must resume.
    fn scan(&self) -> Scan {
        let text = self.buffer.as_str();
        let mut i = self.scan_from;
        while let Some(c) = text[i..].chars().next() {
            if c == '\n' {
                if self.long_enough(&text[..i]) {
                    return Scan::Boundary(i);
                }
                i += 1;
                continue;
            }
            if let Some(max) = self.max_chars
                && is_clause_mark(c)
                && text[..i].trim().chars().count() >= max.max(self.min_chars)
            {
                let after = i + c.len_utf8();
                match text[after..].chars().next() {
                    None => return Scan::Undecided(i),
                    Some(next) if next.is_whitespace() || !c.is_ascii() => {
                        return Scan::Boundary(after);
                    }
                    Some(_) => {}
                }
            }
            if is_end_mark(c) {
                match decide(text, i) {
                    Decision::End(end) if self.long_enough(&text[..end]) => {
                        return Scan::Boundary(end);
                    }
                    Decision::End(next) | Decision::Continue(next) => i = next,
                    Decision::NeedMore => return Scan::Undecided(i),
                }
                continue;
            }
            i += c.len_utf8();
        }
        Scan::Undecided(i)
    }

    fn long_enough(&self, sentence: &str) -> bool {
        let sentence = sentence.trim();
        !sentence.is_empty() && sentence.chars().count() >= self.min_chars
    }
}

/// Decides whether the run of end marks starting at byte `start` of `text` ends a sentence.
fn decide(text: &str, start: usize) -> Decision {
    let mut j = start;
    let (mut dots, mut ellipsis, mut latin, mut script) = (0usize, false, false, false);
    while let Some(c) = text[j..].chars().next().filter(|&c| is_end_mark(c)) {
        match c {
            '.' => dots += 1,
            '…' | '⋯' => ellipsis = true,
            c if is_latin_mark(c) => latin = true,
            _ => script = true,
        }
        j += c.len_utf8();
    }
    let marks_end = j;
    while let Some(c) = text[j..].chars().next().filter(|&c| is_closer(c)) {
        j += c.len_utf8();
    }
    let end = j;
    let Some(next) = text[end..].chars().next() else {
        // The marks or the closers may go on in the next chunk.
        return Decision::NeedMore;
    };
    let quoted = text[marks_end..end].chars().any(is_quote);
    if script {
        return Decision::End(end);
    }
    let spaced = next.is_whitespace() || (latin && is_cjk(next));
    if !spaced {
        return Decision::Continue(end);
    }
    // From here the marks are followed by whitespace (or, after `!`/`?`, by CJK text).
    let next_word = || next_word_start(text, end);
    if latin {
        return match (quoted, next_word()) {
            (false, _) => Decision::End(end),
            (true, None) => Decision::NeedMore,
            (true, Some(c)) if c.is_lowercase() => Decision::Continue(end),
            (true, Some(_)) => Decision::End(end),
        };
    }
    if ellipsis || dots > 1 {
        return ends_if_next_starts_sentence(next_word(), end);
    }
    let word = word_before(text, start);
    let lower = word.to_lowercase();
    if NEVER_FINAL.contains(&lower.as_str()) {
        return Decision::Continue(end);
    }
    if BEFORE_NUMBER.contains(&lower.as_str()) {
        return match next_word() {
            None => Decision::NeedMore,
            Some(c) if c.is_ascii_digit() || c == '#' => Decision::Continue(end),
            Some(_) => Decision::End(end),
        };
    }
    let mut letters = word.chars();
    if let (Some(c), None) = (letters.next(), letters.next())
        && c != 'I'
        && (c.is_uppercase() || c.is_lowercase())
    {
        // An initial, as in `J. K. Rowling`.
        return Decision::Continue(end);
    }
    if MAYBE_FINAL.contains(&lower.as_str()) || is_initialism(word) {
        return ends_if_next_starts_sentence(next_word(), end);
    }
    if quoted {
        return match next_word() {
            None => Decision::NeedMore,
            Some(c) if c.is_lowercase() => Decision::Continue(end),
            Some(_) => Decision::End(end),
        };
    }
    if is_list_marker(text, word, start) {
        return Decision::Continue(end);
    }
    Decision::End(end)
}

fn ends_if_next_starts_sentence(next: Option<char>, end: usize) -> Decision {
    match next {
        None => Decision::NeedMore,
        Some(c) if starts_sentence(c) => Decision::End(end),
        Some(_) => Decision::Continue(end),
    }
}

/// The first character after the whitespace at `from`; `None` when the text ends first.
fn next_word_start(text: &str, from: usize) -> Option<char> {
    text[from..].chars().find(|c| !c.is_whitespace())
}

/// The word just before byte `end`: back to whitespace or an opening bracket or quote.
fn word_before(text: &str, end: usize) -> &str {
    let start = text[..end]
        .char_indices()
        .rev()
        .find(|&(_, c)| c.is_whitespace() || is_opener(c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    &text[start..end]
}

/// `U.S`, `a.m`, `Ph.D`: short letter groups joined by periods (the final period excluded).
fn is_initialism(word: &str) -> bool {
    word.contains('.')
        && word.split('.').all(|part| {
            let count = part.chars().count();
            (1..=3).contains(&count) && part.chars().all(char::is_alphabetic)
        })
}

/// A number of up to three digits alone at the start of a line: `1.` in a numbered list.
fn is_list_marker(text: &str, word: &str, word_end: usize) -> bool {
    let digits = word.chars().count();
    if !(1..=3).contains(&digits) || !word.chars().all(|c| c.is_ascii_digit()) {
        return false;
    }
    let word_start = word_end - word.len();
    text[..word_start]
        .chars()
        .rev()
        .find(|c| *c != ' ' && *c != '\t')
        .is_none_or(|c| c == '\n')
}

/// Whether a word starting with `c` starts a sentence: an uppercase letter, a letter of a
/// script without case (CJK, Devanagari, Arabic), or an opening quote.
fn starts_sentence(c: char) -> bool {
    c.is_uppercase()
        || (c.is_alphabetic() && !c.is_lowercase())
        || matches!(c, '"' | '“' | '‘' | '«' | '¿' | '¡' | '「' | '『')
}

/// Characters that end a sentence (alone or in a run).
fn is_end_mark(c: char) -> bool {
    matches!(c, '.' | '…' | '⋯') || is_latin_mark(c) || is_script_mark(c)
}

/// `!` and `?` and their combined forms: they need whitespace after them.
fn is_latin_mark(c: char) -> bool {
    matches!(c, '!' | '?' | '‼' | '⁇' | '⁈' | '⁉')
}

/// End marks of scripts that put no space after them.
fn is_script_mark(c: char) -> bool {
    matches!(
        c,
        '。' // CJK full stop
            | '｡' // halfwidth ideographic full stop
            | '！' // fullwidth exclamation mark
            | '？' // fullwidth question mark
            | '．' // fullwidth full stop
            | '।' // Devanagari danda (Hindi, Sanskrit, Bengali...)
            | '॥' // double danda
            | '؟' // Arabic question mark
            | '۔' // Urdu full stop
            | '։' // Armenian full stop
            | '።' // Ethiopic full stop
            | '፧' // Ethiopic question mark
            | '။' // Myanmar section mark
            | '។' // Khmer full stop
            | '᙮' // Canadian syllabics full stop
            | '\u{37E}' // Greek question mark
            | '܀' // Syriac end of paragraph
    )
}

/// Marks between clauses, where a long sentence may be cut: ASCII ones need a space after
/// them (`1,200` is a number), the others (CJK, Arabic) do not.
fn is_clause_mark(c: char) -> bool {
    matches!(c, ',' | ';' | ':' | '，' | '、' | '；' | '：' | '،' | '؛')
}

/// Quotes and brackets that may close a sentence after its end mark.
fn is_closer(c: char) -> bool {
    is_quote(c)
        || matches!(
            c,
            ')' | ']' | '}' | '）' | '］' | '｝' | '】' | '〉' | '》' | '〕' | '*'
        )
}

fn is_quote(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '”' | '’' | '»' | '›' | '«' | '‹' | '」' | '』' | '“' | '‘'
    )
}

fn is_opener(c: char) -> bool {
    matches!(
        c,
        '(' | '[' | '{' | '"' | '\'' | '“' | '‘' | '«' | '‹' | '「' | '『' | '（' | '¿' | '¡'
    )
}

/// Han, kana, Hangul and fullwidth forms: text that follows `!` or `?` without a space.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xFF00..=0xFFEF)
}

#[cfg(test)]
mod tests;
