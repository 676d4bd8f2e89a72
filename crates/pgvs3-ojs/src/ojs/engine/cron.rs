//! Cron expressions: five fields (minute hour day-of-month month day-of-week) with `*`, lists,
//! ranges and steps, month and weekday names (`JAN`, `MON-FRI`, any case, ojs-cron §3.4), the
//! day forms of §3.3 (`L` and `15W` in day-of-month, `5L` and `5#3` in day-of-week), or the
//! `@hourly`-style shorthands; and the next matching minute.

use deadpool_postgres::GenericClient;
use serde_json::{Value, json};
use time::{Date, Duration, Month, OffsetDateTime, PrimitiveDateTime, Time};
use tokio_postgres::error::SqlState;

use super::envelope;
use super::jobs::{Inserted, insert, insert_unique};
use super::{DEFAULT_TENANT, EngineError, ErrorKind, Queue};

/// What a cron schedule does when a tick comes while its previous job is still running
/// (ojs-cron §6); the job is found by its `meta.cron_name`.
pub const OVERLAP_POLICIES: [&str; 4] = ["skip", "allow", "cancel_previous", "enqueue"];

/// A registration, checked: its name, the definition to store (the request as sent, with the
/// expression, job template, overlap policy and time zone filled in).
pub struct Registration {
    pub name: String,
    pub definition: Value,
    /// `enabled` (default true): a disabled schedule stays registered and does not fire.
    pub enabled: bool,
}

/// Fields the server keeps (ojs-cron §2.2): ignored when a registration sends them.
const SYSTEM_FIELDS: [&str; 5] = ["enabled", "run_count", "last_run_at", "next_run_at", "created_at"];

/// `[a-z0-9][a-z0-9\-\.]*`, at most 255 bytes (ojs-cron §2.2): safe in a URL, one spelling.
pub fn is_valid_name(name: &str) -> bool {
    name.len() <= 255
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// Checks a registration (ojs-cron §2) in the spec's form (`cron`, `type`, `args`, `options`)
/// or this binding's older one (`expression`, `job_template`). The time zone must look like an
/// IANA name (`UTC`, `Area/Location`); whether the database knows it is checked on storing.
pub fn parse_registration(body: Value) -> Result<Registration, EngineError> {
    let Value::Object(mut fields) = body else {
        return Err(EngineError::invalid("a cron schedule is a JSON object"));
    };
    let name = match fields.get("name") {
        Some(Value::String(name)) if is_valid_name(name) => name.clone(),
        _ => {
            return Err(EngineError::invalid(
                "a cron schedule needs a \"name\" of lower-case letters, digits, '-' and '.', starting with a \
                 letter or digit (at most 255 characters)",
            ));
        }
    };
    let enabled = match fields.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(enabled)) => *enabled,
        Some(_) => return Err(EngineError::invalid("\"enabled\" must be true or false")),
    };
    for field in SYSTEM_FIELDS {
        fields.remove(field);
    }
    let expressions: Vec<&str> = ["cron", "expression", "schedule"]
        .iter()
        .filter_map(|field| fields.get(*field).and_then(Value::as_str))
        .collect();
    let Some(expression) = expressions.first().map(|e| e.to_string()) else {
        return Err(EngineError::invalid("a cron schedule needs a \"cron\" expression"));
    };
    if expressions.iter().any(|other| *other != expression) {
        return Err(EngineError::invalid("\"cron\" and \"expression\" disagree"));
    }
    // Refused here when it does not parse; each next run parses it again from the definition.
    Schedule::parse(&expression)?;
    let template = match fields.get("job_template") {
        Some(template @ Value::Object(_)) => template.clone(),
        Some(_) => return Err(EngineError::invalid("\"job_template\" must be an object")),
        None => {
            let Some(job_type) = fields.get("type").filter(|t| t.is_string()) else {
                return Err(EngineError::invalid(
                    "a cron schedule needs the \"type\" of the job it enqueues",
                ));
            };
            json!({
                "type": job_type,
                "args": fields.get("args").cloned().unwrap_or_else(|| json!([])),
                "options": fields.get("options").cloned().unwrap_or_else(|| json!({})),
            })
        }
    };
    // Schedules belong to no tenant, and their jobs to the default one: a template naming
    // another would be enqueued as the default tenant's all the same.
    if template
        .pointer("/meta/tenant_id")
        .is_some_and(|tenant| tenant.as_str() != Some(DEFAULT_TENANT))
    {
        return Err(EngineError::invalid(
            "a cron job template has no \"meta.tenant_id\": every tick enqueues as the default tenant",
        ));
    }
    if template.get("id").is_some() {
        return Err(EngineError::invalid(
            "a cron job template has no \"id\": every tick enqueues a new job, with an id of its own",
        ));
    }
    match fields.get("timezone") {
        None | Some(Value::Null) => {}
        Some(Value::String(zone)) if is_zone_name(zone) => {}
        Some(zone) => {
            return Err(EngineError::invalid(format!(
                "\"timezone\" must be an IANA time zone name such as \"America/New_York\" or \"UTC\", not {zone}: \
                 fixed offsets and abbreviations do not follow daylight saving time"
            )));
        }
    }
    let overlap = match fields.get("overlap_policy") {
        None | Some(Value::Null) => "skip",
        Some(Value::String(policy)) if OVERLAP_POLICIES.contains(&policy.as_str()) => policy.as_str(),
        Some(policy) => {
            return Err(EngineError::invalid(format!(
                "\"overlap_policy\" must be one of {}, not {policy}",
                OVERLAP_POLICIES.join(", ")
            )));
        }
    }
    .to_string();
    fields.insert("expression".into(), Value::String(expression.clone()));
    fields.insert("cron".into(), Value::String(expression));
    fields.insert("job_template".into(), template);
    fields.insert("overlap_policy".into(), Value::String(overlap));
    Ok(Registration {
        name,
        definition: Value::Object(fields),
        enabled,
    })
}

