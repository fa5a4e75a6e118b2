//! Reading a well-formed JSON body straight into typed fields, without building a `serde_json::Value` tree.
//!
//! The rules of a body (required fields, types, the field path and precedence of each error) are stated once,
//! over the parsed value. Reading the body into typed fields directly is several times cheaper, so the hot
//! endpoints try it first, and it answers only for a body that is certainly valid: anything else (not JSON, a
//! broken rule, a repeated key, a value of a type it does not take) falls back to the value reading, which
//! decides and names the error. A direct reading must therefore never accept a body the value reading refuses;
//! serde's derive would in two ways, which [`Object`] and the depth check of [`read`] close.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// The first nesting depth at which serde_json refuses to build a value (its recursion limit).
pub const VALUE_DEPTH_LIMIT: usize = 128;

/// `T` read only from a JSON object: a derived struct also reads from an array, field by field in order, where
/// the value reading wants an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }

        deserializer.deserialize_map(ObjectVisitor(PhantomData)).map(Object)
    }
}

/// `T` read directly from a body that is a JSON object, or `None` (then the value reading decides).
///
/// Fields a derived struct does not name are skipped without serde_json's nesting limit, which the value
/// reading enforces: a body whose `[` and `{` bytes alone could nest that deep is left to the value reading.
/// (Counting the bytes, in strings too, overcounts and so only ever sends more bodies the slow way.)
pub fn read<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Option<T> {
    readable(body).and_then(read_text)
}

/// `body` as text, when a direct reading may take it: UTF-8, and no deeper than the value reading goes (see
/// [`read`]). One UTF-8 check of the whole body instead of one per string: serde_json then reads strings as they
/// are.
pub fn readable(body: &[u8]) -> Option<&str> {
    std::str::from_utf8(body).ok().filter(|text| shallow(text))
}

/// Whether `text` certainly nests less deep than the value reading's limit (see [`read`]).
pub fn shallow(text: &str) -> bool {
    openers(text) < VALUE_DEPTH_LIMIT
}

/// [`read`] of a body that [`readable`] gave.
pub fn read_text<'de, T: Deserialize<'de>>(text: &'de str) -> Option<T> {
    serde_json::from_str::<Object<T>>(text).ok().map(|Object(value)| value)
}

/// The `[` and `{` bytes of `text`: the two that read `{` with bit 0x20 set. Summed per 64-byte chunk in a byte
/// (at most 64 fits), which the compiler turns into vector code; a plain `filter().count()` went byte by byte,
/// a fifth of the direct reading.
fn openers(text: &str) -> usize {
    let in_chunk = |chunk: &[u8]| chunk.iter().map(|&byte| u8::from(byte | 0x20 == b'{')).fold(0, u8::wrapping_add);
    text.as_bytes().chunks(64).map(|chunk| usize::from(in_chunk(chunk))).sum()
}

