//! Canonical JSON: a document read (RFC 8259) into a tree whose objects
//! are sorted by name and whose numbers are exact decimals, so that two
//! spellings of one value — key order, whitespace, `1.0` against `1e0`,
//! `\u0041` against `A` — are one tree and one canonical text.

use std::fmt::{self, Write as _};

/// How deep arrays and objects may nest (as `serde_json` allows by
/// default): deeper documents are refused rather than read on the stack.
pub const DEPTH_MAX: usize = 128;

/// Largest exponent, in absolute value, a number may be written with:
/// enough for any value a service reads, small enough that the exact
/// arithmetic on it cannot overflow.
const EXPONENT_MAX: u64 = 1_000_000_000_000_000;

/// Why a body is not the JSON document a JSON fingerprint reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct JsonError {
    kind: JsonErrorKind,
    offset: usize,
}

impl JsonError {
    fn new(kind: JsonErrorKind, offset: usize) -> Self {
        JsonError { kind, offset }
    }

    /// What is wrong.
    #[must_use]
    pub const fn kind(&self) -> JsonErrorKind {
        self.kind
    }

    /// The offset in the body, in bytes, where it was found.
    #[must_use]
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

/// What is wrong with a body that is not read as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// A byte where no JSON may have it (a stray character, a bare word,
    /// a comma too many).
    Syntax,
    /// The body ends inside a value (an empty body too).
    UnexpectedEnd,
    /// Something other than whitespace after the document.
    TrailingCharacters,
    /// A string with a control character, a bad escape or a lone
    /// surrogate.
    InvalidString,
    /// Bytes that are not UTF-8.
    NotUtf8,
    /// A number written with an exponent beyond ±10^15.
    NumberOutOfRange,
    /// Arrays and objects nested deeper than [`DEPTH_MAX`].
    TooDeep,
    /// An object with two members of one name: which one counts is up to
    /// whoever reads it, so the request's meaning is not known.
    DuplicateName,
}

impl JsonErrorKind {
    /// A sentence for the client, without quotes or backslashes.
    #[must_use]
    pub const fn detail(self) -> &'static str {
        match self {
            JsonErrorKind::Syntax => "The request body is not JSON: it has a character no JSON document has there.",
            JsonErrorKind::UnexpectedEnd => "The request body is not JSON: it is empty or ends inside a value.",
            JsonErrorKind::TrailingCharacters => "The request body is not JSON: something follows the document.",
            JsonErrorKind::InvalidString => {
                "The request body is not JSON: a string has a control character, a bad escape or a lone surrogate."
            }
            JsonErrorKind::NotUtf8 => "The request body is not JSON: it is not UTF-8.",
            JsonErrorKind::NumberOutOfRange => "The request body has a number with an exponent out of range.",
            JsonErrorKind::TooDeep => "The request body nests arrays and objects more than 128 deep.",
            JsonErrorKind::DuplicateName => "The request body has an object with two members of the same name.",
        }
    }
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            JsonErrorKind::Syntax => "unexpected character",
            JsonErrorKind::UnexpectedEnd => "unexpected end of input",
            JsonErrorKind::TrailingCharacters => "characters after the document",
            JsonErrorKind::InvalidString => "invalid string",
            JsonErrorKind::NotUtf8 => "not UTF-8",
            JsonErrorKind::NumberOutOfRange => "number out of range",
            JsonErrorKind::TooDeep => "nested too deeply",
            JsonErrorKind::DuplicateName => "duplicate member name",
        })
    }
}

/// A number as an exact decimal: `digits × 10^exponent`, `digits` without
/// leading or trailing zeros (empty for zero, which has no sign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Number {
    negative: bool,
    digits: String,
    exponent: i64,
}

/// A JSON document read: objects' members sorted by name (their UTF-8
/// bytes), no two of one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
    /// An array element a fingerprint leaves out: it keeps its place, so
    /// that the elements after it keep theirs. Never read from a body.
    Excluded,
}

impl Value {
    /// Reads the JSON document `body`.
    pub(super) fn parse(body: &[u8]) -> Result<Value, JsonError> {
        let text =
            std::str::from_utf8(body).map_err(|error| JsonError::new(JsonErrorKind::NotUtf8, error.valid_up_to()))?;
        let mut reader = Reader { text, at: 0 };
        let value = reader.value(0)?;
        reader.whitespace();
        if reader.at < text.len() {
            return Err(JsonError::new(JsonErrorKind::TrailingCharacters, reader.at));
        }
        Ok(value)
    }

