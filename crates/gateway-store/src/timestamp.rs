//! Conversion between the domain's `OffsetDateTime` (UTC) and the `DATETIME` columns.
//!
//! Columns hold UTC without an offset, at microsecond precision (PostgreSQL's), so a value written and read
//! back compares equal on both backends and conditional updates such as `WHERE next_fire_at = ?` match.

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

/// What a round trip through the database makes of `instant`; compare in-memory times against this.
pub fn normalize(instant: OffsetDateTime) -> OffsetDateTime {
    from_db(to_db(instant))
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn truncates_to_microseconds_and_is_idempotent() {
        let instant = datetime!(2026-02-22 12:00:00.123456789 +02:00);
        let stored = to_db(instant);
        assert_eq!(stored, time::macros::datetime!(2026-02-22 10:00:00.123456));
        assert_eq!(normalize(normalize(instant)), normalize(instant));
    }
}
