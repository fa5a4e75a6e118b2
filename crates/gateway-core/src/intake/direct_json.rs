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
    // One UTF-8 check of the whole body instead of one per string: serde_json then reads strings as they are.
    let text = std::str::from_utf8(body).ok()?;
    if !shallow(text) {
        return None;
    }
    read_text(text)
}

/// Whether `text` certainly nests less deep than the value reading's limit (see [`read`]).
pub fn shallow(text: &str) -> bool {
    openers(text) < VALUE_DEPTH_LIMIT
}

/// [`read`] of a body already checked as UTF-8 and [`shallow`].
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
