//! Conversion between the domain's `OffsetDateTime` (UTC) and the `DATETIME` columns.
//!
//! Columns hold UTC without an offset, at microsecond precision (PostgreSQL's), so a value written and read
//! back compares equal on both backends and conditional updates such as `WHERE next_fire_at = ?` match.

use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

/// Truncates to whole microseconds and drops the (UTC) offset.
pub fn to_db(instant: OffsetDateTime) -> PrimitiveDateTime {
    let utc = instant.to_offset(UtcOffset::UTC);
    let micros = utc.microsecond();
    let truncated = utc.replace_microsecond(micros).unwrap_or(utc);
    PrimitiveDateTime::new(truncated.date(), truncated.time())
}

pub fn from_db(stored: PrimitiveDateTime) -> OffsetDateTime {
    stored.assume_utc()
}

/// Appends `stored` as the text Diesel binds for a `Timestamp` on SQLite (`YYYY-MM-DD HH:MM:SS`, then `.` and the
/// fraction without trailing zeros when there is one), for statements that bind instants as text (SQLite's heartbeat
/// groups, `ValuesAgentRows`). Written by hand because `time`'s generic formatter, which Diesel
/// uses, cost about 2,600 instructions per heartbeat (docs/benchmarks.md, "Per-request cost"); the text must be
/// Diesel's to the byte, since SQLite compares these columns as text.
pub(crate) fn push_sqlite_text(stored: PrimitiveDateTime, out: &mut String) {
    use std::fmt::Write as _;

    let year = stored.year();
    if !(0..=9999).contains(&year) {
        // Outside four digits the padding and sign rules are `time`'s: ask it, as Diesel does.
        let text = if stored.nanosecond() == 0 {
            stored.format(format_description!("[year]-[month]-[day] [hour]:[minute]:[second]"))
        } else {
            stored.format(format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond]"))
        };
        out.push_str(&text.unwrap_or_default());
        return;
    }
    let two = |out: &mut String, value: u8| {
        out.push(char::from(b'0' + value / 10));
        out.push(char::from(b'0' + value % 10));
    };
    let year = year.unsigned_abs();
    for divisor in [1000, 100, 10, 1] {
        out.push(char::from(b'0' + u8::try_from(year / divisor % 10).unwrap_or(0)));
    }
    out.push('-');
    two(out, u8::from(stored.month()));
    out.push('-');
    two(out, stored.day());
    out.push(' ');
    two(out, stored.hour());
    out.push(':');
    two(out, stored.minute());
    out.push(':');
    two(out, stored.second());
    let mut nanos = stored.nanosecond();
    if nanos != 0 {
        let mut digits = 9;
        while nanos.is_multiple_of(10) {
            nanos /= 10;
            digits -= 1;
        }
        let _ = write!(out, ".{nanos:0digits$}");
    }
}

/// What a round trip through the database makes of `instant`; compare in-memory times against this.
pub fn normalize(instant: OffsetDateTime) -> OffsetDateTime {
    from_db(to_db(instant))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    /// Diesel's own text for `at`, as SQLite receives it.
    fn diesel_text(connection: &mut diesel::SqliteConnection, at: PrimitiveDateTime) -> String {
        use diesel::prelude::*;
        use diesel::sql_types::{Text, Timestamp};
        diesel::select(diesel::dsl::sql::<Text>("").bind::<Timestamp, _>(at)).get_result(connection).unwrap()
    }

    #[test]
    fn the_sqlite_text_is_diesels_to_the_byte() {
        use diesel::Connection as _;
        let mut connection = diesel::SqliteConnection::establish(":memory:").unwrap();
        let base = datetime!(2026-02-22 12:00:00);
        let mut instants = vec![
            datetime!(0000-01-01 00:00:00),
            datetime!(0999-12-31 23:59:59.999999),
            datetime!(9999-12-31 23:59:59.000001),
            datetime!(2026-02-22 12:00:00.5),
            datetime!(2026-02-22 12:00:00.12),
            datetime!(2026-02-22 12:00:00.100200),
            datetime!(2026-02-22 12:00:00.123456789),
            datetime!(-0001-06-01 01:02:03.4),
        ];
        // Every digit of the fraction zero and non-zero, over days, months and years.
        instants.extend((0..2_000i64).map(|n| {
            base + time::Duration::seconds(n * 7_919_999) + time::Duration::microseconds(n * n * 1_013 % 1_000_000)
        }));
        for at in instants {
            let mut text = String::new();
            push_sqlite_text(at, &mut text);
            assert_eq!(text, diesel_text(&mut connection, at), "{at}");
        }
    }

    #[test]
    fn truncates_to_microseconds_and_is_idempotent() {
        let instant = datetime!(2026-02-22 12:00:00.123456789 +02:00);
        let stored = to_db(instant);
        assert_eq!(stored, time::macros::datetime!(2026-02-22 10:00:00.123456));
        assert_eq!(normalize(normalize(instant)), normalize(instant));
    }
}