/// `UTC`, or `Area/Location` names of the tz database (`America/Argentina/Buenos_Aires`,
/// `Etc/GMT+5`); never a bare offset (`+05:00`, `UTC+5`) or abbreviation (`EST`), which
/// PostgreSQL would take as POSIX zones (with the offset's sign reversed).
fn is_zone_name(zone: &str) -> bool {
    let mut parts = zone.split('/');
    let area = parts.next().unwrap_or_default();
    zone == "UTC"
        || (area.len() >= 3
            && area.starts_with(|c: char| c.is_ascii_uppercase())
            && area.chars().all(|c| c.is_ascii_alphabetic())
            && zone.len() <= 64
            && zone.contains('/')
            && zone
                .split('/')
                .skip(1)
                .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || "_+-".contains(c))))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// The day forms beyond numbers and names.
    special: SpecialDays,
    /// Both day fields restricted: a day matches when either does (classic cron).
    either_day: bool,
    /// The minute or hour field starts with `*` (Vixie cron's "wildcard" job, `*/15 * * * *`,
    /// `0 * * * *`): it runs in both copies of an hour the clocks repeat, where a fixed-time
    /// job (`30 1 * * *`) runs once.
    wildcard: bool,
}

/// ojs-cron §3.3: `L` (the month's last day) and `15W` (the weekday nearest the 15th, within
/// the month) in day-of-month; `5L` (the month's last Friday) and `5#3` (its third Friday) in
/// day-of-week. Weekdays are 0 (Sunday) to 6.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct SpecialDays {
    last_day: bool,
    nearest_weekdays: Vec<u8>,
    last_weekdays: Vec<u8>,
    nth_weekdays: Vec<(u8, u8)>,
}

impl Schedule {
    pub fn parse(expression: &str) -> Result<Schedule, EngineError> {
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
            return Err(EngineError::invalid(format!(
                "invalid cron expression {expression:?}: expected 5 fields (minute hour day month weekday)"
            )));
        };
        let bad_field = |text: &str, name: &str| {
            EngineError::invalid(format!(
                "invalid cron expression {expression:?}: bad {name} field {text:?}"
            ))
        };
        let field = |text: &str, low: u32, high: u32, name: &str| {
            let names: &[&str] = match name {
                "month" => &MONTHS,
                "day-of-week" => &WEEKDAYS,
                _ => &[],
            };
            parse_field(text, low, high, names).ok_or_else(|| {
                EngineError::invalid(format!(
                    "invalid cron expression {expression:?}: bad {name} field {text:?} (allowed {low}-{high})"
                ))
            })
        };
        // A day field of special forms only matches no day by its plain part.
        let field_or_none = |parts: &[&str], low: u32, high: u32, name: &str| match parts {
            [] => Ok(vec![false; high as usize + 1]),
            parts => field(&parts.join(","), low, high, name),
        };
        let mut special = SpecialDays::default();
        let day_list = special
            .take_from_days(day)
            .ok_or_else(|| bad_field(day, "day-of-month"))?;
        let weekday_list = special
            .take_from_weekdays(weekday)
            .ok_or_else(|| bad_field(weekday, "day-of-week"))?;
        let mut weekdays = field_or_none(&weekday_list, 0, 7, "day-of-week")?;
        if weekdays[7] {
            weekdays[0] = true; // 7 is Sunday too
        }
        Ok(Schedule {
            minutes: field(minute, 0, 59, "minute")?,
            hours: field(hour, 0, 23, "hour")?,
            days: field_or_none(&day_list, 1, 31, "day-of-month")?,
            months: field(month, 1, 12, "month")?,
            weekdays,
            special,
            either_day: *day != "*" && *weekday != "*",
            wildcard: minute.starts_with('*') || hour.starts_with('*'),
        })
    }

    /// The first matching wall-clock minute strictly after wall time `after` (a time zone's
    /// local time: [`next_run`] turns it into an instant with the zone's rules).
    pub fn next_wall_after(&self, after: PrimitiveDateTime) -> Option<PrimitiveDateTime> {
        let mut t = PrimitiveDateTime::new(after.date(), Time::from_hms(after.hour(), after.minute(), 0).ok()?)
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
                return Some(t);
            }
        }
        None
    }

    fn day_matches(&self, date: Date) -> bool {
        let day = self.days[date.day() as usize] || self.special.day_matches(date);
        let weekday =
            self.weekdays[date.weekday().number_days_from_sunday() as usize] || self.special.weekday_matches(date);
        if self.either_day {
            day || weekday
        } else {
            day && weekday
        }
    }
}

