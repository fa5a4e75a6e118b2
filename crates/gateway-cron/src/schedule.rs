//! Cron expressions with crontab's meanings, evaluated by the `cron` crate.
//!
//! Operators write crontab (5 fields) or the 6/7-field form with seconds (and years). The `cron` crate only
//! takes 6/7 fields and differs from crontab where it matters most:
//!
//! | | crontab (what we accept) | `cron` crate |
//! | --- | --- | --- |
//! | fields | 5 (`min hour dom month dow`), or 6/7 with seconds first and years last | 6 or 7 only |
//! | day-of-week numbers | 0-7, 0 and 7 = Sunday, 1 = Monday | 1-7, 1 = Sunday, 2 = Monday |
//! | day-of-month *and* day-of-week both restricted | fires when **either** matches | fires when **both** match |
//! | `@midnight`, `@annually` | accepted | not accepted |
//!
//! So [`CronSchedule::parse`] rewrites every expression into the crate's syntax: seconds `0` are added to a
//! 5-field expression, the day-of-week field is re-emitted as an explicit list in the crate's numbering (so is a
//! month field that uses names: the crate takes a name in fewer places than crontab), `@` shorthands are
//! expanded, and when both day fields are restricted the expression becomes two schedules (day-of-month only,
//! day-of-week only) whose union is the crontab meaning. The other fields mean the same in both and pass
//! through. Everything is UTC.
//!
//! Every field is parsed and checked here first, so a refusal speaks the gateway's words and names the field by
//! name and by its position as written ("minute (field 1): 61 is out of range 0-59"); the crate's own messages
//! never reach the operator.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use time::OffsetDateTime;

use crate::error::CronError;

/// Longest expression accepted; a crontab line is far shorter, and this bounds the parser's work.
pub const MAX_SCHEDULE_LEN: usize = 256;

/// How many upcoming instants the API previews for a recurring job.
pub const PREVIEW_INSTANTS: usize = 5;

/// A parsed recurring schedule.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    source: String,
    /// The expression(s) handed to the `cron` crate; two when crontab's day-of-month/day-of-week union applies.
    normalized: Vec<String>,
    schedules: Vec<cron::Schedule>,
}

impl CronSchedule {
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let source = expression.trim();
        if source.is_empty() {
            return Err(invalid("empty expression"));
        }
        if source.len() > MAX_SCHEDULE_LEN {
            return Err(invalid(format!("longer than {MAX_SCHEDULE_LEN} bytes")));
        }
        let normalized = normalize(source)?;
        // Every field passed the checks above, so the crate refusing now is a gap in them: say so in general
        // terms rather than in the crate's words, which name its own rewritten fields.
        let schedules = normalized
            .iter()
            .map(|text| {
                cron::Schedule::from_str(text)
                    .map_err(|_| invalid(format!("{source:?} is not a valid cron expression")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { source: source.to_owned(), normalized, schedules })
    }

    /// The expression as written (trimmed).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The `cron` crate expression(s) this schedule evaluates; more than one means "any of these".
    pub fn normalized(&self) -> &[String] {
        &self.normalized
    }

    /// The first instant strictly after `after`, or `None` when the schedule has no instant left.
    pub fn next_after(&self, after: OffsetDateTime) -> Option<OffsetDateTime> {
        let after = to_chrono(after)?;
        self.schedules.iter().filter_map(|schedule| schedule.after(&after).next()).min().and_then(from_chrono)
    }

    /// Up to `count` instants strictly after `after`, ascending.
    pub fn upcoming(&self, after: OffsetDateTime, count: usize) -> Vec<OffsetDateTime> {
        let mut instants = Vec::with_capacity(count);
        let mut cursor = after;
        while instants.len() < count {
            let Some(next) = self.next_after(cursor) else { break };
            instants.push(next);
            cursor = next;
        }
        instants
    }
}

fn invalid(reason: impl Into<String>) -> CronError {
    CronError::InvalidSchedule(reason.into())
}

fn to_chrono(instant: OffsetDateTime) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(instant.unix_timestamp(), instant.nanosecond()).single()
}

fn from_chrono(instant: DateTime<Utc>) -> Option<OffsetDateTime> {
    let nanos = i128::from(instant.timestamp()) * 1_000_000_000 + i128::from(instant.timestamp_subsec_nanos());
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
}

/// The crontab `@` shorthands, as 5-field crontab.
fn expand_shorthand(keyword: &str) -> Result<&'static str, CronError> {
    match keyword.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => Ok("0 0 1 1 *"),
        "@monthly" => Ok("0 0 1 * *"),
        "@weekly" => Ok("0 0 * * 0"),
        "@daily" | "@midnight" => Ok("0 0 * * *"),
        "@hourly" => Ok("0 * * * *"),
        "@reboot" => Err(invalid("@reboot is not supported: the gateway has no reboot to attach it to")),
        other => Err(invalid(format!("unknown shorthand {other:?}"))),
    }
}