    /// Writes the canonical text: no whitespace, members by name, numbers
    /// in one spelling each, strings with the fewest escapes.
    pub(super) fn write(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(number) => number.write(out),
            Value::String(text) => write_string(text, out),
            Value::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (index, (name, value)) in members.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write_string(name, out);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
            // No JSON text is `~` outside a string: the mark cannot be
            // confused with any value.
            Value::Excluded => out.push('~'),
        }
    }

    /// The canonical text.
    pub(super) fn canonical(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }
}

/// `text` as a JSON string: `"` and `\` escaped, control characters as
/// their short escapes or `\u00xx`, everything else as it is.
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for char in text.chars() {
        match char {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            control if u32::from(control) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(control));
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

impl Number {
    /// The number of sign, integer digits, fraction digits and exponent as
    /// written, exactly.
    fn from_parts(negative: bool, integer: &str, fraction: &str, exponent: i64) -> Option<Number> {
        let all = format!("{integer}{fraction}");
        let digits = all.trim_start_matches('0');
        let significant = digits.trim_end_matches('0');
        if significant.is_empty() {
            return Some(Number { negative: false, digits: String::new(), exponent: 0 });
        }
        let zeros = i64::try_from(digits.len() - significant.len()).ok()?;
        let fraction_len = i64::try_from(fraction.len()).ok()?;
        let exponent = exponent.checked_sub(fraction_len)?.checked_add(zeros)?;
        Some(Number { negative, digits: significant.to_owned(), exponent })
    }

    /// One spelling per value: an integer of up to 21 digits as one
    /// (`100`), a decimal with at most 6 zeros after its point as one
    /// (`0.05`, `1.5`), anything else as `d.ddde±n` (`1.5e+30`).
    fn write(&self, out: &mut String) {
        if self.digits.is_empty() {
            out.push('0');
            return;
        }
        if self.negative {
            out.push('-');
        }
        let length = i64::try_from(self.digits.len()).unwrap_or(i64::MAX);
        // The position of the decimal point after the first digit: the
        // value is 0.digits × 10^point.
        let point = length.saturating_add(self.exponent);
        if self.exponent >= 0 && point <= 21 {
            out.push_str(&self.digits);
            out.extend(std::iter::repeat_n('0', usize::try_from(self.exponent).unwrap_or(0)));
        } else if point > 0 && point <= 21 {
            let (whole, fraction) = self.digits.split_at(usize::try_from(point).unwrap_or(0));
            let _ = write!(out, "{whole}.{fraction}");
        } else if point <= 0 && point > -6 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', usize::try_from(-point).unwrap_or(0)));
            out.push_str(&self.digits);
        } else {
            let (first, rest) = self.digits.split_at(1);
            out.push_str(first);
            if !rest.is_empty() {
                let _ = write!(out, ".{rest}");
            }
            let _ = write!(out, "e{:+}", i128::from(point) - 1);
        }
    }
}