impl SpecialDays {
    /// Takes `L` and `<day>W` out of a day-of-month field; answers the plain parts left.
    fn take_from_days<'a>(&mut self, field: &'a str) -> Option<Vec<&'a str>> {
        let mut plain = Vec::new();
        for part in field.split(',') {
            if part.eq_ignore_ascii_case("L") {
                self.last_day = true;
            } else if let Some(day) = part.strip_suffix(['W', 'w']) {
                self.nearest_weekdays
                    .push(day.parse().ok().filter(|day| (1..=31).contains(day))?);
            } else {
                plain.push(part);
            }
        }
        Some(plain)
    }

    /// Takes `<weekday>L` and `<weekday>#<n>` (n 1 to 5) out of a day-of-week field; answers the
    /// plain parts left.
    fn take_from_weekdays<'a>(&mut self, field: &'a str) -> Option<Vec<&'a str>> {
        let weekday = |text: &str| {
            value(text, 0, &WEEKDAYS)
                .filter(|day| *day <= 7)
                .map(|day| (day % 7) as u8)
        };
        let mut plain = Vec::new();
        for part in field.split(',') {
            if let Some((day, nth)) = part.split_once('#') {
                let nth = nth.parse().ok().filter(|nth| (1..=5).contains(nth))?;
                self.nth_weekdays.push((weekday(day)?, nth));
            } else if let Some(day) = part.strip_suffix(['L', 'l']).filter(|day| !day.is_empty()) {
                self.last_weekdays.push(weekday(day)?);
            } else {
                plain.push(part);
            }
        }
        Some(plain)
    }

    fn day_matches(&self, date: Date) -> bool {
        let last = time::util::days_in_month(date.month(), date.year());
        (self.last_day && date.day() == last)
            || self
                .nearest_weekdays
                .iter()
                .any(|&day| nearest_weekday(day, last, date) == Some(date.day()))
    }

    fn weekday_matches(&self, date: Date) -> bool {
        let weekday = date.weekday().number_days_from_sunday();
        let last = time::util::days_in_month(date.month(), date.year());
        self.last_weekdays
            .iter()
            .any(|&day| day == weekday && date.day() + 7 > last)
            || self
                .nth_weekdays
                .iter()
                .any(|&(day, nth)| day == weekday && (date.day() - 1) / 7 + 1 == nth)
    }
}

