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
//! through.
//!
//! A schedule is read in a time zone (an IANA name, UTC by default; [`CronSchedule::parse_in`]): its fields match
//! the zone's wall clock, and [`CronSchedule::next_after`] answers UTC instants. The `cron` crate can evaluate in
//! a chrono time zone itself, but across a DST change it does what DESIGN 17 forbids: a wall-clock time in the
//! spring-forward gap is skipped (the day's `30 2 * * *` never fires), and one in the fall-back overlap is
//! returned twice (it fires twice). So the crate is asked for wall-clock matches only (evaluated in UTC, which
//! has no transitions, standing for the naive local time), and each match becomes an instant here:
//!
//! | the match's wall-clock time in the zone | fires at |
//! | --- | --- |
//! | exists once | that instant |
//! | does not exist (spring forward) | the first instant after the gap (02:30 on the US spring-forward day → 03:00) |
//! | exists twice (fall back) | its first occurrence only (01:30 daylight time, not 01:30 standard time) |
//!
//! Several matches that land on one instant (02:00 and 02:30 both become 03:00) fire once: the next instant is
//! always strictly after the last. docs/scheduler.md ("Time zones") has the consequences for `*/30 * * * *`.
//!
//! Every field is parsed and checked here first, so a refusal speaks the gateway's words and names the field by
//! name and by its position as written ("minute (field 1): 61 is out of range 0-59"); the crate's own messages
//! never reach the operator.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use time::OffsetDateTime;

use crate::error::CronError;

/// Longest expression accepted; a crontab line is far shorter, and this bounds the parser's work.
pub const MAX_SCHEDULE_LEN: usize = 256;

/// How many upcoming instants the API previews for a recurring job.
pub const PREVIEW_INSTANTS: usize = 5;

/// Longest time zone name accepted: the longest IANA name is about 30 bytes; this bounds what a refusal quotes.
pub const MAX_TIMEZONE_LEN: usize = 64;

/// A parsed recurring schedule, and the time zone it is read in.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    source: String,
    /// The expression(s) handed to the `cron` crate; two when crontab's day-of-month/day-of-week union applies.
    normalized: Vec<String>,
    schedules: Vec<cron::Schedule>,
    zone: Tz,
}

/// The IANA zone named `name` ([`CronError::UnknownTimezone`] when the tz database has none by that name; names
/// are case-sensitive, as in the database).
pub fn time_zone(name: &str) -> Result<Tz, CronError> {
    name.parse::<Tz>().map_err(|_| {
        let printable = (1..=MAX_TIMEZONE_LEN).contains(&name.len()) && name.chars().all(|c| c.is_ascii_graphic());
        CronError::UnknownTimezone(if printable { format!("`{name}`") } else { "(unprintable)".to_owned() })
    })
}

