//! Cron expressions: five fields (minute hour day-of-month month day-of-week) with `*`, lists,
//! ranges and steps, or the `@hourly`-style shorthands; and the next matching minute.

use time::{Date, Duration, Month, OffsetDateTime, PrimitiveDateTime, Time};

use super::OjsError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// Both day fields restricted: a day matches when either does (classic cron).
    either_day: bool,
}

impl Schedule {
    pub fn parse(expression: &str) -> Result<Schedule, OjsError> {
        let expanded = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(OjsError::invalid(format!(
                "invalid cron expression {expression:?}: expected 5 fields (minute hour day month weekday)"
            )));
        };
        let field = |text: &str, low: u32, high: u32, name: &str| {
            parse_field(text, low, high).ok_or_else(|| {
                OjsError::invalid(format!(
                    "invalid cron expression {expression:?}: bad {name} field {text:?} (allowed {low}-{high})"
                ))
            })
        };
        let mut weekdays = field(weekday, 0, 7, "day-of-week")?;
        if weekdays[7] {
            weekdays[0] = true; // 7 is Sunday too
        }
        Ok(Schedule {
            minutes: field(minute, 0, 59, "minute")?,
            hours: field(hour, 0, 23, "hour")?,
            days: field(day, 1, 31, "day-of-month")?,
            months: field(month, 1, 12, "month")?,
            weekdays,
            either_day: *day != "*" && *weekday != "*",
        })
    }

    /// The first matching minute strictly after `after`, in wall time `offset_seconds` east of UTC.
    pub fn next_after(&self, after: OffsetDateTime, offset_seconds: i64) -> Option<OffsetDateTime> {
        let local = after.to_offset(time::UtcOffset::UTC) + Duration::seconds(offset_seconds);
        let mut t = PrimitiveDateTime::new(local.date(), Time::from_hms(local.hour(), local.minute(), 0).ok()?)
            + Duration::minutes(1);
        // Four years cover every day-of-month/month combination, leap days included.
        let limit = t + Duration::days(4 * 366);
        while t < limit {
            if !self.months[t.month() as usize] {
                let (year, month) = match t.month() {
                    Month::December => (t.year() + 1, Month::January),
                    month => (t.year(), month.next()),
                };
                t = PrimitiveDateTime::new(Date::from_calendar_date(year, month, 1).ok()?, Time::MIDNIGHT);
            } else if !self.day_matches(t.date()) {
                t = PrimitiveDateTime::new(t.date().next_day()?, Time::MIDNIGHT);
            } else if !self.hours[t.hour() as usize] {
                t = PrimitiveDateTime::new(t.date(), Time::from_hms(t.hour(), 0, 0).ok()?) + Duration::hours(1);
            } else if !self.minutes[t.minute() as usize] {
                t += Duration::minutes(1);
            } else {
                return Some(t.assume_utc() - Duration::seconds(offset_seconds));
            }
        }
        None
    }

    fn day_matches(&self, date: Date) -> bool {
        let day = self.days[date.day() as usize];
        let weekday = self.weekdays[date.weekday().number_days_from_sunday() as usize];
        if self.either_day {
            day || weekday
        } else {
            day && weekday
        }
    }
}

/// One field as a bitmap indexed by value (indexes below `low` unused).
fn parse_field(text: &str, low: u32, high: u32) -> Option<Vec<bool>> {
    let mut set = vec![false; high as usize + 1];
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (start, end) = match range {
            "*" => (low, high),
            _ => match range.split_once('-') {
                Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                None => {
                    let value: u32 = range.parse().ok()?;
                    (value, if step > 1 { high } else { value })
                }
            },
        };
        if start < low || end > high || start > end {
            return None;
        }
        for value in (start..=end).step_by(step as usize) {
            set[value as usize] = true;
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `"2026-01-01T10:00:30Z"` (UTC only).
    fn at(text: &str) -> OffsetDateTime {
        let n = |range: std::ops::Range<usize>| text[range].parse::<u32>().unwrap();
        let month = Month::try_from(n(5..7) as u8).unwrap();
        let date = Date::from_calendar_date(n(0..4) as i32, month, n(8..10) as u8).unwrap();
        let time = Time::from_hms(n(11..13) as u8, n(14..16) as u8, n(17..19) as u8).unwrap();
        PrimitiveDateTime::new(date, time).assume_utc()
    }

    #[test]
    fn expressions_parse_or_are_refused() {
        for good in [
            "* * * * *",
            "*/5 * * * *",
            "0 9 * * 1-5",
            "30 2 1,15 * *",
            "@daily",
            "@weekly",
        ] {
            assert!(Schedule::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "not a valid cron",
            "0 0 0 0 0 0 0",
            "99 25 32 13 8",
            "*/0 * * * *",
            "5-1 * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn next_minutes_follow_the_fields() {
        let next = |expr: &str, after: &str, offset: i64| Schedule::parse(expr).unwrap().next_after(at(after), offset);
        assert_eq!(
            next("* * * * *", "2026-01-01T10:00:30Z", 0),
            Some(at("2026-01-01T10:01:00Z"))
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T10:01:00Z", 0),
            Some(at("2026-01-01T10:15:00Z"))
        );
        assert_eq!(
            next("@daily", "2026-12-31T23:59:00Z", 0),
            Some(at("2027-01-01T00:00:00Z"))
        );
        // 09:00 in UTC+9 is 00:00 UTC.
        assert_eq!(
            next("0 9 * * *", "2026-01-01T01:00:00Z", 9 * 3600),
            Some(at("2026-01-02T00:00:00Z"))
        );
        // Sundays (0 and 7) in January 2026: the 4th is one.
        assert_eq!(
            next("0 0 * * 7", "2026-01-01T00:00:00Z", 0),
            Some(at("2026-01-04T00:00:00Z"))
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-01-01T00:00:00Z", 0),
            Some(at("2028-02-29T00:00:00Z"))
        );
    }
}