/// Rewrites a crontab (or 6/7-field) expression into one or two `cron` crate expressions.
fn normalize(source: &str) -> Result<Vec<String>, CronError> {
    let expanded;
    let text = if source.starts_with('@') {
        expanded = expand_shorthand(source)?;
        expanded
    } else {
        source
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (seconds, minute, hour, day_of_month, month, day_of_week, year) = match fields.as_slice() {
        [minute, hour, dom, month, dow] => (None, *minute, *hour, *dom, *month, *dow, None),
        [second, minute, hour, dom, month, dow] => (Some(*second), *minute, *hour, *dom, *month, *dow, None),
        [second, minute, hour, dom, month, dow, year] => {
            (Some(*second), *minute, *hour, *dom, *month, *dow, Some(*year))
        }
        _ => {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6/7 with seconds first \
                 and an optional year last, got {}",
                fields.len()
            )));
        }
    };
    // Positions as the operator counts them: a leading seconds field moves every other one along.
    let shift = usize::from(seconds.is_some());
    if let Some(seconds) = seconds {
        SECOND.values(1, seconds)?;
    }
    MINUTE.values(1 + shift, minute)?;
    HOUR.values(2 + shift, hour)?;
    DAY_OF_MONTH.values(3 + shift, day_of_month)?;
    let months = MONTH.values(4 + shift, month)?;
    let weekdays = DAY_OF_WEEK.values(5 + shift, day_of_week)?;
    if let Some(year) = year {
        YEAR.values(7, year)?;
    }
    let month = if month.bytes().any(|byte| byte.is_ascii_alphabetic()) { list(&months) } else { month.to_owned() };
    let weekdays = if day_of_week == "*" || day_of_week == "?" {
        "*".to_owned()
    } else {
        // The crate counts 1 = Sunday .. 7 = Saturday; crontab 0 = Sunday (7 too) .. 6 = Saturday.
        list(&weekdays.iter().map(|day| day % 7 + 1).collect())
    };
    let seconds = seconds.unwrap_or("0");
    let render = |day_of_month: &str, day_of_week: &str| {
        let mut expression = format!("{seconds} {minute} {hour} {day_of_month} {month} {day_of_week}");
        if let Some(year) = year {
            expression.push(' ');
            expression.push_str(year);
        }
        expression
    };
    // Crontab's rule (Vixie cron and its descendants): when either day field starts with `*` the two are
    // combined with AND (so only the other restricts); when both are restricted a day matches if EITHER does.
    if is_star(day_of_month) || is_star(day_of_week) {
        Ok(vec![render(day_of_month, &weekdays)])
    } else {
        Ok(vec![render(day_of_month, "*"), render("*", &weekdays)])
    }
}

fn is_star(field: &str) -> bool {
    field.starts_with('*') || field.starts_with('?')
}

/// `values` as the crate's explicit list.
fn list(values: &BTreeSet<u32>) -> String {
    values.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// One field of a cron expression: what it is called, the values it takes, and the names it accepts for them.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// The last value `*` stands for: `max`, except for day-of-week, where 7 is Sunday a second time.
    star_last: u32,
    /// Names of the values from `min` up, each short and spelled out.
    names: &'static [(&'static str, &'static str)],
    /// Takes `?` for "any" (the day fields, as the `cron` crate does).
    takes_any: bool,
}