/// The weekday (Monday to Friday) nearest `day` of `date`'s month, never outside the month
/// (Quartz's `W`): a Saturday moves to the Friday before (or the Monday after, on the 1st), a
/// Sunday to the Monday after (or the Friday before, on the month's last day). None when the
/// month has no such day.
fn nearest_weekday(day: u8, last: u8, date: Date) -> Option<u8> {
    if day > last {
        return None;
    }
    let target = date.replace_day(day).ok()?;
    Some(match target.weekday() {
        time::Weekday::Saturday if day == 1 => 3,
        time::Weekday::Saturday => day - 1,
        time::Weekday::Sunday if day == last => day - 2,
        time::Weekday::Sunday => day + 1,
        _ => day,
    })
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A field's value: a number, or one of its `names` (the first is `low`).
fn value(text: &str, low: u32, names: &[&str]) -> Option<u32> {
    match names.iter().position(|name| name.eq_ignore_ascii_case(text)) {
        Some(index) => Some(low + index as u32),
        None => text.parse().ok(),
    }
}

/// One field as a bitmap indexed by value (indexes below `low` unused).
fn parse_field(text: &str, low: u32, high: u32, names: &[&str]) -> Option<Vec<bool>> {
    let mut set = vec![false; high as usize + 1];
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (start, end) = match range {
            "*" => (low, high),
            _ => match range.split_once('-') {
                Some((a, b)) => (value(a, low, names)?, value(b, low, names)?),
                None => {
                    let value = value(range, low, names)?;
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

/// Any fixed number works; it only has to be the same for every gateway of one database.
const CRON_LOCK: i64 = 0x7067_7673_335f_6372; // "pgvs3_cr"

impl Queue {
    /// Stores a cron schedule: a new one, or (`replace`) whatever has its name. An existing name
    /// not to be replaced is 409; a time zone PostgreSQL does not know is 400.
    pub async fn put_cron(&self, cron: &Registration, replace: bool) -> Result<Value, EngineError> {
        let client = self.client().await?;
        if let Some(zone) = cron.definition.get("timezone").and_then(Value::as_str) {
            let known: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $1) AS known",
                    &[&zone],
                )
                .await
                .map_err(EngineError::sql)?
                .get("known");
            if !known {
                return Err(EngineError::invalid(format!("unknown time zone {zone:?}")));
            }
        }
        let next = next_run(&client, &cron.definition, None, None)
            .await?
            .ok_or_else(|| EngineError::invalid("the cron expression never matches"))?;
        // A replacement keeps the schedule's count and registration time (§2.2: since
        // registration).
        let statement = if replace {
            "INSERT INTO ojs.cron (name, definition, next_run, enabled) VALUES ($1, $2, to_timestamp($3), $4)
             ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, next_run = excluded.next_run,
                 enabled = excluded.enabled
             RETURNING ojs.cron_json(cron) AS cron"
        } else {
            "INSERT INTO ojs.cron (name, definition, next_run, enabled) VALUES ($1, $2, to_timestamp($3), $4)
             ON CONFLICT (name) DO NOTHING
             RETURNING ojs.cron_json(cron) AS cron"
        };
        let row = client
            .query_opt(statement, &[&cron.name, &cron.definition, &next, &cron.enabled])
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("cron")).ok_or_else(|| {
            EngineError::duplicate(format!(
                "a cron schedule named {:?} exists; PUT /ojs/v1/cron/{} replaces it",
                cron.name, cron.name
            ))
        })
    }

    /// Every schedule by name, or (`enabled`) only the enabled or disabled ones.
    pub async fn list_crons(&self, enabled: Option<bool>) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT ojs.cron_json(c) AS cron FROM ojs.cron c WHERE $1::bool IS NULL OR enabled = $1 ORDER BY name",
                &[&enabled],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(|row| row.get("cron")).collect())
    }

    pub async fn get_cron(&self, name: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT ojs.cron_json(c) AS cron FROM ojs.cron c WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("cron"))
            .ok_or_else(|| EngineError::not_found(format!("no cron schedule {name:?}")))
    }

    /// Enables or disables a schedule (ojs-cron §8.5). Enabling one that was disabled computes
    /// its next run from now, so the ticks it missed while disabled do not fire on resuming.
    pub async fn set_cron_enabled(&self, name: &str, enabled: bool) -> Result<Value, EngineError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        let row = tx
            .query_opt(
                "SELECT definition, enabled FROM ojs.cron WHERE name = $1 FOR UPDATE",
                &[&name],
            )
            .await
            .map_err(EngineError::sql)?
            .ok_or_else(|| EngineError::not_found(format!("no cron schedule {name:?}")))?;
        let definition: Value = row.get("definition");
        let mut next = None;
        if enabled && !row.get::<_, bool>("enabled") {
            next = next_run(&tx, &definition, None, None).await?;
        }
        let row = tx
            .query_one(
                "UPDATE ojs.cron c SET enabled = $2,
                        next_run = CASE WHEN $2 AND NOT c.enabled THEN coalesce(to_timestamp($3), 'infinity') ELSE c.next_run END
                  WHERE name = $1 RETURNING ojs.cron_json(c) AS cron",
                &[&name, &enabled, &next],
            )
            .await
            .map_err(EngineError::sql)?;
        tx.commit().await.map_err(EngineError::sql)?;
        Ok(row.get("cron"))
    }

    pub async fn delete_cron(&self, name: &str) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "DELETE FROM ojs.cron c WHERE name = $1 RETURNING ojs.cron_json(c) AS cron",
                &[&name],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| row.get("cron"))
            .ok_or_else(|| EngineError::not_found(format!("no cron schedule {name:?}")))
    }

    /// Enqueues the jobs of every cron schedule that is due, once: each due schedule in a
    /// transaction of its own, its row locked and moved to its next run in the same
    /// transaction as the enqueue, and one gateway at a time does it (the advisory lock, taken
    /// again by each transaction), so any number of gateways fire each tick once. A transaction
    /// each, because an enqueue takes advisory locks (a unique key's, a bounded queue's) that
    /// last until commit: held across schedules, they would be taken in the order schedules
    /// come, not the order clients take them, and deadlock with a client's enqueue.
    pub async fn fire_due_crons(&self, max_args_bytes: usize) -> Result<usize, EngineError> {
        let mut client = self.client().await?;
        let mut fired = 0;
        // The schedules this tick has handled: one that could not even move on is not tried
        // again until the next tick.
        let mut handled: Vec<String> = Vec::new();
        loop {
            let mut tx = client.transaction().await.map_err(EngineError::sql)?;
            let leader: bool = tx
                .query_one("SELECT pg_try_advisory_xact_lock($1) AS leader", &[&CRON_LOCK])
                .await
                .map_err(EngineError::sql)?
                .get("leader");
            if !leader {
                return Ok(fired);
            }
            let Some(row) = tx
                .query_opt(
                    "SELECT name, definition, ojs.ts(next_run) AS tick, extract(epoch FROM next_run)::float8 AS tick_epoch
                     FROM ojs.cron WHERE next_run <= now() AND enabled AND name <> ALL($1)
                     ORDER BY next_run, name LIMIT 1
                     FOR UPDATE SKIP LOCKED",
                    &[&handled],
                )
                .await
                .map_err(EngineError::sql)?
            else {
                tx.commit().await.map_err(EngineError::sql)?;
                return Ok(fired);
            };
            let tick = Tick {
                name: row.get("name"),
                definition: row.get("definition"),
                at: row.get("tick"),
                at_epoch: row.get("tick_epoch"),
            };
            handled.push(tick.name.clone());
            // Under a savepoint: a schedule that cannot fire (one stored before registration
            // checked what its ticks build, say) misses this tick and moves on to its next, as
            // a full queue makes it, and does not stop the others.
            let attempt = tx.transaction().await.map_err(EngineError::sql)?;
            match fire(&attempt, &tick, max_args_bytes).await {
                Ok(triggered) => {
                    attempt.commit().await.map_err(EngineError::sql)?;
                    fired += usize::from(triggered);
                }
                Err(error) => {
                    attempt.rollback().await.map_err(EngineError::sql)?;
                    tracing::warn!(cron = %tick.name, ?error, "a cron schedule's tick failed; it moves on to its next run");
                    let step = tx.transaction().await.map_err(EngineError::sql)?;
                    match move_on(&step, &tick).await {
                        Ok(()) => step.commit().await.map_err(EngineError::sql)?,
                        Err(error) => {
                            step.rollback().await.map_err(EngineError::sql)?;
                            tracing::warn!(cron = %tick.name, ?error, "a failed cron schedule could not move on");
                        }
                    }
                }
            }
            tx.commit().await.map_err(EngineError::sql)?;
        }
    }
}