impl CronSchedule {
    /// `expression` read in UTC.
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        Self::parse_in(expression, gateway_core::DEFAULT_TIMEZONE)
    }

    /// `expression` read in the IANA time zone `timezone`: the expression is checked first, then the zone.
    pub fn parse_in(expression: &str, timezone: &str) -> Result<Self, CronError> {
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
        let zone = time_zone(timezone)?;
        Ok(Self { source: source.to_owned(), normalized, schedules, zone })
    }

    /// The time zone the schedule is read in, by its IANA name.
    pub fn timezone(&self) -> &'static str {
        self.zone.name()
    }

    /// The time zone the schedule is read in.
    pub fn zone(&self) -> Tz {
        self.zone
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
    /// In a zone other than UTC the DST rule of the module's table applies.
    pub fn next_after(&self, after: OffsetDateTime) -> Option<OffsetDateTime> {
        let after = to_chrono(after)?;
        let next = if self.zone == Tz::UTC {
            // The wall clock is UTC's: every match is an instant as it is (and this is the firing path's
            // common case, so it stays one call into the crate).
            self.schedules.iter().filter_map(|schedule| schedule.after(&after).next()).min()
        } else {
            self.schedules.iter().filter_map(|schedule| next_in_zone(schedule, self.zone, after)).min()
        };
        next.and_then(from_chrono)
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

/// The first instant strictly after `after` at which `schedule`, read on `zone`'s wall clock, fires under the DST
/// rule (module documentation). The crate walks wall-clock matches from `after`'s own wall-clock time on: a match
/// at or before it is never the answer (it was at or before `after`, or is the repeat of a time whose first
/// occurrence was), and in the fall-back hour a match whose first occurrence has already passed is stepped over
/// (at most the overlap's length of matches).
fn next_in_zone(schedule: &cron::Schedule, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let wall_after = Utc.from_utc_datetime(&after.with_timezone(&zone).naive_local());
    schedule.after(&wall_after).find_map(|wall| {
        let wall = wall.naive_utc();
        let instant = match zone.from_local_datetime(&wall) {
            LocalResult::Single(instant) => instant.with_timezone(&Utc),
            LocalResult::Ambiguous(one, other) => one.with_timezone(&Utc).min(other.with_timezone(&Utc)),
            LocalResult::None => end_of_gap(zone, wall)?,
        };
        (instant > after).then_some(instant)
    })
}

/// The first instant after the spring-forward gap that holds the nonexistent wall-clock time `wall`: the
/// transition itself, whose wall-clock time is the gap's end (03:00 for a gap 02:00-03:00). Found by bisection
/// between the instants `wall` would be under the offsets a day either side (the one before the gap puts it past
/// the transition, the one after puts it before), to the second: zones change offset on whole seconds. `None`
/// only if the zone changes offset twice within a day of `wall`, which no zone does.
fn end_of_gap(zone: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    let offset_at = |wall: NaiveDateTime| {
        zone.from_local_datetime(&wall).earliest().map(|instant| i64::from(instant.offset().fix().local_minus_utc()))
    };
    let day = chrono::TimeDelta::days(1);
    let before_gap = offset_at(wall.checked_sub_signed(day)?)?;
    let after_gap = offset_at(wall.checked_add_signed(day)?)?;
    let wall_seconds = wall.and_utc().timestamp();
    let wall_of = |seconds: i64| Utc.timestamp_opt(seconds, 0).single().map(|at| at.with_timezone(&zone).naive_local());
    // Invariant: `early` is before the gap's end (its wall clock is before `wall`), `late` at or after it.
    let (mut early, mut late) = (wall_seconds - after_gap, wall_seconds - before_gap);
    if !(wall_of(early)? < wall && wall_of(late)? >= wall) {
        return None;
    }
    while late - early > 1 {
        let middle = early + (late - early) / 2;
        if wall_of(middle)? >= wall {
            late = middle;
        } else {
            early = middle;
        }
    }
    Utc.timestamp_opt(late, 0).single()
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

    fn in_zone(expression: &str, zone: &str) -> CronSchedule {
        CronSchedule::parse_in(expression, zone).unwrap()
    }

    /// The instants after `after` up to `count`, each written in `zone`'s offset (`preview_local`'s form).
    fn local_instants(expression: &str, zone: &str, after: OffsetDateTime, count: usize) -> Vec<String> {
        let schedule = in_zone(expression, zone);
        let tz = schedule.zone();
        schedule
            .upcoming(after, count)
            .into_iter()
            .map(|instant| to_chrono(instant).unwrap().with_timezone(&tz).to_rfc3339())
            .collect()
    }

    /// DESIGN 17 on real transitions (2025b tz database): each case is a schedule, the instant to start from, and the
    /// instants it fires at next, written with the zone's offset at each. New York springs forward at 02:00 EST on
    /// 2026-03-08 and 2027-03-14 and falls back at 02:00 EDT on 2026-11-01; Sydney falls back at 03:00 AEDT on
    /// 2026-04-05 and 2027-04-04 and springs forward at 02:00 AEST on 2026-10-04.
    #[test]
    fn a_fixed_time_fires_once_across_both_transitions_in_both_hemispheres() {
        let cases: [(&str, &str, OffsetDateTime, &[&str]); 8] = [
            // Spring forward: 02:30 does not exist that day, so it fires at 03:00, the first instant after the gap.
            (
                "30 2 * * *",
                "America/New_York",
                datetime!(2026-03-06 12:00 UTC),
                &["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
            ),
            (
                "30 2 * * *",
                "America/New_York",
                datetime!(2027-03-12 12:00 UTC),
                &["2027-03-13T02:30:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"],
            ),
            // A time at the very start of the gap (02:00) goes to its end as well.
            (
                "0 2 * * *",
                "America/New_York",
                datetime!(2027-03-13 12:00 UTC),
                &["2027-03-14T03:00:00-04:00", "2027-03-15T02:00:00-04:00"],
            ),
            // Fall back: 01:30 happens twice; only the first (daylight time) fires.
            (
                "30 1 * * *",
                "America/New_York",
                datetime!(2026-10-30 12:00 UTC),
                &["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
            ),
            (
                "30 2 * * *",
                "Australia/Sydney",
                datetime!(2026-04-03 00:00 UTC),
                &["2026-04-04T02:30:00+11:00", "2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
            ),
            (
                "30 2 * * *",
                "Australia/Sydney",
                datetime!(2027-04-02 00:00 UTC),
                &["2027-04-03T02:30:00+11:00", "2027-04-04T02:30:00+11:00", "2027-04-05T02:30:00+10:00"],
            ),
            (
                "30 2 * * *",
                "Australia/Sydney",
                datetime!(2026-10-02 00:00 UTC),
                &["2026-10-03T02:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
            ),
            // A time outside the changed hour keeps its wall-clock time and moves by an hour of real time.
            (
                "0 9 * * *",
                "America/New_York",
                datetime!(2026-03-07 00:00 UTC),
                &["2026-03-07T09:00:00-05:00", "2026-03-08T09:00:00-04:00"],
            ),
        ];
        for (expression, zone, after, expected) in cases {
            assert_eq!(local_instants(expression, zone, after, expected.len()), expected, "{expression} in {zone}");
        }
    }

    #[test]
    fn the_utc_instants_are_the_local_ones() {
        // The same fires as UTC instants, what the scheduler stores and fire_id names.
        let schedule = in_zone("30 2 * * *", "America/New_York");
        assert_eq!(schedule.next_after(datetime!(2027-03-13 12:00 UTC)), Some(datetime!(2027-03-14 07:00 UTC)));
        let fall = in_zone("30 1 * * *", "America/New_York");
        assert_eq!(fall.next_after(datetime!(2026-10-31 12:00 UTC)), Some(datetime!(2026-11-01 05:30 UTC)));
        // Asked from inside the repeated hour (01:15 EST, after the first 01:30): the next day's.
        assert_eq!(fall.next_after(datetime!(2026-11-01 06:15 UTC)), Some(datetime!(2026-11-02 06:30 UTC)));
        // Asked from between the two 01:30s (01:45 EDT): not the second one either.
        assert_eq!(fall.next_after(datetime!(2026-11-01 05:45 UTC)), Some(datetime!(2026-11-02 06:30 UTC)));
    }

    /// `*/30 * * * *` means wall-clock :00 and :30, each at most once (docs/scheduler.md): across the gap 02:00 and
    /// 02:30 both become 03:00, which fires once, so it still fires every 30 real minutes; across the overlap the
    /// repeated :00 and :30 do not fire again, so an hour of real time passes without a fire.
    #[test]
    fn every_thirty_minutes_neither_skips_nor_doubles_beyond_the_rule() {
        let cases: [(&str, OffsetDateTime, &[&str]); 4] = [
            (
                "America/New_York",
                datetime!(2027-03-14 06:00 UTC),
                &["2027-03-14T01:30:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-14T03:30:00-04:00"],
            ),
            (
                "America/New_York",
                datetime!(2026-11-01 04:45 UTC),
                &[
                    "2026-11-01T01:00:00-04:00",
                    "2026-11-01T01:30:00-04:00",
                    "2026-11-01T02:00:00-05:00",
                    "2026-11-01T02:30:00-05:00",
                ],
            ),
            (
                "Australia/Sydney",
                datetime!(2026-10-03 15:15 UTC),
                &["2026-10-04T01:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-04T03:30:00+11:00"],
            ),
            (
                "Australia/Sydney",
                datetime!(2026-04-04 14:45 UTC),
                &[
                    "2026-04-05T02:00:00+11:00",
                    "2026-04-05T02:30:00+11:00",
                    "2026-04-05T03:00:00+10:00",
                    "2026-04-05T03:30:00+10:00",
                ],
            ),
        ];
        for (zone, after, expected) in cases {
            assert_eq!(local_instants("*/30 * * * *", zone, after, expected.len()), expected, "{zone}");
        }
    }

    /// Over each whole transition day: every real minute has one fire, except that the repeated hour fires only
    /// its first time; instants strictly ascend and no wall-clock time fires twice.
    #[test]
    fn every_minute_over_a_transition_day_counts_each_wall_clock_minute_once() {
        let days = [
            ("America/New_York", datetime!(2026-03-08 05:00 UTC), 23 * 60),
            ("America/New_York", datetime!(2026-11-01 04:00 UTC), 24 * 60),
            ("America/New_York", datetime!(2027-03-14 05:00 UTC), 23 * 60),
            ("Australia/Sydney", datetime!(2026-04-04 13:00 UTC), 24 * 60),
            ("Australia/Sydney", datetime!(2026-10-03 14:00 UTC), 23 * 60),
            ("Australia/Sydney", datetime!(2027-04-03 13:00 UTC), 24 * 60),
        ];
        for (zone, midnight, minutes) in days {
            let schedule = in_zone("* * * * *", zone);
            let tz = schedule.zone();
            // The fires from local midnight (the instant before it) to the next local midnight, included.
            let fires = schedule.upcoming(midnight - Duration::seconds(1), minutes + 1);
            let wall: Vec<_> =
                fires.iter().map(|at| to_chrono(*at).unwrap().with_timezone(&tz).naive_local()).collect();
            assert!(fires.windows(2).all(|pair| pair[0] < pair[1]), "{zone}: ascending");
            assert!(wall.windows(2).all(|pair| pair[0] < pair[1]), "{zone}: no wall-clock time twice");
            assert_eq!(wall[0].time(), chrono::NaiveTime::MIN, "{zone}: starts at local midnight");
            assert_eq!(wall[minutes].time(), chrono::NaiveTime::MIN, "{zone}: {minutes} fires in the day");
            assert_eq!(wall[minutes].date(), wall[0].date().succ_opt().unwrap(), "{zone}");
        }
    }

    #[test]
    fn utc_is_the_default_and_unknown_zones_are_refused_by_name() {
        assert_eq!(CronSchedule::parse("0 9 * * *").unwrap().timezone(), "UTC");
        assert_eq!(in_zone("0 9 * * *", "Europe/Paris").timezone(), "Europe/Paris");
        assert_eq!(
            in_zone("0 9 * * *", "Europe/Paris").next_after(datetime!(2026-07-01 00:00 UTC)),
            Some(datetime!(2026-07-01 07:00 UTC))
        );
        for (zone, quoted) in [
            ("Mars/Olympus_Mons", "`Mars/Olympus_Mons`"),
            ("america/new_york", "`america/new_york`"),
            ("", "(unprintable)"),
            ("Europe/Paris\n", "(unprintable)"),
        ] {
            match CronSchedule::parse_in("0 9 * * *", zone) {
                Err(CronError::UnknownTimezone(named)) => assert_eq!(named, quoted),
                other => panic!("{zone:?} should be refused, got {other:?}"),
            }
        }
        let refused = CronSchedule::parse_in("0 9 * * *", &"x".repeat(65)).unwrap_err().to_string();
        assert!(refused.starts_with("timezone: unknown time zone (unprintable)"), "{refused}");
        // The expression is checked first: its refusal names its field.
        assert!(matches!(CronSchedule::parse_in("61 * * * *", "Nowhere"), Err(CronError::InvalidSchedule(_))));
    }

    /// Why the DST rule is applied here rather than left to the `cron` crate's own time-zone support: on its own,
    /// the crate skips a time in the gap and returns a time in the overlap twice. If a new version of the crate
    /// changes that, this test says so (and the rule here still holds: the tests above).
    #[test]
    fn the_cron_crate_alone_would_skip_the_gap_and_fire_the_overlap_twice() {
        let new_york: Tz = "America/New_York".parse().unwrap();
        let daily = |expression: &str, from: NaiveDateTime, count: usize| {
            let schedule = cron::Schedule::from_str(expression).unwrap();
            let start = new_york.from_local_datetime(&from).single().unwrap();
            schedule.after(&start).take(count).map(|at| at.to_rfc3339()).collect::<Vec<_>>()
        };
        let noon = |date: &str| NaiveDateTime::parse_from_str(&format!("{date} 12:00"), "%Y-%m-%d %H:%M").unwrap();
        assert_eq!(
            daily("0 30 2 * * *", noon("2027-03-13"), 1),
            ["2027-03-15T02:30:00-04:00"],
            "the spring-forward day's 02:30 is skipped"
        );
        assert_eq!(
            daily("0 30 1 * * *", noon("2026-10-31"), 2),
            ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"],
            "the fall-back day's 01:30 comes twice"
        );
    }
}