/// A hand reading of the plainest JSON: strict JSON whose strings hold no escapes. serde's typed reading costs some
/// 200 instructions a key and a string value (its field matching, a visitor and an `Option` per field), about as
/// much again as the skipping of the same bytes (docs/benchmarks.md, s31-h); a reading built on this compares each
/// key with the names it can be. Every reading says `None` to what it does not take (an escape, a number in a form
/// it does not read, anything not JSON), for the serde reading to take or leave.
pub mod scan {
    /// Where the first `"`, `\\` or control character of `bytes` is, eight bytes at a time: a byte-by-byte
    /// search was two thirds of this reading.
    pub fn special(bytes: &[u8]) -> Option<usize> {
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
        // Bit 7 of each byte below `limit` (at most 0x80); above the first such byte a borrow may mark others,
        // so only the lowest marked byte counts.
        let below = |word: u64, limit: u8| word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGHS;
        let mut chunks = bytes.chunks_exact(8);
        let mut offset = 0;
        for chunk in chunks.by_ref() {
            let word = u64::from_le_bytes(chunk.try_into().ok()?);
            let marks = below(word ^ (ONES * u64::from(b'"')), 1)
                | below(word ^ (ONES * u64::from(b'\\')), 1)
                | below(word, 0x20);
            if marks != 0 {
                return Some(offset + marks.trailing_zeros() as usize / 8);
            }
            offset += 8;
        }
        let tail = chunks.remainder();
        tail.iter().position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20).map(|at| offset + at)
    }

    /// A key's value in a [`flat`] reading.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Flat<'a> {
        Absent,
        Null,
        Text(&'a str),
    }

    /// The values of `keys` in `text`, a JSON object whose named keys each come at most once with a string
    /// (without escapes) or `null`; the values of other keys are skipped. `None` for anything else (a named key
    /// twice, or with another value, or any body this reading does not take): what a derived struct of
    /// `Cow<str>` and `Option<Cow<str>>` fields would refuse, or read the same.
    pub fn flat<'a, const N: usize>(text: &'a str, keys: [&str; N]) -> Option<[Flat<'a>; N]> {
        let mut values = [Flat::Absent; N];
        let mut scan = Scan::new(text);
        scan.object(|scan, key| match keys.iter().position(|name| *name == key) {
            Some(index) if values[index] == Flat::Absent => {
                values[index] = if scan.null() { Flat::Null } else { Flat::Text(scan.string()?) };
                Some(())
            }
            Some(_) => None,
            None => scan.skip(),
        })?;
        scan.at_end().then_some(values)
    }

    /// How deep [`Scan::skip`] goes into the arrays and objects of a value, below the section it is in: far
    /// less than the value reading's limit ([`crate::intake::direct_json::VALUE_DEPTH_LIMIT`]), so no body it
    /// takes nests deeper than that, and its recursion stays short.
    const MAX_SKIPPED_DEPTH: usize = 64;

    /// The longest number [`Scan::skip`] takes (without an exponent): any such is far inside an `f64`'s range.
    const MAX_SKIPPED_NUMBER: usize = 100;

    /// A position in the text; every reading moves past what it read, or says `None`.
    #[derive(Debug)]
    pub struct Scan<'a> {
        text: &'a str,
        at: usize,
        /// Arrays and objects open in [`Self::skip`]: bounded (see [`MAX_SKIPPED_DEPTH`]).
        depth: usize,
    }

    impl<'a> Scan<'a> {
        pub fn new(text: &'a str) -> Self {
            Self { text, at: 0, depth: 0 }
        }

        /// Whether only whitespace is left.
        pub fn at_end(&mut self) -> bool {
            self.space();
            self.at == self.text.len()
        }

        /// JSON's whitespace (no other).
        pub fn space(&mut self) {
            let bytes = self.text.as_bytes();
            while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
                self.at += 1;
            }
        }

        /// The next byte after whitespace, not taken.
        pub fn peek(&mut self) -> Option<u8> {
            self.space();
            self.text.as_bytes().get(self.at).copied()
        }

        pub fn eat(&mut self, byte: u8) -> Option<()> {
            (self.peek()? == byte).then(|| self.at += 1)
        }

        pub fn literal(&mut self, word: &str) -> bool {
            let found = self.peek().is_some() && self.text.as_bytes()[self.at..].starts_with(word.as_bytes());
            if found {
                self.at += word.len();
            }
            found
        }

        pub fn null(&mut self) -> bool {
            self.literal("null")
        }

        /// An object, `field` reading the value of each key (and `None` to give up).
        pub fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
            self.eat(b'{')?;
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(());
            }
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                field(self, key)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }

        /// A string without escapes or control characters (JSON allows none unescaped), as it stands.
        pub fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.at;
            let length = special(&self.text.as_bytes()[start..])?;
            if self.text.as_bytes()[start + length] != b'"' {
                return None;
            }
            self.at = start + length + 1;
            // Both ends are ASCII bytes of valid UTF-8, so char boundaries.
            self.text.get(start..start + length)
        }

        pub fn optional_bool(&mut self) -> Option<Option<bool>> {
            if self.null() {
                Some(None)
            } else if self.literal("true") {
                Some(Some(true))
            } else if self.literal("false") {
                Some(Some(false))
            } else {
                None
            }
        }

        /// An array, each element skipped.
        pub fn array(&mut self) -> Option<()> {
            self.eat(b'[')?;
            if self.peek()? == b']' {
                self.at += 1;
                return Some(());
            }
            loop {
                self.skip()?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }

        /// An array, each element read by `item`.
        pub fn array_of<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
            self.eat(b'[')?;
            let mut items = Vec::new();
            if self.peek()? == b']' {
                self.at += 1;
                return Some(items);
            }
            loop {
                items.push(item(self)?);
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        return Some(items);
                    }
                    _ => return None,
                }
            }
        }

        /// Any value, skipped (see [`Self::skip`]), as its text.
        pub fn skipped(&mut self) -> Option<&'a str> {
            self.space();
            let start = self.at;
            self.skip()?;
            self.text.get(start..self.at)
        }

        /// A number as JSON writes one, as it stands.
        pub fn number(&mut self) -> Option<&'a str> {
            self.space();
            let bytes = self.text.as_bytes();
            let start = self.at;
            let mut at = start;
            let digits = |at: &mut usize| {
                let first = *at;
                while let Some(b'0'..=b'9') = bytes.get(*at) {
                    *at += 1;
                }
                *at > first
            };
            if bytes.get(at) == Some(&b'-') {
                at += 1;
            }
            match bytes.get(at) {
                Some(b'0') => at += 1,
                Some(b'1'..=b'9') => {
                    digits(&mut at);
                }
                _ => return None,
            }
            if bytes.get(at) == Some(&b'.') {
                at += 1;
                if !digits(&mut at) {
                    return None;
                }
            }
            if let Some(b'e' | b'E') = bytes.get(at) {
                at += 1;
                if let Some(b'+' | b'-') = bytes.get(at) {
                    at += 1;
                }
                if !digits(&mut at) {
                    return None;
                }
            }
            self.at = at;
            self.text.get(start..at)
        }

        /// A number read as serde_json reads one into an `f64`: correctly rounded (its `float_roundtrip`), as
        /// Rust's own parse is, integers too (its integer-to-float conversion rounds to nearest as well).
        /// An infinite one (`1e400`) is refused there, and by the rule here.
        pub fn optional_f64(&mut self) -> Option<Option<f64>> {
            if self.null() {
                return Some(None);
            }
            let number: f64 = self.number()?.parse().ok()?;
            number.is_finite().then_some(Some(number))
        }

        /// A count: digits only (serde_json takes `5.0` or `-0` for no `u64`), that fit.
        pub fn optional_u64(&mut self) -> Option<Option<u64>> {
            if self.null() {
                return Some(None);
            }
            let number = self.number()?;
            if !number.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            number.parse().ok().map(Some)
        }

        /// Any value, checked as strictly as the value reading checks it: strings without escapes, numbers
        /// without an exponent and short enough to be finite as an `f64`, nesting bounded.
        pub fn skip(&mut self) -> Option<()> {
            match self.peek()? {
                b'"' => self.string().map(drop),
                opener @ (b'{' | b'[') => {
                    self.depth += 1;
                    if self.depth > MAX_SKIPPED_DEPTH {
                        return None;
                    }
                    let skipped = if opener == b'{' { self.object(|scan, _| scan.skip()) } else { self.array() };
                    self.depth -= 1;
                    skipped
                }
                b't' => self.literal("true").then_some(()),
                b'f' => self.literal("false").then_some(()),
                b'n' => self.null().then_some(()),
                _ => {
                    let number = self.number()?;
                    (number.len() <= MAX_SKIPPED_NUMBER && !number.contains(['e', 'E'])).then_some(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::Value;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Pair {
        a: u8,
        b: u8,
    }

    fn nested(depth: usize) -> String {
        format!(r#"{{"a":1,"b":2,"x":{}0{}}}"#, "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn counts_openers() {
        assert_eq!(openers(""), 0);
        assert_eq!(openers(&"[{}]x".repeat(100)), 200);
        assert_eq!(openers(&"{".repeat(64)), 64);
        assert_eq!(openers("[{;}]ÿ{"), 3);
    }

    #[test]
    fn reads_objects_only() {
        assert_eq!(read::<Pair>(br#"{"b":2,"a":1,"c":[{}]}"#), Some(Pair { a: 1, b: 2 }));
        assert_eq!(serde_json::from_str::<Pair>("[1,2]").ok(), Some(Pair { a: 1, b: 2 }), "what Object guards");
        assert_eq!(read::<Pair>(b"[1,2]"), None);
        assert_eq!(read::<Pair>(br#"{"a":1,"b":2} x"#), None);
        assert_eq!(read::<Pair>(b"{\"a\":1,\"b\":2,\"c\":\"\xff\"}"), None);
    }

    #[test]
    fn leaves_what_the_value_reading_refuses_for_depth_to_it() {
        // The limit is serde_json's: one level less parses as a value, the limit itself does not.
        assert!(serde_json::from_str::<Value>(&nested(VALUE_DEPTH_LIMIT - 2)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(VALUE_DEPTH_LIMIT - 1)).is_err());
        // serde's derive skips an unknown field at any depth; the direct reading does not take such a body.
        assert!(serde_json::from_str::<Pair>(&nested(VALUE_DEPTH_LIMIT + 10)).is_ok(), "what the check guards");
        assert_eq!(read::<Pair>(nested(VALUE_DEPTH_LIMIT - 2).as_bytes()), Some(Pair { a: 1, b: 2 }));
        assert_eq!(read::<Pair>(nested(VALUE_DEPTH_LIMIT - 1).as_bytes()), None);
    }
}