/// The job each tick of schedule `name` enqueues (`at` is the tick), checked as an enqueue
/// checks a job: registration calls it too, so a schedule whose ticks could not enqueue is
/// refused when it is registered rather than failing at every tick.
pub fn tick_job(
    name: &str,
    definition: &Value,
    at: &str,
    max_args_bytes: usize,
) -> Result<envelope::NewJob, EngineError> {
    let policy = definition["overlap_policy"].as_str().unwrap_or("allow");
    envelope::parse_job(cron_job(name, definition, at, policy), max_args_bytes)
}

/// When a schedule runs next (`None`: never again), in Unix seconds: the first minute its
/// fields match in its `timezone`'s wall time (UTC when none) after `now` (the database's clock
/// when `None`) and after `tick` (the tick being fired) — the database's clock decided that it
/// was due, so the next one is found from at least that time, whatever the gateway's clock says.
///
/// The zone's rules are PostgreSQL's, applied at that wall time (a schedule registered in winter
/// for a summer day gets the summer offset). Where the clocks go back, a wildcard schedule (its
/// minute or hour field starts with `*`) runs in both copies of the repeated wall times, and a fixed-time one
/// once, at the first: its wall time is taken from the tick (or now, if later by the wall
/// clock), so a tick fired late, after the clocks went back, does not run it again in the second
/// copy. This is cron(8)'s rule (Vixie cron, cronie). A wall time that does not happen (the hour
/// the clocks go forward) runs when the clock jumps past it, as cron(8) runs what the jump
/// skipped.
pub async fn next_run(
    client: &impl GenericClient,
    definition: &Value,
    now: Option<f64>,
    tick: Option<f64>,
) -> Result<Option<f64>, EngineError> {
    let schedule = Schedule::parse(definition["expression"].as_str().unwrap_or_default())?;
    let zone = definition.get("timezone").and_then(Value::as_str).unwrap_or("UTC");
    let unknown_zone = |err: tokio_postgres::Error| match err.code() {
        Some(&SqlState::INVALID_PARAMETER_VALUE) => EngineError::invalid(format!("unknown time zone {zone:?}")),
        _ => EngineError::sql(err),
    };
    // `shifted_wall`: the wall time of `after` in the offset three hours on (cron(8) repeats
    // a step back of less than three hours); earlier than `wall` only just before the clocks go back.
    let row = client
        .query_one(
            "SELECT extract(epoch FROM a AT TIME ZONE $2)::float8 AS wall,
                    extract(epoch FROM ((a + interval '3 hours') AT TIME ZONE $2) - interval '3 hours')::float8 AS shifted_wall,
                    extract(epoch FROM greatest(n AT TIME ZONE $2, to_timestamp($1) AT TIME ZONE $2))::float8 AS fixed_wall,
                    extract(epoch FROM a)::float8 AS after
             FROM (SELECT n, greatest(n, to_timestamp($1)) AS a FROM (SELECT coalesce(to_timestamp($3), now()) AS n) c) p",
            &[&tick, &zone, &now],
        )
        .await
        .map_err(unknown_zone)?;
    let after: f64 = row.get("after");
    let (wall, shifted_wall): (f64, f64) = match schedule.wildcard {
        true => (row.get("wall"), row.get("shifted_wall")),
        false => (row.get("fixed_wall"), row.get("fixed_wall")),
    };
    let instant = |wall: f64| {
        let schedule = &schedule;
        async move {
            let wall = OffsetDateTime::from_unix_timestamp(wall.floor() as i64)
                .map_err(|_| EngineError::invalid("the time is out of range"))?;
            let Some(next) = schedule.next_wall_after(PrimitiveDateTime::new(wall.date(), wall.time())) else {
                return Ok(None);
            };
            let row = client
                .query_one(
                    WALL_TIME_TO_INSTANT,
                    &[&(next.assume_utc().unix_timestamp() as f64), &zone, &after],
                )
                .await
                .map_err(unknown_zone)?;
            Ok::<_, EngineError>(Some((row.get::<_, Option<f64>>("next"), row.get::<_, bool>("exact"))))
        }
    };
    let Some((next, _)) = instant(wall).await? else {
        return Ok(None);
    };
    // Just before the clocks go back, the matching wall time after `after` in the new offset
    // may come first (the repeated copy of the hour); it counts only where that wall time
    // really happens after `after`.
    if shifted_wall < wall
        && let Some((Some(repeated), true)) = instant(shifted_wall).await?
    {
        return Ok(Some(next.map_or(repeated, |next| next.min(repeated))));
    }
    Ok(next)
}