/// A reader over a document already known to be UTF-8.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn error(&self, kind: JsonErrorKind) -> JsonError {
        JsonError::new(kind, self.at)
    }

    /// The error for the byte at hand: the end, or a stray one.
    fn unexpected(&self) -> JsonError {
        match self.peek() {
            None => self.error(JsonErrorKind::UnexpectedEnd),
            Some(_) => self.error(JsonErrorKind::Syntax),
        }
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), JsonError> {
        if self.peek() != Some(byte) {
            return Err(self.unexpected());
        }
        self.at += 1;
        Ok(())
    }

    /// One value, after whitespace, at nesting `depth`.
    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.whitespace();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number().map(Value::Number),
            Some(b't') => self.word("true", Value::Bool(true)),
            Some(b'f') => self.word("false", Value::Bool(false)),
            Some(b'n') => self.word("null", Value::Null),
            _ => Err(self.unexpected()),
        }
    }

    fn word(&mut self, word: &str, value: Value) -> Result<Value, JsonError> {
        for byte in word.bytes() {
            self.expect(byte)?;
        }
        Ok(value)
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > DEPTH_MAX {
            return Err(self.error(JsonErrorKind::TooDeep));
        }
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.unexpected()),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > DEPTH_MAX {
            return Err(self.error(JsonErrorKind::TooDeep));
        }
        self.expect(b'{')?;
        // Each member with the offset of its name, for a duplicate's error.
        let mut members: Vec<(String, Value, usize)> = Vec::new();
        self.whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(Vec::new()));
        }
        loop {
            self.whitespace();
            let offset = self.at;
            if self.peek() != Some(b'"') {
                return Err(self.unexpected());
            }
            let name = self.string()?;
            self.whitespace();
            self.expect(b':')?;
            members.push((name, self.value(depth)?, offset));
            self.whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        members.sort_by(|a, b| a.0.cmp(&b.0).then(a.2.cmp(&b.2)));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(JsonError::new(JsonErrorKind::DuplicateName, pair[1].2));
        }
        Ok(Value::Object(members.into_iter().map(|(name, value, _)| (name, value)).collect()))
    }

    /// A string, its escapes decoded.
    fn string(&mut self) -> Result<String, JsonError> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.at;
            while let Some(byte) = self.peek() {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            // Stops only at ASCII bytes, so both ends are char boundaries.
            out.push_str(self.text.get(start..self.at).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    out.push(self.escape()?);
                }
                Some(_) => return Err(self.error(JsonErrorKind::InvalidString)),
                None => return Err(self.error(JsonErrorKind::UnexpectedEnd)),
            }
        }
    }

    /// The character of an escape, after its backslash.
    fn escape(&mut self) -> Result<char, JsonError> {
        let Some(byte) = self.peek() else { return Err(self.error(JsonErrorKind::UnexpectedEnd)) };
        self.at += 1;
        let char = match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => return Err(JsonError::new(JsonErrorKind::InvalidString, self.at - 1)),
        };
        Ok(char)
    }

    /// A `\uXXXX` escape after its `u`, with the low half of a surrogate
    /// pair when it is the high one.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&high) {
            if self.peek() != Some(b'\\') || self.text.as_bytes().get(self.at + 1) != Some(&b'u') {
                return Err(self.error(JsonErrorKind::InvalidString));
            }
            self.at += 2;
            let low = self.hex4()?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(self.error(JsonErrorKind::InvalidString));
            }
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(|| self.error(JsonErrorKind::InvalidString))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut code = 0;
        for _ in 0..4 {
            let Some(byte) = self.peek() else { return Err(self.error(JsonErrorKind::UnexpectedEnd)) };
            let digit = char::from(byte).to_digit(16).ok_or_else(|| self.error(JsonErrorKind::InvalidString))?;
            code = code * 16 + digit;
            self.at += 1;
        }
        Ok(code)
    }

    /// The digits at hand (possibly none).
    fn digits(&mut self) -> &str {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.text.get(start..self.at).unwrap_or_default()
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, exactly.
    fn number(&mut self) -> Result<Number, JsonError> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let integer = self.digits().to_owned();
        if integer.is_empty() || (integer.len() > 1 && integer.starts_with('0')) {
            return Err(if integer.is_empty() { self.unexpected() } else { self.error(JsonErrorKind::Syntax) });
        }
        let fraction = if self.peek() == Some(b'.') {
            self.at += 1;
            let fraction = self.digits().to_owned();
            if fraction.is_empty() {
                return Err(self.unexpected());
            }
            fraction
        } else {
            String::new()
        };
        let exponent = self.exponent()?;
        Number::from_parts(negative, &integer, &fraction, exponent)
            .ok_or_else(|| JsonError::new(JsonErrorKind::NumberOutOfRange, start))
    }

    /// The exponent part of a number, 0 when there is none.
    fn exponent(&mut self) -> Result<i64, JsonError> {
        if !matches!(self.peek(), Some(b'e' | b'E')) {
            return Ok(0);
        }
        let start = self.at;
        self.at += 1;
        let negative = self.peek() == Some(b'-');
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.at += 1;
        }
        let digits = self.digits();
        if digits.is_empty() {
            return Err(self.unexpected());
        }
        let significant = digits.trim_start_matches('0');
        let out_of_range = JsonError::new(JsonErrorKind::NumberOutOfRange, start);
        let value = match significant.len() {
            0 => 0,
            1..=18 => significant.parse::<u64>().map_err(|_| out_of_range)?,
            _ => return Err(out_of_range),
        };
        if value > EXPONENT_MAX {
            return Err(out_of_range);
        }
        let value = i64::try_from(value).map_err(|_| out_of_range)?;
        Ok(if negative { -value } else { value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Value::parse(text.as_bytes()).expect("JSON").canonical()
    }

    fn kind(text: &[u8]) -> JsonErrorKind {
        Value::parse(text).expect_err("not JSON").kind()
    }

    #[test]
    fn one_spelling_per_number() {
        for same in ["1", "1.0", "1e0", "10e-1", "0.1e1", "1.000E+0", "100e-2"] {
            assert_eq!(canonical(same), "1", "{same}");
        }
        for zero in ["0", "-0", "0.0", "0e99", "-0.000e-5"] {
            assert_eq!(canonical(zero), "0", "{zero}");
        }
        assert_eq!(canonical("100"), "100");
        assert_eq!(canonical("1e2"), "100");
        assert_eq!(canonical("-1.50"), "-1.5");
        assert_eq!(canonical("0.05"), "0.05");
        assert_eq!(canonical("5e-7"), "5e-7");
        assert_eq!(canonical("1.5e30"), "1.5e+30");
        assert_eq!(canonical("123456789012345678901234567890"), "1.2345678901234567890123456789e+29");
        assert_ne!(canonical("0.1"), canonical("0.10000000000000001"), "exact, not as floats");
        assert_ne!(canonical("9007199254740993"), canonical("9007199254740992"));
    }

    #[test]
    fn objects_sorted_whitespace_gone_strings_unescaped() {
        let text = " { \"b\" : [1, {\"y\":null, \"x\":true}], \"a\":\"\\u0041\\n\\/\" } ";
        assert_eq!(canonical(text), r#"{"a":"A\n/","b":[1,{"x":true,"y":null}]}"#);
        assert_eq!(canonical(r#""\ud83d\ude00""#), "\"\u{1f600}\"");
        assert_eq!(canonical(r#""\u0001""#), r#""\u0001""#);
    }

    #[test]
    fn what_is_not_json_is_refused_with_its_kind() {
        assert_eq!(kind(b""), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"amount=10"), JsonErrorKind::Syntax);
        assert_eq!(kind(b"{\"a\":1,}"), JsonErrorKind::Syntax);
        assert_eq!(kind(b"[1,2"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"{} {}"), JsonErrorKind::TrailingCharacters);
        assert_eq!(kind(b"01"), JsonErrorKind::Syntax);
        assert_eq!(kind(b"1."), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"-"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind(b"\"\\ud800\""), JsonErrorKind::InvalidString);
        assert_eq!(kind(b"\"\\x\""), JsonErrorKind::InvalidString);
        assert_eq!(kind(b"\"a\nb\""), JsonErrorKind::InvalidString);
        assert_eq!(kind(b"\"\xff\""), JsonErrorKind::NotUtf8);
        assert_eq!(kind(b"1e1000000000000001"), JsonErrorKind::NumberOutOfRange);
        assert_eq!(kind(b"1e99999999999999999999"), JsonErrorKind::NumberOutOfRange);
        assert_eq!(kind(b"{\"a\":1,\"a\":1}"), JsonErrorKind::DuplicateName);
        let deep = "[".repeat(DEPTH_MAX + 1) + &"]".repeat(DEPTH_MAX + 1);
        assert_eq!(kind(deep.as_bytes()), JsonErrorKind::TooDeep);
        let deepest = "[".repeat(DEPTH_MAX) + &"]".repeat(DEPTH_MAX);
        assert!(Value::parse(deepest.as_bytes()).is_ok());
    }

    #[test]
    fn errors_say_where() {
        let error = Value::parse(b"{\"a\": tru}").expect_err("not JSON");
        assert_eq!((error.kind(), error.offset()), (JsonErrorKind::Syntax, 9));
        assert_eq!(error.to_string(), "unexpected character at byte 9");
        let duplicate = Value::parse(b"{\"a\":1, \"a\":2}").expect_err("duplicate");
        assert_eq!(duplicate.offset(), 8);
    }

    #[test]
    fn every_detail_is_a_fixed_sentence_without_quotes() {
        use JsonErrorKind::*;
        let kinds = [
            Syntax,
            UnexpectedEnd,
            TrailingCharacters,
            InvalidString,
            NotUtf8,
            NumberOutOfRange,
            TooDeep,
            DuplicateName,
        ];
        for kind in kinds {
            assert!(kind.detail().ends_with('.') && !kind.detail().contains(['"', '\\']), "{kind}");
        }
    }
}
