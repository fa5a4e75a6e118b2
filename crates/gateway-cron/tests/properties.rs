//! Property tests of cron expressions, the text operators (and the console) send to `POST /gateway/cron/jobs`.
//!
//! Expressions are generated together with the instants they mean, by a model of crontab written here
//! independently of the parser (field sets, names, `a/n`, day-of-week 7, and Vixie cron's rule for the two day
//! fields), and the schedule is held to the model: it fires at an instant exactly when the model matches it, and
//! the next instant it gives is the model's next. Any text at all gets an answer, never a panic.
#![allow(clippy::unwrap_used)] // A test fails by panicking.

use std::collections::BTreeSet;

use gateway_cron::{CronError, CronSchedule};
use proptest::prelude::*;
use proptest::sample::select;
use time::{Duration, OffsetDateTime};

/// One field of the model: its range, what `*` covers, and its names (lowercase short forms, from `min` up).
#[derive(Debug, Clone, Copy)]
struct FieldModel {
    min: u32,
    max: u32,
    star_last: u32,
    names: &'static [&'static str],
}

const MINUTE: FieldModel = FieldModel { min: 0, max: 59, star_last: 59, names: &[] };
const HOUR: FieldModel = FieldModel { min: 0, max: 23, star_last: 23, names: &[] };
const DAY: FieldModel = FieldModel { min: 1, max: 31, star_last: 31, names: &[] };
const MONTH: FieldModel = FieldModel {
    min: 1,
    max: 12,
    star_last: 12,
    names: &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
};
const WEEKDAY: FieldModel =
    FieldModel { min: 0, max: 7, star_last: 6, names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"] };

/// A field as written and the values it selects.
#[derive(Debug, Clone)]
struct Field {
    text: String,
    values: BTreeSet<u32>,
}

impl Field {
    fn starred(&self) -> bool {
        self.text.starts_with('*') || self.text.starts_with('?')
    }
}

/// A value as written: a number, or (where the field has names) its name in some case.
fn value_text(field: FieldModel, value: u32, style: u8) -> String {
    let name = field.names.get(usize::try_from(value - field.min).unwrap()).filter(|_| !style.is_multiple_of(3));
    match (name, style % 3) {
        (Some(name), 1) => (*name).to_owned(),
        (Some(name), _) => name.to_uppercase(),
        (None, _) => value.to_string(),
    }
}

fn steps(first: u32, last: u32, step: u32) -> BTreeSet<u32> {
    (first..=last).step_by(usize::try_from(step).unwrap()).collect()
}

/// One item of a list: a value, a range, either with a step.
fn item(field: FieldModel) -> impl Strategy<Value = Field> {
    let value = field.min..=field.max;
    (value.clone(), value, 0..4u8, 1..=field.max, any::<u8>(), any::<u8>()).prop_map(
        move |(a, b, kind, step, style_a, style_b)| {
            let (low, high) = (a.min(b), a.max(b));
            match kind {
                0 => Field { text: value_text(field, a, style_a), values: BTreeSet::from([a]) },
                1 => Field {
                    text: format!("{}-{}", value_text(field, low, style_a), value_text(field, high, style_b)),
                    values: steps(low, high, 1),
                },
                2 => Field {
                    text: format!("{}-{}/{step}", value_text(field, low, style_a), value_text(field, high, style_b)),
                    values: steps(low, high, step),
                },
                _ => Field {
                    text: format!("{}/{step}", value_text(field, a, style_a)),
                    values: steps(a, field.star_last.max(a), step),
                },
            }
        },
    )
}

fn field(field: FieldModel, any_mark: bool) -> impl Strategy<Value = Field> {
    let star = Just(Field { text: "*".to_owned(), values: steps(field.min, field.star_last, 1) });
    let star_step = (1..=field.max)
        .prop_map(move |step| Field { text: format!("*/{step}"), values: steps(field.min, field.star_last, step) });
    let any =
        Just(Field { text: if any_mark { "?" } else { "*" }.to_owned(), values: steps(field.min, field.star_last, 1) });
    let list = prop::collection::vec(item(field), 1..4).prop_map(|items| Field {
        text: items.iter().map(|item| item.text.as_str()).collect::<Vec<_>>().join(","),
        values: items.into_iter().flat_map(|item| item.values).collect(),
    });
    prop_oneof![3 => star, 2 => star_step, 1 => any, 6 => list]
}

/// A 5-field crontab expression and its model.
#[derive(Debug, Clone)]
struct Crontab {
    minute: Field,
    hour: Field,
    day: Field,
    month: Field,
    weekday: Field,
}

impl Crontab {
    fn text(&self) -> String {
        format!("{} {} {} {} {}", self.minute.text, self.hour.text, self.day.text, self.month.text, self.weekday.text)
    }

    /// Crontab's meaning (Vixie cron): every field must match; of the two day fields, when either is starred
    /// both must match (so only the other restricts), and when both are restricted either may.
    fn matches(&self, at: OffsetDateTime) -> bool {
        let weekday = u32::from(at.weekday().number_days_from_sunday());
        let day = self.day.values.contains(&u32::from(at.day()));
        let weekday = self.weekday.values.iter().any(|value| value % 7 == weekday);
        let days = if self.day.starred() || self.weekday.starred() { day && weekday } else { day || weekday };
        at.second() == 0
            && at.nanosecond() == 0
            && self.minute.values.contains(&u32::from(at.minute()))
            && self.hour.values.contains(&u32::from(at.hour()))
            && self.month.values.contains(&u32::from(u8::from(at.month())))
            && days
    }
}

fn crontab() -> impl Strategy<Value = Crontab> {
    (field(MINUTE, false), field(HOUR, false), field(DAY, true), field(MONTH, false), field(WEEKDAY, true))
        .prop_map(|(minute, hour, day, month, weekday)| Crontab { minute, hour, day, month, weekday })
}

/// A whole minute between 1970 and 2099 (the years the evaluating crate covers).
fn minute_instant() -> impl Strategy<Value = OffsetDateTime> {
    (0i64..4_102_444_800 / 60).prop_map(|minutes| OffsetDateTime::from_unix_timestamp(minutes * 60).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whether the schedule fires at a given minute is the model's answer.
    #[test]
    fn a_schedule_fires_exactly_when_crontab_matches(crontab in crontab(), at in minute_instant()) {
        let schedule = CronSchedule::parse(&crontab.text()).unwrap();
        let fires_at = schedule.next_after(at - Duration::seconds(1)) == Some(at);
        prop_assert_eq!(fires_at, crontab.matches(at), "{} at {}", crontab.text(), at);
    }

    /// The next instants are instants of the model, in order, and none of the model's lies between two of them
    /// (checked minute by minute when they are at most three days apart).
    #[test]
    fn the_next_instants_are_the_models_next(crontab in crontab(), at in minute_instant()) {
        let text = crontab.text();
        let schedule = CronSchedule::parse(&text).unwrap();
        let mut previous = at;
        for next in schedule.upcoming(at, 3) {
            prop_assert!(next > previous && crontab.matches(next), "{} after {}: {}", text, previous, next);
            if next - previous <= Duration::days(3) {
                let mut minute = previous + Duration::minutes(1) - Duration::seconds(i64::from(previous.second()));
                while minute < next {
                    prop_assert!(!crontab.matches(minute), "{} skipped {} (gave {} after {})", text, minute, next, previous);
                    minute += Duration::minutes(1);
                }
            }
            previous = next;
        }
    }

    /// A 5-field expression means the same as the 6-field one with seconds `0`, and the same trimmed or padded.
    #[test]
    fn seconds_zero_and_spacing_change_nothing(crontab in crontab(), at in minute_instant(), pad in "[ \t]{0,3}") {
        let five = CronSchedule::parse(&crontab.text()).unwrap();
        let six = CronSchedule::parse(&format!("{pad}0 {}{pad}", crontab.text())).unwrap();
        prop_assert_eq!(five.next_after(at), six.next_after(at));
        prop_assert_eq!(six.source(), format!("0 {}", crontab.text()));
    }

    /// Any text: a schedule or a refusal that names what is wrong, never a panic; and a schedule's instants are
    /// after the instant asked about, even at the ends of the calendar.
    #[test]
    fn any_text_gets_an_answer(
        text in prop_oneof![
            "\\PC{0,40}",
            "[0-9*/,?a-zA-Z-]{0,8}( [0-9*/,?a-zA-Z-]{0,8}){0,7}",
            "@[a-z]{0,10}",
            "[0-9]{1,12}( [0-9]{1,12}){4,6}",
        ],
        at in prop_oneof![minute_instant(), Just(OffsetDateTime::UNIX_EPOCH), Just(time::macros::datetime!(9999-12-31 23:59:59 UTC))],
    ) {
        match CronSchedule::parse(&text) {
            Ok(schedule) => {
                for next in schedule.upcoming(at, 2) {
                    prop_assert!(next > at);
                }
            }
            Err(CronError::InvalidSchedule(reason)) => prop_assert!(!reason.is_empty()),
            Err(other) => prop_assert!(false, "{:?}: {:?}", text, other),
        }
    }

    /// Every field with a value just out of its range is refused, naming the field's position.
    #[test]
    fn a_value_out_of_range_is_refused_by_position(
        crontab in crontab(),
        position in 0..5usize,
        over in select(vec!["60", "24", "32", "13", "8", "0"]),
    ) {
        let mut fields: Vec<String> = crontab.text().split(' ').map(str::to_owned).collect();
        let limits = ["60", "24", "32", "13", "8"];
        // `0` is out of range only for the day of month and the month.
        prop_assume!(over != "0" || position == 2 || position == 3);
        let value = if over == "0" { "0" } else { limits[position] };
        fields[position] = value.to_owned();
        let refused = CronSchedule::parse(&fields.join(" "));
        match refused {
            Err(CronError::InvalidSchedule(reason)) => prop_assert!(reason.contains(&format!("(field {})", position + 1)), "{}", reason),
            other => prop_assert!(false, "{:?} was not refused: {:?}", fields, other.map(|schedule| schedule.normalized().to_vec())),
        }
    }
}