/// The first instant after $3 (Unix seconds) at which wall time $1 (Unix seconds read as a wall
/// time) comes in zone $2: of the instants whose wall time it is (one; two where the clocks go
/// back, a day's offsets around it covering both), the earliest (`exact`); where the clocks jump
/// over it, the first minute whose wall time is past it.
const WALL_TIME_TO_INSTANT: &str = "
WITH p AS (
    SELECT to_timestamp($1) AT TIME ZONE 'UTC' AS w, $2::text AS z, to_timestamp($3) AS after
), around AS (
    SELECT p.*, x FROM p, unnest(ARRAY[(p.w AT TIME ZONE p.z) - interval '1 day', p.w AT TIME ZONE p.z,
                                       (p.w AT TIME ZONE p.z) + interval '1 day']) x
), instants AS (
    SELECT (w - ((x AT TIME ZONE z) - (x AT TIME ZONE 'UTC'))) AT TIME ZONE 'UTC' AS u, w, z, after FROM around
)
SELECT extract(epoch FROM coalesce(e.u,
    (SELECT min(u) FROM p, generate_series(date_trunc('minute', (p.w AT TIME ZONE p.z) - interval '1 day'),
                                           (p.w AT TIME ZONE p.z) + interval '1 day', interval '1 minute') u
     WHERE (u AT TIME ZONE p.z) >= p.w AND u > p.after)))::float8 AS next, e.u IS NOT NULL AS exact
FROM (SELECT (SELECT min(u) FROM instants WHERE (u AT TIME ZONE z) = w AND u > after) AS u) e";

/// A tick that failed: the schedule is not run, only moved to its next run.
async fn move_on(tx: &deadpool_postgres::Transaction<'_>, tick: &Tick) -> Result<(), EngineError> {
    let next = next_run(tx, &tick.definition, None, Some(tick.at_epoch)).await?;
    tx.execute(
        "UPDATE ojs.cron SET next_run = coalesce(to_timestamp($2), 'infinity') WHERE name = $1",
        &[&tick.name, &next],
    )
    .await
    .map_err(EngineError::sql)?;
    Ok(())
}

/// A due tick of one schedule, as `fire_due_crons` read it (its row locked).
struct Tick {
    name: String,
    definition: Value,
    /// When it was due, as job timestamps read.
    at: String,
    /// The same in Unix seconds.
    at_epoch: f64,
}

/// Acts on one due tick as its overlap policy says, logs `cron.triggered` or `cron.skipped`,
/// and moves the schedule to its next run; whether a job was enqueued.
async fn fire(
    tx: &deadpool_postgres::Transaction<'_>,
    tick: &Tick,
    max_args_bytes: usize,
) -> Result<bool, EngineError> {
    let (name, definition) = (&tick.name, &tick.definition);
    let next = next_run(tx, definition, None, Some(tick.at_epoch)).await?;
    let policy = definition["overlap_policy"].as_str().unwrap_or("allow");
    let job = tick_job(name, definition, &tick.at, max_args_bytes)?;
    let running = match policy {
        "skip" | "cancel_previous" => previous_run(tx, &job, name).await?,
        _ => None,
    };
    if let (Some(previous), "cancel_previous") = (&running, policy) {
        tx.execute(
            "UPDATE ojs.jobs SET state = 'cancelled', cancelled_at = now(), visible_until = NULL
              WHERE id = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')",
            &[previous],
        )
        .await
        .map_err(EngineError::sql)?;
    }
    let overlapping = running.filter(|_| policy == "skip");
    let mut triggered = false;
    let (kind, mut data) = match overlapping {
        Some(existing) => (
            "cron.skipped",
            json!({ "reason": "overlap_prevention", "existing_job_id": existing }),
        ),
        None => match enqueue_tick(tx, &job).await {
            // A unique template whose duplicate is still there (`on_conflict: ignore`, or
            // `reject`'s refusal) misses this tick, as an overlapping run does.
            Ok(inserted) if inserted.duplicate => (
                "cron.skipped",
                json!({ "reason": "duplicate", "existing_job_id": inserted.jobs[0].id }),
            ),
            Err(error) if error.kind == ErrorKind::Duplicate => (
                "cron.skipped",
                json!({ "reason": "duplicate", "existing_job_id": error.details.as_ref().map(|d| d["existing_job_id"].clone()) }),
            ),
            Ok(_) => {
                triggered = true;
                ("cron.triggered", json!({ "job_id": job.id }))
            }
            // A full queue misses this tick, as an overlapping run does; the event log has the
            // rejection.
            Err(error) if matches!(error.kind, ErrorKind::QueueFull { .. }) => {
                ("cron.skipped", json!({ "reason": "queue_full" }))
            }
            Err(error) => return Err(error),
        },
    };
    data["cron_name"] = json!(name);
    data["cron_expr"] = definition["expression"].clone();
    data["job_type"] = json!(job.job_type);
    data["scheduled_at"] = json!(tick.at);
    // The event's subject is the schedule (the data names the job).
    tx.execute(
        "INSERT INTO ojs.events (id, type, queue, data) VALUES (gen_random_uuid()::text, $1, $2, $3)",
        &[&kind, &job.queue, &data],
    )
    .await
    .map_err(EngineError::sql)?;
    // `last_run_at` and `run_count` follow triggers (§7.3); a skipped tick only moves on.
    tx.execute(
        "UPDATE ojs.cron SET next_run = coalesce(to_timestamp($2), 'infinity'),
                last_run = CASE WHEN $3 THEN now() ELSE last_run END,
                run_count = run_count + CASE WHEN $3 THEN 1 ELSE 0 END
          WHERE name = $1",
        &[name, &next, &triggered],
    )
    .await
    .map_err(EngineError::sql)?;
    Ok(triggered)
}

