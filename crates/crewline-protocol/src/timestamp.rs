//! Event timestamps: kept as they arrived, written the way the reference writes them.

use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{Datelike, Local, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use serde::{Serialize, Serializer};
use serde_json::Number;

/// When an event happened, kept exactly as it arrived so forwarded events keep it.
#[derive(Debug, Clone, PartialEq)]
pub enum Timestamp {
    /// A string, usually ISO 8601 or `YYYY-MM-DD HH:MM:SS`; kept even if it cannot be parsed.
    Text(String),
    /// A JSON number (Unix seconds), kept as the same integer or float.
    Unix(Number),
}

/// Above this magnitude a Unix number is read as milliseconds, as pydantic (the reference's
/// validator) does.
const MILLIS_THRESHOLD: f64 = 2e10;

impl Timestamp {
    /// The current naive local time in the reference's format, `2026-11-30T06:43:19.875855`
    /// (Python's `datetime.now().isoformat()`: no fraction when the microseconds are 0).
    pub fn now() -> Self {
        Self::Text(now_text(SystemTime::now()))
    }

    /// Seconds since the Unix epoch, or `None` if the timestamp cannot be parsed.
    ///
    /// Accepts ISO 8601 with or without offset and fraction (a `T` or a space between date and
    /// time; no offset means local time, as the reference writes it), a bare date, and Unix
    /// seconds as a number or a numeric string (milliseconds beyond ±2e10, like pydantic).
    pub fn to_unix_seconds(&self) -> Option<f64> {
        let (secs, nanos) = self.unix_parts()?;
        // i64 -> f64 is exact for any plausible date; the fraction adds sub-second precision.
        Some(secs as f64 + f64::from(nanos) / 1e9)
    }

    /// The instant this timestamp names, or `None` if it cannot be parsed (see
    /// [`Timestamp::to_unix_seconds`] for the accepted forms).
    pub fn parse(&self) -> Option<SystemTime> {
        let (secs, nanos) = self.unix_parts()?;
        let whole = Duration::from_secs(secs.unsigned_abs());
        let base = if secs >= 0 {
            UNIX_EPOCH.checked_add(whole)?
        } else {
            UNIX_EPOCH.checked_sub(whole)?
        };
        base.checked_add(Duration::from_nanos(u64::from(nanos)))
    }

    /// Whole seconds (floor) and nanoseconds since the epoch: exact for text forms, so a
    /// microsecond timestamp does not lose precision on its way to a `SystemTime`.
    fn unix_parts(&self) -> Option<(i64, u32)> {
        match self {
            Self::Unix(number) => number_parts(number),
            Self::Text(text) => {
                let text = text.trim();
                parse_iso(text).or_else(|| parse_numeric_text(text))
            }
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(text) => f.write_str(text),
            Self::Unix(number) => fmt::Display::fmt(number, f),
        }
    }
}

impl From<String> for Timestamp {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<&str> for Timestamp {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(text) => serializer.serialize_str(text),
            Self::Unix(number) => number.serialize(serializer),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS`.
const SECOND_TEXT_LEN: usize = 19;

thread_local! {
    /// The last Unix second a timestamp was written for, and its local date and time: every
    /// event of a turn falls in the same second, and the time-zone lookup and the formatting
    /// (about a tenth of a text turn's instructions) are then done once per second.
    static LAST_SECOND: std::cell::RefCell<(u64, String)> =
        const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

/// `at` in the reference's format: naive local time, microseconds unless they are 0.
fn now_text(at: SystemTime) -> String {
    let Ok(since) = at.duration_since(UNIX_EPOCH) else {
        // A clock before 1970 (never on a live server): no cache.
        return format_naive(&chrono::DateTime::<Local>::from(at).naive_local());
    };
    let micros = since.subsec_micros();
    let mut out = String::with_capacity(SECOND_TEXT_LEN + 7);
    LAST_SECOND.with_borrow_mut(|(second, text)| {
        if *second != since.as_secs() {
            let naive = chrono::DateTime::<Local>::from(at).naive_local();
            // Formatted without its fraction: the microseconds are written below.
            *text = format_naive(&naive.with_nanosecond(0).unwrap_or(naive));
            *second = since.as_secs();
        }
        out.push_str(text);
    });
    if micros != 0 {
        push_micros(&mut out, micros);
    }
    out
}

/// `.uuuuuu`, six digits.
fn push_micros(out: &mut String, micros: u32) {
    let mut digits = [b'0'; 7];
    digits[0] = b'.';
    let mut rest = micros.min(999_999);
    for digit in digits[1..].iter_mut().rev() {
        // `rest % 10` is a single digit.
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    // ASCII digits and a dot.
    out.push_str(std::str::from_utf8(&digits).unwrap_or_default());
}

/// Python's `datetime.isoformat()` of a naive datetime.
pub(crate) fn format_naive(time: &NaiveDateTime) -> String {
    let mut out = String::with_capacity(26);
    // A leap second shows as nanoseconds >= 1e9 in chrono; Python has no such value.
    let micros = (time.nanosecond() / 1_000).min(999_999);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        time.year(),
        time.month(),
        time.day(),
        time.hour(),
        time.minute(),
        time.second()
    );
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    out
}

/// A Unix number, with pydantic's seconds-or-milliseconds rule.
fn number_parts(number: &Number) -> Option<(i64, u32)> {
    if let Some(int) = number.as_i64() {
        if int.unsigned_abs() as f64 <= MILLIS_THRESHOLD {
            return Some((int, 0));
        }
        return Some((
            int.div_euclid(1_000),
            (int.rem_euclid(1_000) as u32) * 1_000_000,
        ));
    }
    float_parts(number.as_f64()?)
}

fn float_parts(mut seconds: f64) -> Option<(i64, u32)> {
    if !seconds.is_finite() {
        return None;
    }
    if seconds.abs() > MILLIS_THRESHOLD {
        seconds /= 1_000.0;
    }
    let whole = seconds.floor();
    // Out of range for i64 seconds: no meaningful instant.
    if !(-9.0e15..=9.0e15).contains(&whole) {
        return None;
    }
    let nanos = ((seconds - whole) * 1e9).round().clamp(0.0, 999_999_999.0);
    // Both casts are in range: checked just above.
    Some((whole as i64, nanos as u32))
}

/// Unix seconds written as a string (`"1700000000"`, `"1700000000.5"`), as pydantic accepts.
fn parse_numeric_text(text: &str) -> Option<(i64, u32)> {
    // Rust's float parser also takes `inf` and `NaN`; only plain decimal numbers are meant.
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'));
    if !plain {
        return None;
    }
    if let Ok(int) = text.parse::<i64>() {
        return number_parts(&Number::from(int));
    }
    float_parts(text.parse::<f64>().ok()?)
}

/// A tiny cursor over ASCII bytes; every read is bounds-checked so no input can panic.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Exactly `count` ASCII digits as a number.
    fn digits(&mut self, count: usize) -> Option<u32> {
        let mut value = 0u32;
        for _ in 0..count {
            let byte = self.peek().filter(u8::is_ascii_digit)?;
            value = value * 10 + u32::from(byte - b'0');
            self.pos += 1;
        }
        Some(value)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

/// `YYYY-MM-DD[(T|t| )HH:MM[:SS[(.|,)fraction]]][Z|z|±HH[:MM|MM]]`.
fn parse_iso(text: &str) -> Option<(i64, u32)> {
    let mut cur = Cursor {
        bytes: text.as_bytes(),
        pos: 0,
    };
    let year = cur.digits(4)?;
    if !cur.eat(b'-') {
        return None;
    }
    let month = cur.digits(2)?;
    if !cur.eat(b'-') {
        return None;
    }
    let day = cur.digits(2)?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    if cur.at_end() {
        return local_parts(&date.and_hms_opt(0, 0, 0)?);
    }
    if !(cur.eat(b'T') || cur.eat(b't') || cur.eat(b' ')) {
        return None;
    }
    let hour = cur.digits(2)?;
    if !cur.eat(b':') {
        return None;
    }
    let minute = cur.digits(2)?;
    let mut second = 0;
    let mut nanos = 0;
    if cur.eat(b':') {
        second = cur.digits(2)?;
        if cur.eat(b'.') || cur.eat(b',') {
            nanos = fraction_nanos(&mut cur)?;
        }
    }
    let naive = date.and_hms_nano_opt(hour, minute, second, nanos)?;
    if cur.at_end() {
        return local_parts(&naive);
    }
    let offset_secs = offset_seconds(&mut cur)?;
    if !cur.at_end() {
        return None;
    }
    let utc = naive.and_utc();
    Some((utc.timestamp() - offset_secs, utc.timestamp_subsec_nanos()))
}

/// At least one digit; digits past nanoseconds are ignored.
fn fraction_nanos(cur: &mut Cursor<'_>) -> Option<u32> {
    let mut nanos = 0u32;
    let mut count = 0u32;
    while let Some(byte) = cur.peek().filter(u8::is_ascii_digit) {
        if count < 9 {
            nanos = nanos * 10 + u32::from(byte - b'0');
        }
        count += 1;
        cur.pos += 1;
    }
    if count == 0 {
        return None;
    }
    Some(nanos * 10u32.pow(9 - count.min(9)))
}

/// `Z`, `z`, `±HH`, `±HHMM` or `±HH:MM`, in seconds east of UTC.
fn offset_seconds(cur: &mut Cursor<'_>) -> Option<i64> {
    if cur.eat(b'Z') || cur.eat(b'z') {
        return Some(0);
    }
    let sign = if cur.eat(b'+') {
        1
    } else if cur.eat(b'-') {
        -1
    } else {
        return None;
    };
    let hours = cur.digits(2)?;
    let minutes = if cur.at_end() {
        0
    } else {
        cur.eat(b':');
        cur.digits(2)?
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * i64::from(hours * 3_600 + minutes * 60))
}

/// A naive time read as local time, as the reference writes it.
fn local_parts(naive: &NaiveDateTime) -> Option<(i64, u32)> {
    let instant = match Local.from_local_datetime(naive).earliest() {
        Some(local) => local.timestamp(),
        // In a DST gap the wall time does not exist: use the offset in force just after it.
        None => {
            let offset = Local.offset_from_utc_datetime(naive);
            naive.and_utc().timestamp() - i64::from(offset.local_minus_utc())
        }
    };
    Some((instant, naive.nanosecond().min(999_999_999)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap_or_default()
    }

    /// What chrono writes for `at` without the per-second cache.
    fn uncached(at: SystemTime) -> String {
        format_naive(&chrono::DateTime::<Local>::from(at).naive_local())
    }

    #[test]
    fn now_is_the_local_time_of_the_instant_in_and_across_cached_seconds() {
        let base = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        for offset_micros in [0, 7, 875_855, 999_999, 1_000_000, 1_000_001, 61_500_000] {
            let at = base + Duration::from_micros(offset_micros);
            assert_eq!(
                now_text(at),
                uncached(at),
                "{offset_micros} us after the base"
            );
        }
        // Back to an earlier second: the cache is keyed by the second, not only refreshed forward.
        assert_eq!(now_text(base), uncached(base));
        let now = SystemTime::now();
        assert_eq!(now_text(now), uncached(now));
    }

    #[test]
    fn now_drops_the_fraction_on_a_whole_second_like_python() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        assert_eq!(now_text(at).len(), SECOND_TEXT_LEN);
        assert_eq!(now_text(at + Duration::from_micros(5)).len(), 26);
    }

    #[test]
    fn format_matches_python_isoformat() {
        assert_eq!(
            format_naive(&naive("2026-11-30 06:43:19.875855")),
            "2026-11-30T06:43:19.875855"
        );
        assert_eq!(
            format_naive(&naive("2026-11-30 06:43:19.000007")),
            "2026-11-30T06:43:19.000007"
        );
        // Python drops the fraction when microseconds are 0, also if nanoseconds are not.
        assert_eq!(
            format_naive(&naive("2026-11-30 06:43:19")),
            "2026-11-30T06:43:19"
        );
        assert_eq!(
            format_naive(&naive("2026-11-30 06:43:19.000000999")),
            "2026-11-30T06:43:19"
        );
    }

    #[test]
    fn fraction_scales_to_nanoseconds() {
        let parts = |text: &str| parse_iso(&format!("2030-01-02T03:04:05.{text}Z"));
        let base = parse_iso("2030-01-02T03:04:05Z").map(|(secs, _)| secs);
        assert_eq!(parts("5").map(|(_, n)| n), Some(500_000_000));
        assert_eq!(parts("123456").map(|(_, n)| n), Some(123_456_000));
        assert_eq!(parts("1234567891234").map(|(_, n)| n), Some(123_456_789));
        assert_eq!(parts("5").map(|(s, _)| s), base);
    }
}