const SECOND: Field = Field::numbers("second", 0, 59);
const MINUTE: Field = Field::numbers("minute", 0, 59);
const HOUR: Field = Field::numbers("hour", 0, 23);
const DAY_OF_MONTH: Field = Field { takes_any: true, ..Field::numbers("day-of-month", 1, 31) };
const MONTH: Field = Field {
    names: &[
        ("jan", "january"),
        ("feb", "february"),
        ("mar", "march"),
        ("apr", "april"),
        ("may", "may"),
        ("jun", "june"),
        ("jul", "july"),
        ("aug", "august"),
        ("sep", "september"),
        ("oct", "october"),
        ("nov", "november"),
        ("dec", "december"),
    ],
    ..Field::numbers("month", 1, 12)
};
const DAY_OF_WEEK: Field = Field {
    star_last: 6,
    names: &[
        ("sun", "sunday"),
        ("mon", "monday"),
        ("tue", "tuesday"),
        ("wed", "wednesday"),
        ("thu", "thursday"),
        ("fri", "friday"),
        ("sat", "saturday"),
    ],
    takes_any: true,
    ..Field::numbers("day-of-week", 0, 7)
};
/// The years the `cron` crate evaluates.
const YEAR: Field = Field::numbers("year", 1970, 2100);

impl Field {
    const fn numbers(name: &'static str, min: u32, max: u32) -> Self {
        Self { name, min, max, star_last: max, names: &[], takes_any: false }
    }

    /// The values `text` selects: a comma-separated list of `*`, a value, or a range `a-b`, each optionally
    /// with a step `/n` (`a/n` runs from `a` to the end of the field). The error names this field and its
    /// `position` (1-based, as written).
    fn values(&self, position: usize, text: &str) -> Result<BTreeSet<u32>, CronError> {
        self.parse(text).map_err(|why| invalid(format!("{} (field {position}): {why}", self.name)))
    }

    fn parse(&self, text: &str) -> Result<BTreeSet<u32>, String> {
        let mut values = BTreeSet::new();
        for item in text.split(',') {
            if item.is_empty() {
                return Err(format!("{text:?} has an empty list item"));
            }
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(self.step(step)?)),
                None => (item, None),
            };
            let (first, last) = if range == "*" || range == "?" {
                if range == "?" && !self.takes_any {
                    return Err("\"?\" is only allowed in day-of-month and day-of-week".to_owned());
                }
                (self.min, self.star_last)
            } else if let Some((start, end)) = range.split_once('-') {
                let (first, last) = (self.value(start)?, self.value(end)?);
                if first > last {
                    return Err(format!("range {range:?} runs backwards"));
                }
                (first, last)
            } else {
                let value = self.value(range)?;
                match step {
                    Some(_) => (value, self.star_last.max(value)),
                    None => (value, value),
                }
            };
            let step = usize::try_from(step.unwrap_or(1)).unwrap_or(usize::MAX);
            values.extend((first..=last).step_by(step));
        }
        Ok(values)
    }

    fn step(&self, token: &str) -> Result<u32, String> {
        let step = number(token).ok_or_else(|| format!("step {token:?} is not a number"))?;
        match step {
            Some(step) if (1..=self.max).contains(&step) => Ok(step),
            _ => Err(format!("step {token} is out of range 1-{}", self.max)),
        }
    }

    fn value(&self, token: &str) -> Result<u32, String> {
        if token.is_empty() {
            return Err("a value is missing".to_owned());
        }
        if let Some(value) = number(token) {
            return match value {
                Some(value) if (self.min..=self.max).contains(&value) => Ok(value),
                _ => Err(format!("{token} is out of range {}-{}", self.min, self.max)),
            };
        }
        let lower = token.to_ascii_lowercase();
        let named = self.names.iter().position(|(short, long)| lower == *short || lower == *long);
        match named.and_then(|index| u32::try_from(index).ok()) {
            Some(index) => Ok(self.min + index),
            None if self.names.is_empty() => Err(format!("{token:?} is not a number")),
            None => {
                let (first, last) = (self.names[0].0, self.names[self.names.len() - 1].0);
                Err(format!("{token:?} is not a number or a name ({}-{} or {first}-{last})", self.min, self.max))
            }
        }
    }
}