/// Enqueues a tick's job (the default tenant's), through the unique check when its template
/// asks for one.
async fn enqueue_tick(
    tx: &deadpool_postgres::Transaction<'_>,
    job: &envelope::NewJob,
) -> Result<Inserted, EngineError> {
    match job.unique {
        Some(_) => insert_unique(tx, job, DEFAULT_TENANT).await,
        None => insert(tx, std::slice::from_ref(job)).await,
    }
}

/// The schedule's previous job while it is not done (found by its `meta.cron_name`): running,
/// or still waiting to run — a tick that comes before a backlogged queue reached the previous
/// one would otherwise enqueue a second run of the same schedule (as Kubernetes' CronJob
/// `Forbid` counts a job not yet started too).
async fn previous_run(
    tx: &deadpool_postgres::Transaction<'_>,
    job: &envelope::NewJob,
    name: &str,
) -> Result<Option<String>, EngineError> {
    Ok(tx
        .query_opt(
            "SELECT id FROM ojs.jobs WHERE queue = $1 AND type = $2
                AND state NOT IN ('completed', 'cancelled', 'discarded')
                AND envelope #>> '{meta,cron_name}' = $3 LIMIT 1",
            &[&job.queue, &job.job_type, &name],
        )
        .await
        .map_err(EngineError::sql)?
        .map(|row| row.get("id")))
}

/// The job a cron tick enqueues: its template, with the schedule's name and tick in `meta`
/// (ojs-cron §6.3, the correlation overlap policies use); under `enqueue`, a rate limit of one
/// at a time keyed by the schedule, so its jobs wait for each other instead of overlapping.
fn cron_job(name: &str, definition: &Value, tick: &str, policy: &str) -> Value {
    let mut job = definition["job_template"].clone();
    if !job["meta"].is_object() {
        job["meta"] = json!({});
    }
    job["meta"]["cron_name"] = json!(name);
    job["meta"]["cron_triggered_at"] = json!(tick);
    if policy == "enqueue" {
        if !job["options"].is_object() {
            job["options"] = json!({});
        }
        job["options"]["rate_limit"] = json!({ "key": format!("cron:{name}"), "concurrency": 1 });
    }
    job
}

/// How often a gateway checks for due cron schedules. Ticks are minutes apart, so a second of
/// lateness is the price of not needing a clock-synchronized scheduler.
const CRON_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// The event log is for pollers catching up, not an archive.
const EVENT_RETENTION: std::time::Duration = std::time::Duration::from_secs(3600);
const PRUNE_EVERY_TICKS: u64 = 60;

