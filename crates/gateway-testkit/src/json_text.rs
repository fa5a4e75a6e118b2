//! JSON text written with the freedoms a client has (escapes, whitespace, number forms, a repeated key), for
//! property tests of the gateway's body readers: where the gateway reads one body two ways (a direct reading for
//! valid bodies, a value reading that decides everything else), these are the bodies on which two readers differ.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Number, Value, json};

/// How a value is written out: each choice is one a conforming JSON writer may make.
#[derive(Debug, Clone)]
pub struct Style {
    /// Per character of a string: write it as a `\u` escape (UTF-16, surrogate pairs beyond the BMP).
    pub escapes: Vec<bool>,
    /// Whitespace between tokens.
    pub spaces: Vec<&'static str>,
    /// Integers written as `1e2` or `100.0`.
    pub exotic_numbers: bool,
    /// Repeat the first key of an object with another value before its real one.
    pub repeat_first_key: bool,
}

/// Any way of writing.
pub fn style() -> impl Strategy<Value = Style> {
    (
        prop::collection::vec(any::<bool>(), 0..32),
        prop::collection::vec(select(vec!["", " ", "\n", "\t", "\r\n  "]), 1..8),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(escapes, spaces, exotic_numbers, repeat_first_key)| Style {
            escapes,
            spaces,
            exotic_numbers,
            repeat_first_key,
        })
}

struct Writer<'a> {
    style: &'a Style,
    out: String,
    step: usize,
}

impl Writer<'_> {
    fn space(&mut self) {
        self.step += 1;
        let space = self.style.spaces[self.step % self.style.spaces.len()];
        self.out.push_str(space);
    }

    fn escape(&mut self) -> bool {
        self.step += 1;
        !self.style.escapes.is_empty() && self.style.escapes[self.step % self.style.escapes.len()]
    }

    fn string(&mut self, text: &str) {
        self.out.push('"');
        for c in text.chars() {
            let escaped = self.escape();
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                c if (c as u32) < 0x20 || escaped => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn number(&mut self, number: &Number) {
        match number.as_u64() {
            Some(n) if self.style.exotic_numbers && n > 0 && n % 10 == 0 => {
                let mut mantissa = n;
                let mut exponent = 0;
                while mantissa % 10 == 0 {
                    mantissa /= 10;
                    exponent += 1;
                }
                self.out.push_str(&format!("{mantissa}e{exponent}"));
            }
            Some(n) if self.style.exotic_numbers => self.out.push_str(&format!("{n}.0")),
            _ => self.out.push_str(&number.to_string()),
        }
    }

    fn value(&mut self, value: &Value) {
        self.space();
        match value {
            Value::Null => self.out.push_str("null"),
            Value::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Value::Number(number) => self.number(number),
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Value::Object(fields) => {
                self.out.push('{');
                let mut first = true;
                if self.style.repeat_first_key
                    && let Some((key, _)) = fields.iter().next()
                {
                    self.space();
                    self.string(key);
                    self.out.push(':');
                    self.value(&json!("an earlier value of a repeated key"));
                    first = false;
                }
                for (key, item) in fields {
                    if !first {
                        self.out.push(',');
                    }
                    first = false;
                    self.space();
                    self.string(key);
                    self.space();
                    self.out.push(':');
                    self.value(item);
                }
                self.space();
                self.out.push('}');
            }
        }
        self.space();
    }
}

/// `value` as JSON text in `style`: the same value to any conforming reader.
pub fn write(value: &Value, style: &Style) -> String {
    let mut writer = Writer { style, out: String::new(), step: 0 };
    writer.value(value);
    writer.out
}

/// Three fixed ways of writing: compact; every character escaped, spaced out, integers in other forms; every other
/// character escaped with a repeated key.
pub fn fixed_styles() -> [Style; 3] {
    [
        Style { escapes: vec![false], spaces: vec![""], exotic_numbers: false, repeat_first_key: false },
        Style { escapes: vec![true], spaces: vec![" ", "\n"], exotic_numbers: true, repeat_first_key: false },
        Style { escapes: vec![true, false], spaces: vec!["\t", ""], exotic_numbers: false, repeat_first_key: true },
    ]
}

/// Every object that differs from `full` (an object) in one place: one of its members, or one member of a member
/// that is an object, removed or given each of `hostile`.
pub fn single_changes(full: &Value, hostile: &[Value]) -> Vec<Value> {
    let mut changed = Vec::new();
    let Some(members) = full.as_object() else { return changed };
    let mut change = |path: &[&str], value: Option<&Value>| {
        let mut body = full.clone();
        let (last, parents) = path.split_last().unwrap_or((&"", &[]));
        let parent = parents.iter().fold(&mut body, |at, key| &mut at[*key]);
        if let Some(object) = parent.as_object_mut() {
            match value {
                Some(value) => object.insert((*last).to_owned(), value.clone()),
                None => object.remove(*last),
            };
        }
        changed.push(body);
    };
    for (name, member) in members {
        for value in std::iter::once(None).chain(hostile.iter().map(Some)) {
            change(&[name], value);
        }
        for field in member.as_object().into_iter().flat_map(|fields| fields.keys()) {
            for value in std::iter::once(None).chain(hostile.iter().map(Some)) {
                change(&[name, field], value);
            }
        }
    }
    changed
}

/// Panics naming the first body that `agree` refuses, among `bodies` written in each of [`fixed_styles`].
pub fn assert_each_read_alike(bodies: &[Value], agree: impl Fn(&str) -> Result<(), String>) {
    let styles = fixed_styles();
    let disagreements: Vec<String> = bodies
        .iter()
        .flat_map(|body| styles.iter().map(move |style| write(body, style)))
        .filter_map(|text| agree(&text).err())
        .collect();
    assert!(
        disagreements.is_empty(),
        "{} bodies read differently, the first: {}",
        disagreements.len(),
        disagreements.first().map_or("", String::as_str)
    );
}
