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
//! 5-field expression, the day-of-week field is parsed here and re-emitted as an explicit list in the crate's
//! numbering, `@` shorthands are expanded, and when both day fields are restricted the expression becomes two
//! schedules (day-of-month only, day-of-week only) whose union is the crontab meaning. The other fields mean
//! the same in both and pass through. Everything is UTC.

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
        let schedules = normalized
            .iter()
            .map(|text| cron::Schedule::from_str(text).map_err(|error| invalid(format!("{text:?}{}", cause(&error)))))
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
        [minute, hour, dom, month, dow] => ("0", *minute, *hour, *dom, *month, *dow, None),
        [second, minute, hour, dom, month, dow] => (*second, *minute, *hour, *dom, *month, *dow, None),
        [second, minute, hour, dom, month, dow, year] => (*second, *minute, *hour, *dom, *month, *dow, Some(*year)),
        _ => {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6/7 with seconds first \
                 and an optional year last, got {}",
                fields.len()
            )));
        }
    };
    for (position, field) in [seconds, minute, hour, day_of_month, month].into_iter().chain(year).enumerate() {
        check_field(position, field)?;
    }
    let weekdays = crate_day_of_week(day_of_week)?;
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

/// The passthrough fields, in the crate's order (day-of-week, handled here, is index 5): name and range.
const FIELDS: [(&str, &str); 7] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
    ("year", "1970-2100"),
];

/// Validates one passthrough field on its own, so the reason names the field as the operator wrote it
/// rather than pointing into the rewritten expression.
fn check_field(position: usize, field: &str) -> Result<(), CronError> {
    let position = if position == 5 { 6 } else { position };
    let mut probe = ["0", "*", "*", "*", "*", "*"].map(str::to_owned).to_vec();
    if position == 6 {
        probe.push(field.to_owned());
    } else {
        probe[position] = field.to_owned();
    }
    match cron::Schedule::from_str(&probe.join(" ")) {
        Ok(_) => Ok(()),
        Err(error) => {
            let (name, allowed) = FIELDS[position];
            let cause = cause(&error);
            Err(invalid(format!(
                "{name} field {field:?} is not valid (allowed: {allowed}, ranges, steps, lists){cause}"
            )))
        }
    }
}

/// The crate's message is "<input>\n<caret>\n<cause>"; only the cause helps (and may be absent).
fn cause(error: &cron::error::Error) -> String {
    let message = error.to_string();
    let cause: Vec<&str> = message.lines().skip_while(|line| !line.trim_start().starts_with('^')).skip(1).collect();
    if cause.is_empty() { String::new() } else { format!(": {}", cause.join(" ")) }
}

fn is_star(field: &str) -> bool {
    field.starts_with('*') || field.starts_with('?')
}

/// Parses a crontab day-of-week field (0-7 with 0 and 7 = Sunday, names, ranges, steps, lists) and renders
/// it as the `cron` crate's explicit list (1 = Sunday .. 7 = Saturday), or `*`.
fn crate_day_of_week(field: &str) -> Result<String, CronError> {
    if field == "*" || field == "?" {
        return Ok("*".to_owned());
    }
    let days = crontab_weekdays(field)?;
    Ok(days.iter().map(|day| (day + 1).to_string()).collect::<Vec<_>>().join(","))
}

/// The weekdays (0 = Sunday .. 6 = Saturday) a crontab day-of-week field selects.
fn crontab_weekdays(field: &str) -> Result<BTreeSet<u32>, CronError> {
    let bad = |why: String| invalid(format!("day-of-week field {field:?}: {why}"));
    let mut days = BTreeSet::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| bad(format!("step {step:?} is not a number")))?;
                if step == 0 || step > 7 {
                    return Err(bad(format!("step {step} must be between 1 and 7")));
                }
                (range, step)
            }
            None => (item, 1),
        };
        let (first, last) = if range == "*" || range == "?" {
            (0, 6)
        } else if let Some((start, end)) = range.split_once('-') {
            let (start, end) = (weekday(start).map_err(&bad)?, weekday(end).map_err(&bad)?);
            if start > end {
                return Err(bad(format!("range {range:?} runs backwards")));
            }
            (start, end)
        } else {
            let start = weekday(range).map_err(&bad)?;
            // `N/step` means "from N to the end of the week"; a lone `N` is just that day.
            if item.contains('/') { (start, 6) } else { (start, start) }
        };
        for day in (first..=last).step_by(step as usize) {
            days.insert(day % 7);
        }
    }
    Ok(days)
}