/// The cron ticker every gateway runs; the advisory lock in [`Queue::fire_due_crons`] makes one
/// of them fire each tick. On a standby it finds nothing to do (writes fail) and keeps polling.
/// Once a minute it also prunes old events (idempotent, so every gateway may).
pub fn spawn_cron_ticker(queue: Queue, max_args_bytes: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(CRON_POLL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for tick in 0u64.. {
            interval.tick().await;
            if tick % PRUNE_EVERY_TICKS == PRUNE_EVERY_TICKS - 1
                && let Err(error) = queue.prune_events(EVENT_RETENTION).await
            {
                tracing::debug!(?error, "pruning OJS events failed");
            }
            match queue.fire_due_crons(max_args_bytes).await {
                Ok(0) => {}
                Ok(fired) => tracing::debug!(fired, "cron jobs enqueued"),
                Err(error) => tracing::debug!(?error, "cron tick failed"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `"2026-01-01T10:00:30"`, a wall time.
    fn at(text: &str) -> PrimitiveDateTime {
        let n = |range: std::ops::Range<usize>| text[range].parse::<u32>().unwrap();
        let month = Month::try_from(n(5..7) as u8).unwrap();
        let date = Date::from_calendar_date(n(0..4) as i32, month, n(8..10) as u8).unwrap();
        let time = Time::from_hms(n(11..13) as u8, n(14..16) as u8, n(17..19) as u8).unwrap();
        PrimitiveDateTime::new(date, time)
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
        for (named, numbered) in [
            ("0 9 * * MON-FRI", "0 9 * * 1-5"),
            ("0 0 1 jan,Jul sun", "0 0 1 1,7 0"),
            ("0 0 * FEB-DEC/2 *", "0 0 * 2-12/2 *"),
            ("0 0 l * FRI#3", "0 0 L * 5#3"),
            ("0 0 * * friL", "0 0 * * 5L"),
        ] {
            assert_eq!(
                Schedule::parse(named).unwrap(),
                Schedule::parse(numbered).unwrap(),
                "{named}"
            );
        }
        for bad in [
            "not a valid cron",
            "0 0 0 0 0 0 0",
            "99 25 32 13 8",
            "*/0 * * * *",
            "5-1 * * * *",
            "0 0 * * MONDAY",
            "0 0 JAN * *",
            "0 0 * 13 *",
            "0 0 32W * *",
            "0 0 * * L",
            "0 0 * * 5#6",
            "0 0 * * 5#0",
            "0 0 * * 8L",
            "0 L * * *",
            "",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn registrations_take_both_forms_and_iana_zones_only() {
        let spec = parse_registration(
            json!({ "name": "r", "cron": "0 9 * * MON-FRI", "timezone": "America/New_York",
                                               "type": "report.generate", "args": [1], "options": { "queue": "q" } }),
        )
        .unwrap();
        assert_eq!(
            spec.definition["job_template"],
            json!({ "type": "report.generate", "args": [1], "options": { "queue": "q" } })
        );
        assert_eq!(
            (
                spec.definition["expression"].as_str(),
                spec.definition["overlap_policy"].as_str()
            ),
            (Some("0 9 * * MON-FRI"), Some("skip"))
        );
        let older = parse_registration(json!({ "name": "r", "expression": "@daily", "overlap_policy": "allow",
                                                "job_template": { "type": "t" } }))
        .unwrap();
        assert_eq!(older.definition["cron"], "@daily");
        for zone in ["UTC", "Asia/Tokyo", "America/Argentina/Buenos_Aires", "Etc/GMT+5"] {
            assert!(is_zone_name(zone), "{zone}");
        }
        for zone in [
            "+05:00", "-08:00", "UTC+5", "EST", "PST", "GMT-3", "utc", "America/", "/Tokyo", "5/5",
        ] {
            assert!(!is_zone_name(zone), "{zone}");
        }
        for bad in [
            json!({ "name": "r", "cron": "* * * * *" }),
            json!({ "name": "r", "type": "t" }),
            json!({ "name": "r", "cron": "* * * * *", "expression": "@daily", "type": "t" }),
            json!({ "name": "r", "cron": "* * * * *", "type": "t", "overlap_policy": "sometimes" }),
            json!({ "name": "r", "cron": "* * * * *", "type": "t", "timezone": "+05:00" }),
            json!({ "cron": "* * * * *", "type": "t" }),
        ] {
            assert!(parse_registration(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn next_minutes_follow_the_fields() {
        let next = |expr: &str, after: &str| Schedule::parse(expr).unwrap().next_wall_after(at(after));
        assert_eq!(
            next("* * * * *", "2026-01-01T10:00:30"),
            Some(at("2026-01-01T10:01:00"))
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T10:01:00"),
            Some(at("2026-01-01T10:15:00"))
        );
        assert_eq!(next("@daily", "2026-12-31T23:59:00"), Some(at("2027-01-01T00:00:00")));
        // Sundays (0 and 7) in January 2026: the 4th is one.
        assert_eq!(
            next("0 0 * * 7", "2026-01-01T00:00:00"),
            Some(at("2026-01-04T00:00:00"))
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-01-01T00:00:00"),
            Some(at("2028-02-29T00:00:00"))
        );
    }

    #[test]
    fn the_day_forms_of_the_spec_pick_their_days() {
        let next = |expr: &str, after: &str| Schedule::parse(expr).unwrap().next_wall_after(at(after));
        // The last day of February 2026 (not a leap year), then of March.
        assert_eq!(
            next("0 0 L * *", "2026-02-01T00:00:00"),
            Some(at("2026-02-28T00:00:00"))
        );
        assert_eq!(
            next("0 0 L * *", "2026-02-28T00:00:00"),
            Some(at("2026-03-31T00:00:00"))
        );
        // Third Friday of January 2026 (Fridays: 2, 9, 16), last Friday (30th).
        assert_eq!(
            next("0 9 * * 5#3", "2026-01-01T00:00:00"),
            Some(at("2026-01-16T09:00:00"))
        );
        assert_eq!(
            next("0 9 * * FRIL", "2026-01-01T00:00:00"),
            Some(at("2026-01-30T09:00:00"))
        );
        // The weekday nearest the 15th: Nov 15 2026 is a Sunday (Monday 16th), Aug 15 a Saturday
        // (Friday 14th); Aug 1 2026 a Saturday, kept in the month (Monday 3rd).
        assert_eq!(
            next("0 0 15W * *", "2026-11-01T00:00:00"),
            Some(at("2026-11-16T00:00:00"))
        );
        assert_eq!(
            next("0 0 15W * *", "2026-08-01T00:00:00"),
            Some(at("2026-08-14T00:00:00"))
        );
        assert_eq!(
            next("0 0 1W * *", "2026-07-31T00:00:00"),
            Some(at("2026-08-03T00:00:00"))
        );
        // 30W never in February: March.
        assert_eq!(
            next("0 0 30W 2,3 *", "2026-02-01T00:00:00"),
            Some(at("2026-03-30T00:00:00"))
        );
    }
}