/// `Some` when `token` is all ASCII digits: the number, or `None` when it does not fit in a `u32` (which is out of
/// every range).
fn number(token: &str) -> Option<Option<u32>> {
    (!token.is_empty() && token.bytes().all(|byte| byte.is_ascii_digit())).then(|| token.parse().ok())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;
    use time::{Duration, Weekday};

    use super::*;

    /// A Sunday, so weekday arithmetic in the tests reads plainly.
    const SUNDAY: OffsetDateTime = datetime!(2026-02-22 00:00:00 UTC);

    fn normalized(expression: &str) -> Vec<String> {
        CronSchedule::parse(expression).unwrap().normalized().to_vec()
    }

    fn next(expression: &str, after: OffsetDateTime) -> OffsetDateTime {
        CronSchedule::parse(expression).unwrap().next_after(after).unwrap()
    }

    fn reason(expression: &str) -> String {
        match CronSchedule::parse(expression) {
            Err(CronError::InvalidSchedule(reason)) => reason,
            other => panic!("{expression:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn the_fixed_start_is_a_sunday() {
        assert_eq!(SUNDAY.weekday(), Weekday::Sunday);
    }

    #[test]
    fn five_fields_gain_zero_seconds_and_keep_minute_hour_dom_month() {
        assert_eq!(normalized("30 9 1 5 *"), ["0 30 9 1 5 *"]);
        assert_eq!(normalized("*/15 0-6/2 1,15 3-5 *"), ["0 */15 0-6/2 1,15 3-5 *"]);
        assert_eq!(normalized("  5   4  *  *  *  "), ["0 5 4 * * *"]);
    }

    #[test]
    fn minute_field() {
        assert_eq!(next("*/15 * * * *", SUNDAY + Duration::minutes(1)), SUNDAY + Duration::minutes(15));
        assert_eq!(next("5,50 * * * *", SUNDAY + Duration::minutes(6)), SUNDAY + Duration::minutes(50));
        assert_eq!(next("10-12 * * * *", SUNDAY + Duration::minutes(11)), SUNDAY + Duration::minutes(12));
        assert_eq!(reason("60 * * * *"), "minute (field 1): 60 is out of range 0-59");
    }

    #[test]
    fn hour_field() {
        assert_eq!(next("0 9 * * *", SUNDAY), SUNDAY + Duration::hours(9));
        assert_eq!(next("0 */6 * * *", SUNDAY + Duration::hours(1)), SUNDAY + Duration::hours(6));
        assert_eq!(next("0 22-23 * * *", SUNDAY + Duration::hours(22)), SUNDAY + Duration::hours(23));
        assert_eq!(reason("0 24 * * *"), "hour (field 2): 24 is out of range 0-23");
    }

    #[test]
    fn day_of_month_field() {
        assert_eq!(next("0 0 1 * *", SUNDAY), datetime!(2026-03-01 00:00:00 UTC));
        assert_eq!(next("0 0 */10 * *", SUNDAY), datetime!(2026-03-01 00:00:00 UTC));
        assert_eq!(next("0 0 23-24 * *", SUNDAY), datetime!(2026-02-23 00:00:00 UTC));
        assert_eq!(reason("0 0 32 * *"), "day-of-month (field 3): 32 is out of range 1-31");
        assert_eq!(reason("0 0 0 * *"), "day-of-month (field 3): 0 is out of range 1-31");
    }

    #[test]
    fn month_field_numbers_and_names() {
        assert_eq!(next("0 0 1 6 *", SUNDAY), datetime!(2026-06-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 jun *", SUNDAY), datetime!(2026-06-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 JUL-AUG *", SUNDAY), datetime!(2026-07-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 */4 *", SUNDAY), datetime!(2026-05-01 00:00:00 UTC));
        assert_eq!(normalized("0 0 1 jun *"), ["0 0 0 1 6 *"], "names become the crate's numbers");
        assert_eq!(normalized("0 0 1 JAN-mar/2,December *"), ["0 0 0 1 1,3,12 *"]);
        // The crate takes neither a name with a step nor a range from a name to a number; crontab does.
        assert_eq!(normalized("0 0 1 feb/5 *"), ["0 0 0 1 2,7,12 *"]);
        assert_eq!(normalized("0 0 1 oct-12 *"), ["0 0 0 1 10,11,12 *"]);
        assert_eq!(reason("0 0 1 13 *"), "month (field 4): 13 is out of range 1-12");
        assert_eq!(reason("0 0 1 0 *"), "month (field 4): 0 is out of range 1-12");
        assert_eq!(reason("0 0 1 jun-foo *"), "month (field 4): \"foo\" is not a number or a name (1-12 or jan-dec)");
    }

    #[test]
    fn day_of_week_numbers_follow_crontab() {
        // crontab: 0 = Sunday, 1 = Monday ... 6 = Saturday, 7 = Sunday; the crate counts 1 = Sunday.
        let cases = [("0", "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", "6"), ("6", "7"), ("7", "1")];
        for (crontab, crate_form) in cases {
            assert_eq!(normalized(&format!("0 0 * * {crontab}")), [format!("0 0 0 * * {crate_form}")]);
        }
        assert_eq!(next("0 0 * * 1", SUNDAY), SUNDAY + Duration::days(1));
        assert_eq!(next("0 0 * * 1", SUNDAY).weekday(), Weekday::Monday);
        assert_eq!(next("0 0 * * 0", SUNDAY).weekday(), Weekday::Sunday);
        assert_eq!(next("0 0 * * 7", SUNDAY), SUNDAY + Duration::days(7));
        assert_eq!(next("0 0 * * 6", SUNDAY).weekday(), Weekday::Saturday);
    }

    #[test]
    fn day_of_week_names_ranges_steps_and_lists() {
        assert_eq!(normalized("0 9 * * mon-fri"), ["0 0 9 * * 2,3,4,5,6"]);
        assert_eq!(normalized("0 9 * * MON,Wed,friday"), ["0 0 9 * * 2,4,6"]);
        assert_eq!(normalized("0 9 * * 1-5"), ["0 0 9 * * 2,3,4,5,6"]);
        assert_eq!(normalized("0 9 * * 5-7"), ["0 0 9 * * 1,6,7"]);
        assert_eq!(normalized("0 9 * * 0-7"), ["0 0 9 * * 1,2,3,4,5,6,7"]);
        assert_eq!(normalized("0 9 * * */2"), ["0 0 9 * * 1,3,5,7"]);
        assert_eq!(normalized("0 9 * * 1-5/2"), ["0 0 9 * * 2,4,6"]);
        assert_eq!(normalized("0 9 * * 1/3"), ["0 0 9 * * 2,5"]);
        assert_eq!(normalized("0 9 * * sat,sun"), ["0 0 9 * * 1,7"]);
        assert_eq!(normalized("0 9 * * 7/2"), ["0 0 9 * * 1"], "7 is Sunday, the last value");
        for (bad, why) in [
            ("8", "8 is out of range 0-7"),
            ("mon-sun2", "\"sun2\" is not a number or a name (0-7 or sun-sat)"),
            ("fri-mon", "range \"fri-mon\" runs backwards"),
            ("1/0", "step 0 is out of range 1-7"),
            ("*/8", "step 8 is out of range 1-7"),
            ("x", "\"x\" is not a number or a name (0-7 or sun-sat)"),
            ("1,,2", "\"1,,2\" has an empty list item"),
            ("-1", "a value is missing"),
        ] {
            assert_eq!(reason(&format!("0 0 * * {bad}")), format!("day-of-week (field 5): {why}"), "{bad}");
        }
    }

    #[test]
    fn both_day_fields_restricted_means_either_matches() {
        // "the 15th, and every Monday": crontab fires on both kinds of day.
        let schedule = CronSchedule::parse("0 0 15 * 1").unwrap();
        assert_eq!(schedule.normalized(), ["0 0 0 15 * *", "0 0 0 * * 2"]);
        assert_eq!(
            schedule.upcoming(SUNDAY, 4),
            [
                datetime!(2026-02-23 00:00:00 UTC),
                datetime!(2026-03-02 00:00:00 UTC),
                datetime!(2026-03-09 00:00:00 UTC),
                datetime!(2026-03-15 00:00:00 UTC),
            ]
        );
        // A star in either field keeps AND (so only the other restricts), as crontab does.
        assert_eq!(normalized("0 0 */2 * 1"), ["0 0 0 */2 * 2"]);
        assert_eq!(normalized("0 0 15 * *"), ["0 0 0 15 * *"]);
    }

    #[test]
    fn shorthands() {
        assert_eq!(normalized("@hourly"), ["0 0 * * * *"]);
        assert_eq!(normalized("@daily"), ["0 0 0 * * *"]);
        assert_eq!(normalized("@midnight"), ["0 0 0 * * *"]);
        assert_eq!(normalized("@weekly"), ["0 0 0 * * 1"]);
        assert_eq!(normalized("@monthly"), ["0 0 0 1 * *"]);
        assert_eq!(normalized("@yearly"), ["0 0 0 1 1 *"]);
        assert_eq!(normalized("@ANNUALLY"), ["0 0 0 1 1 *"]);
        assert_eq!(next("@weekly", SUNDAY), SUNDAY + Duration::days(7));
        assert_eq!(next("@hourly", SUNDAY + Duration::minutes(59)), SUNDAY + Duration::hours(1));
        assert!(reason("@reboot").contains("not supported"));
        assert!(reason("@fortnightly").contains("unknown shorthand"));
    }

    #[test]
    fn six_and_seven_fields_carry_seconds_and_years_with_crontab_weekdays() {
        assert_eq!(normalized("*/10 * * * * *"), ["*/10 * * * * *"]);
        assert_eq!(next("*/10 * * * * *", SUNDAY + Duration::seconds(1)), SUNDAY + Duration::seconds(10));
        assert_eq!(normalized("30 0 9 * * 1"), ["30 0 9 * * 2"]);
        assert_eq!(next("30 0 9 * * 1", SUNDAY).weekday(), Weekday::Monday);
        assert_eq!(normalized("0 0 0 1 1 * 2028"), ["0 0 0 1 1 * 2028"]);
        assert_eq!(next("0 0 0 1 1 * 2028", SUNDAY), datetime!(2028-01-01 00:00:00 UTC));
        assert_eq!(reason("61 * * * * *"), "second (field 1): 61 is out of range 0-59");
        assert_eq!(reason("0 0 0 1 1 * 1800"), "year (field 7): 1800 is out of range 1970-2100");
        // A leading seconds field moves every other field one position along.
        assert_eq!(reason("0 60 * * * *"), "minute (field 2): 60 is out of range 0-59");
        assert_eq!(reason("0 0 24 * * *"), "hour (field 3): 24 is out of range 0-23");
        assert_eq!(reason("0 0 0 32 * *"), "day-of-month (field 4): 32 is out of range 1-31");
        assert_eq!(reason("0 0 0 * 13 *"), "month (field 5): 13 is out of range 1-12");
        assert_eq!(reason("0 0 0 * * 8"), "day-of-week (field 6): 8 is out of range 0-7");
        assert_eq!(reason("0 0 0 * * * 2101"), "year (field 7): 2101 is out of range 1970-2100");
    }

    /// Each field: both ends of its range are taken and one past either end is refused, in the gateway's words
    /// (the `cron` crate would say "Minutes must be less than 59" for 61, and wrongly so: 59 is allowed).
    #[test]
    fn every_field_takes_its_whole_range_and_nothing_beyond() {
        // `V` marks the field under test.
        let fields = [
            ("second", 0_u32, 59_u32, "V 0 0 * * *"),
            ("minute", 0, 59, "V 0 * * *"),
            ("hour", 0, 23, "0 V * * *"),
            ("day-of-month", 1, 31, "0 0 V * *"),
            ("month", 1, 12, "0 0 1 V *"),
            ("day-of-week", 0, 7, "0 0 * * V"),
            ("year", 1970, 2100, "0 0 0 1 1 * V"),
        ];
        for (name, min, max, template) in fields {
            let expression = |value: &str| template.replace('V', value);
            for value in [min, max] {
                assert!(CronSchedule::parse(&expression(&value.to_string())).is_ok(), "{name} {value}");
            }
            assert!(CronSchedule::parse(&expression(&format!("{min}-{max}"))).is_ok(), "{name} {min}-{max}");
            let mut too_big = reason(&expression(&(max + 1).to_string()));
            assert!(too_big.starts_with(&format!("{name} (field ")), "{too_big}");
            assert!(too_big.ends_with(&format!(": {} is out of range {min}-{max}", max + 1)), "{too_big}");
            if let Some(below) = min.checked_sub(1) {
                too_big = reason(&expression(&below.to_string()));
                assert!(too_big.ends_with(&format!(": {below} is out of range {min}-{max}")), "{too_big}");
            }
            let huge = reason(&expression("99999999999"));
            assert!(huge.ends_with(&format!(": 99999999999 is out of range {min}-{max}")), "{huge}");
        }
    }

    #[test]
    fn steps_run_from_one_to_the_field_maximum() {
        assert_eq!(next("*/59 * * * *", SUNDAY + Duration::minutes(1)), SUNDAY + Duration::minutes(59));
        assert_eq!(next("0 */23 * * *", SUNDAY + Duration::hours(1)), SUNDAY + Duration::hours(23));
        assert_eq!(next("5/20 * * * *", SUNDAY + Duration::minutes(6)), SUNDAY + Duration::minutes(25));
        assert_eq!(normalized("10-40/15 * * * *"), ["0 10-40/15 * * * *"]);
        for (bad, why) in [
            ("*/0 * * * *", "minute (field 1): step 0 is out of range 1-59"),
            ("*/60 * * * *", "minute (field 1): step 60 is out of range 1-59"),
            ("0 */24 * * *", "hour (field 2): step 24 is out of range 1-23"),
            ("0 0 */32 * *", "day-of-month (field 3): step 32 is out of range 1-31"),
            ("0 0 1 */13 *", "month (field 4): step 13 is out of range 1-12"),
            ("*/x * * * *", "minute (field 1): step \"x\" is not a number"),
            ("*/+5 * * * *", "minute (field 1): step \"+5\" is not a number"),
            ("*/5/2 * * * *", "minute (field 1): step \"5/2\" is not a number"),
        ] {
            assert_eq!(reason(bad), why, "{bad}");
        }
    }

    #[test]
    fn names_only_where_crontab_has_them_and_any_only_in_the_day_fields() {
        assert_eq!(reason("mon * * * *"), "minute (field 1): \"mon\" is not a number");
        assert_eq!(reason("0 jan * * *"), "hour (field 2): \"jan\" is not a number");
        assert_eq!(reason("+5 * * * *"), "minute (field 1): \"+5\" is not a number");
        assert_eq!(
            reason("0 0 * * january"),
            "day-of-week (field 5): \"january\" is not a number or a name (0-7 or sun-sat)"
        );
        assert_eq!(reason("0 0 1 fri *"), "month (field 4): \"fri\" is not a number or a name (1-12 or jan-dec)");
        assert_eq!(normalized("0 0 ? * mon"), ["0 0 0 ? * 2"]);
        assert_eq!(normalized("0 0 1 * ?"), ["0 0 0 1 * *"]);
        assert_eq!(reason("? * * * *"), "minute (field 1): \"?\" is only allowed in day-of-month and day-of-week");
    }

    #[test]
    fn the_cron_crates_wording_never_reaches_the_operator() {
        for bad in ["61 * * * *", "0 0 1 13 *", "*/0 * * * *", "0 0 L * *", "0 0 0 * * * 1969", "0 0 1 jan/x *"] {
            let why = reason(bad);
            for crate_words in ["must be", "Invalid", "specified", "^", "\n"] {
                assert!(!why.contains(crate_words), "{bad}: {why}");
            }
            assert!(why.contains(" (field "), "{bad}: {why}");
        }
    }

    #[test]
    fn next_is_strictly_after_even_on_an_instant() {
        let at = SUNDAY + Duration::minutes(5);
        assert_eq!(next("*/5 * * * *", at), at + Duration::minutes(5));
        assert_eq!(next("*/5 * * * *", at - Duration::milliseconds(1)), at);
    }

    #[test]
    fn malformed_expressions_are_refused_with_a_reason() {
        assert!(reason("").contains("empty"));
        assert!(reason("* * * *").contains("got 4"));
        assert!(reason("* * * * * * * *").contains("got 8"));
        assert!(reason(&"1,".repeat(200)).contains("longer than"));
        assert_eq!(reason("0 0 L * *"), "day-of-month (field 3): \"L\" is not a number");
        assert_eq!(reason("0 0 * * 1#2"), "day-of-week (field 5): \"1#2\" is not a number or a name (0-7 or sun-sat)");
        assert_eq!(reason("a b c d e"), "minute (field 1): \"a\" is not a number", "the first bad field is named");
        assert_eq!(reason("5-1 * * * *"), "minute (field 1): range \"5-1\" runs backwards");
    }

    #[test]
    fn a_schedule_without_instants_has_no_next() {
        let past_year = CronSchedule::parse("0 0 0 1 1 * 2020").unwrap();
        assert_eq!(past_year.next_after(SUNDAY), None);
        let february_30 = CronSchedule::parse("0 0 30 2 *").unwrap();
        assert_eq!(february_30.next_after(SUNDAY), None);
    }

    #[test]
    fn upcoming_previews_ascending_instants() {
        let schedule = CronSchedule::parse("0 */6 * * *").unwrap();
        assert_eq!(
            schedule.upcoming(SUNDAY, PREVIEW_INSTANTS),
            (1..=5).map(|step| SUNDAY + Duration::hours(6 * step)).collect::<Vec<_>>()
        );
        assert_eq!(schedule.source(), "0 */6 * * *");
    }
}