/// One crontab weekday: a number 0-7 (7 is Sunday again) or a name (three letters or spelled out).
fn weekday(token: &str) -> Result<u32, String> {
    if token.is_empty() {
        return Err("empty value".to_owned());
    }
    if let Ok(number) = token.parse::<u32>() {
        return if number <= 7 { Ok(number) } else { Err(format!("{number} is not a weekday (0-7)")) };
    }
    const NAMES: [(&str, &str); 7] = [
        ("sun", "sunday"),
        ("mon", "monday"),
        ("tue", "tuesday"),
        ("wed", "wednesday"),
        ("thu", "thursday"),
        ("fri", "friday"),
        ("sat", "saturday"),
    ];
    let lower = token.to_ascii_lowercase();
    NAMES
        .iter()
        .position(|(short, long)| lower == *short || lower == *long)
        .and_then(|index| u32::try_from(index).ok())
        .ok_or_else(|| format!("{token:?} is not a weekday"))
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
        assert_eq!(normalized("*/15 0-6/2 1,15 jan-mar *"), ["0 */15 0-6/2 1,15 jan-mar *"]);
        assert_eq!(normalized("  5   4  *  *  *  "), ["0 5 4 * * *"]);
    }

    #[test]
    fn minute_field() {
        assert_eq!(next("*/15 * * * *", SUNDAY + Duration::minutes(1)), SUNDAY + Duration::minutes(15));
        assert_eq!(next("5,50 * * * *", SUNDAY + Duration::minutes(6)), SUNDAY + Duration::minutes(50));
        assert_eq!(next("10-12 * * * *", SUNDAY + Duration::minutes(11)), SUNDAY + Duration::minutes(12));
        assert!(reason("60 * * * *").starts_with("minute field \"60\""));
    }

    #[test]
    fn hour_field() {
        assert_eq!(next("0 9 * * *", SUNDAY), SUNDAY + Duration::hours(9));
        assert_eq!(next("0 */6 * * *", SUNDAY + Duration::hours(1)), SUNDAY + Duration::hours(6));
        assert_eq!(next("0 22-23 * * *", SUNDAY + Duration::hours(22)), SUNDAY + Duration::hours(23));
        assert!(reason("0 24 * * *").starts_with("hour field \"24\""));
    }

    #[test]
    fn day_of_month_field() {
        assert_eq!(next("0 0 1 * *", SUNDAY), datetime!(2026-03-01 00:00:00 UTC));
        assert_eq!(next("0 0 */10 * *", SUNDAY), datetime!(2026-03-01 00:00:00 UTC));
        assert_eq!(next("0 0 23-24 * *", SUNDAY), datetime!(2026-02-23 00:00:00 UTC));
        assert!(reason("0 0 32 * *").starts_with("day-of-month field \"32\""));
        assert!(reason("0 0 0 * *").starts_with("day-of-month field \"0\""));
    }

    #[test]
    fn month_field_numbers_and_names() {
        assert_eq!(next("0 0 1 6 *", SUNDAY), datetime!(2026-06-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 jun *", SUNDAY), datetime!(2026-06-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 JUL-AUG *", SUNDAY), datetime!(2026-07-01 00:00:00 UTC));
        assert_eq!(next("0 0 1 */4 *", SUNDAY), datetime!(2026-05-01 00:00:00 UTC));
        assert!(reason("0 0 1 13 *").starts_with("month field \"13\""));
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
        for bad in ["8", "mon-sun2", "fri-mon", "1/0", "*/8", "x", "1,,2", "-1"] {
            assert!(reason(&format!("0 0 * * {bad}")).contains("day-of-week"), "{bad}");
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
        assert!(reason("61 * * * * *").starts_with("second field \"61\""));
        assert!(reason("0 0 0 1 1 * 1800").starts_with("year field \"1800\""));
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
        assert!(reason("0 0 L * *").starts_with("day-of-month field \"L\""));
        assert!(reason("0 0 * * 1#2").contains("day-of-week"));
        assert!(reason("a b c d e").starts_with("minute field \"a\""));
        assert!(reason("5-1 * * * *").starts_with("minute field \"5-1\""));
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
