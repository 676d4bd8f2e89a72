//! Cron schedules: one firing per tick across gateways, the spec's registration form, overlap policies.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_cron_tick_fires_once_across_three_gateways() {
    let first = start().await;
    let database_url = first.database_url.clone();
    let others = [
        TestGateway::on(database_url.clone()).await,
        TestGateway::on(database_url.clone()).await,
    ];
    let ojs = Ojs::of(&first);
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "tick", "expression": "0 0 1 1 *", "job_template": { "type": "cron.tick", "args": [], "options": { "queue": "ticks" } } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Make the yearly schedule due now rather than waiting for New Year.
    let sql = first.sql().await;
    sql.execute("UPDATE ojs.cron SET next_run = now() - interval '1 second'", &[])
        .await
        .unwrap();
    let count = || async {
        sql.query_one("SELECT count(*) FROM ojs.jobs WHERE queue = 'ticks'", &[])
            .await
            .unwrap()
            .get::<_, i64>("count")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count().await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the due tick never fired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every gateway polls once a second: three more polls each, and still one job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count().await, 1, "the tick fired once across three gateways");
    let advanced: bool = sql
        .query_one(
            "SELECT next_run > now() + interval '1 day' AS postponed FROM ojs.cron WHERE name = 'tick'",
            &[],
        )
        .await
        .unwrap()
        .get("postponed");
    assert!(advanced, "the schedule moved on to next year");
    let events = events_of(&ojs, "tick", 1).await;
    assert_eq!(kinds(&events), ["cron.triggered"], "one tick, one event");
    let job: String = sql
        .query_one("SELECT id FROM ojs.jobs WHERE queue = 'ticks'", &[])
        .await
        .unwrap()
        .get("id");
    assert_eq!(
        (
            events[0]["data"]["job_id"].as_str(),
            events[0]["data"]["cron_expr"].as_str()
        ),
        (Some(job.as_str()), Some("0 0 1 1 *"))
    );
    assert!(events[0]["data"]["scheduled_at"].is_string());
    for gateway in others {
        gateway.stop().await;
    }
    first.stop().await;
}

/// The spec's registration form (ojs-cron §2: `cron`, `timezone`, `type`, `args`, `options`),
/// weekday names, `overlap_policy` defaulting to `skip`, an existing name refused (409) unless
/// replaced with PUT, and time zones that are IANA names only. Fails before: the spec's form was
/// 400 (no `expression`), a second registration replaced the first, and `+05:00` was taken as
/// POSIX time (9:00 fired at 14:00Z).
#[tokio::test]
async fn cron_registration_takes_the_spec_form_and_refuses_what_the_spec_refuses() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let report = json!({ "name": "daily-report", "cron": "0 9 * * MON-FRI", "timezone": "America/New_York",
                         "type": "report.generate", "args": [{ "report": "daily" }], "options": { "queue": "reports" } });
    let (status, body) = ojs.post("/ojs/v1/cron", report.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        (
            &body["cron"]["overlap_policy"],
            &body["cron"]["cron"],
            &body["cron"]["timezone"]
        ),
        (&json!("skip"), &json!("0 9 * * MON-FRI"), &json!("America/New_York"))
    );
    // 9:00 in New York is 13:00 or 14:00 UTC, on a weekday.
    let next = body["cron"]["next_run_at"].as_str().unwrap().to_string();
    assert!(next.contains("T13:00:00") || next.contains("T14:00:00"), "{next}");
    let (status, body) = ojs.post("/ojs/v1/cron", report.clone()).await;
    assert_eq!((status, &body["error"]["code"]), (409, &json!("duplicate")), "{body}");
    let mut changed = report.clone();
    changed["cron"] = json!("30 8 * * *");
    let (status, body) = ojs.call("PUT", "/ojs/v1/cron/daily-report", Some(changed)).await;
    assert_eq!(
        (status, &body["cron"]["expression"]),
        (200, &json!("30 8 * * *")),
        "{body}"
    );
    for zone in ["+05:00", "-08:00", "UTC+5", "EST", "Mars/Olympus_Mons"] {
        let mut bad = report.clone();
        bad["name"] = json!("zoned");
        bad["timezone"] = json!(zone);
        let (status, body) = ojs.post("/ojs/v1/cron", bad).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request")),
            "{zone}: {body}"
        );
    }
    let mut bad = report.clone();
    bad["name"] = json!("policy");
    bad["overlap_policy"] = json!("sometimes");
    let (status, _) = ojs.post("/ojs/v1/cron", bad).await;
    assert_eq!(status, 400);
    let (_, body) = ojs.get("/ojs/v1/cron").await;
    assert_eq!(body["crons"].as_array().map(Vec::len), Some(1), "{body}");
    gateway.stop().await;
}

/// Each overlap policy acts when a tick comes while the schedule's previous job is not done
/// (waiting to run, or active):
/// `skip` enqueues nothing (`cron.skipped`), `allow` a second job, `cancel_previous` cancels the
/// running one first, `enqueue` a second job that is not fetched until the first is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cron_overlap_policy_acts() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let jobs_of = |queue: String| {
        let sql = &sql;
        async move {
            sql.query(
                "SELECT state FROM ojs.jobs WHERE queue = $1 ORDER BY created_at, id",
                &[&queue],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>("state"))
            .collect::<Vec<_>>()
        }
    };
    for policy in ["skip", "allow", "cancel_previous", "enqueue"] {
        // Queue and schedule names take no '_' (cancel_previous).
        let name = format!("overlap-{}", policy.replace('_', "-"));
        let queue = name.clone();
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": name, "cron": "0 0 1 1 *", "overlap_policy": policy,
                        "type": "overlap.task", "options": { "queue": queue } }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let tick = || async {
            let before: i64 = sql
                .query_one(
                    "SELECT count(*) FROM ojs.events WHERE data ->> 'cron_name' = $1",
                    &[&name],
                )
                .await
                .unwrap()
                .get("count");
            sql.execute(
                "UPDATE ojs.cron SET next_run = now() - interval '1 second' WHERE name = $1",
                &[&name],
            )
            .await
            .unwrap();
            common::eventually(Duration::from_secs(10), "the tick", || async {
                let after: i64 = sql
                    .query_one(
                        "SELECT count(*) FROM ojs.events WHERE data ->> 'cron_name' = $1",
                        &[&name],
                    )
                    .await
                    .unwrap()
                    .get("count");
                (after > before).then_some(())
            })
            .await;
        };
        tick().await;
        if policy == "skip" {
            // Not started yet is not done either: no second run queued behind it.
            tick().await;
            assert_eq!(jobs_of(queue.clone()).await, ["available"]);
        }
        let first = ojs.fetch(&queue, "w1").await.expect("the first tick's job");
        assert_eq!(first["meta"]["cron_name"], json!(name), "{first}");
        tick().await;
        let states = jobs_of(queue.clone()).await;
        match policy {
            "skip" => assert_eq!(states, ["active"]),
            "allow" => assert_eq!(states, ["active", "available"]),
            "cancel_previous" => assert_eq!(states, ["cancelled", "available"]),
            _ => {
                assert_eq!(states, ["active", "available"]);
                assert!(ojs.fetch(&queue, "w2").await.is_none(), "not while the first runs");
                ojs.ack(&first, json!(null)).await;
                assert!(ojs.fetch(&queue, "w2").await.is_some(), "after it");
            }
        }
    }
    gateway.stop().await;
}

/// The day forms of ojs-cron §3.3: `L` (the month's last day), `15W` (the weekday nearest the
/// 15th), `5#3` (the third Friday) and `FRIL` (the last Friday) register and are scheduled on
/// such days. Fails before: each was 400 (bad day field).
#[tokio::test]
async fn the_day_forms_of_the_spec_register_and_schedule_on_their_days() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let day_of = |next: &str| next[8..10].parse::<u32>().unwrap();
    for (name, cron, days) in [
        ("last-day", "0 12 L * *", 28..=31),
        ("mid-month", "0 12 15W * *", 13..=17),
        ("third-friday", "0 9 * * FRI#3", 15..=21),
        ("last-friday", "0 9 * * 5L", 22..=31),
    ] {
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": name, "cron": cron, "type": "report.generate", "args": [] }),
            )
            .await;
        assert_eq!(status, 201, "{cron}: {body}");
        let next = body["cron"]["next_run_at"].as_str().unwrap();
        assert!(days.contains(&day_of(next)), "{cron}: {next}");
    }
    for cron in ["0 0 * * L", "0 0 * * 5#6", "0 0 32W * *"] {
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": "bad", "cron": cron, "type": "report.generate", "args": [] }),
            )
            .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request")),
            "{cron}: {body}"
        );
    }
    gateway.stop().await;
}

/// ojs-cron §2.2 and §8: a schedule can be registered disabled, toggled with `PATCH` (disabled:
/// no tick fires and `next_run_at` is null; enabled again: the next run is computed from now,
/// so missed ticks do not fire), read by name, listed by `enabled`; `run_count` and
/// `last_run_at` follow triggers; system fields a client sends are ignored; names outside the
/// spec's pattern are refused. Fails before: PATCH and GET by name were 404, `enabled` was
/// always true and ignored, there was no `run_count`, and any name was accepted.
#[tokio::test]
async fn cron_schedules_pause_resume_and_count_their_runs() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "nightly.report-1", "cron": "0 3 * * *", "type": "report.build",
                    "options": { "queue": "nightly" }, "run_count": 99, "last_run_at": "2020-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let cron = &body["cron"];
    assert_eq!(
        (&cron["enabled"], &cron["run_count"], &cron["last_run_at"]),
        (&json!(true), &json!(0), &Value::Null),
        "{body}"
    );
    assert!(cron["next_run_at"].is_string(), "{body}");

    let due = || async {
        sql.execute(
            "UPDATE ojs.cron SET next_run = now() - interval '1 second' WHERE name = 'nightly.report-1'",
            &[],
        )
        .await
        .unwrap();
    };
    let jobs = || async {
        sql.query_one("SELECT count(*) AS jobs FROM ojs.jobs WHERE queue = 'nightly'", &[])
            .await
            .unwrap()
            .get::<_, i64>("jobs")
    };
    due().await;
    common::eventually(Duration::from_secs(10), "the tick", || async {
        let (_, body) = ojs.get("/ojs/v1/cron/nightly.report-1").await;
        (body["cron_job"]["run_count"] == json!(1)).then_some(())
    })
    .await;
    let (_, body) = ojs.get("/ojs/v1/cron/nightly.report-1").await;
    assert!(body["cron_job"]["last_run_at"].is_string(), "{body}");
    assert_eq!(jobs().await, 1);

    // Disabled: kept, listed as such, null next run, and a due tick does not fire.
    let (status, body) = ojs
        .call(
            "PATCH",
            "/ojs/v1/cron/nightly.report-1",
            Some(json!({ "enabled": false })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["cron_job"]["enabled"], &body["cron_job"]["next_run_at"]),
        (&json!(false), &Value::Null),
        "{body}"
    );
    due().await;
    let (_, listed) = ojs.get("/ojs/v1/cron?enabled=false").await;
    assert_eq!(listed["cron_jobs"].as_array().map(Vec::len), Some(1), "{listed}");
    let (_, listed) = ojs.get("/ojs/v1/cron?enabled=true").await;
    assert_eq!(listed["cron_jobs"].as_array().map(Vec::len), Some(0), "{listed}");
    assert_eq!(listed["count"], 0, "{listed}");
    // A due schedule that is enabled shows a tick has passed since; the disabled one did not
    // fire in it.
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "probe", "cron": "@yearly", "type": "report.build", "options": { "queue": "probe" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    sql.execute(
        "UPDATE ojs.cron SET next_run = now() - interval '1 second' WHERE name = 'probe'",
        &[],
    )
    .await
    .unwrap();
    common::eventually(Duration::from_secs(10), "the probe's tick", || async {
        let (_, body) = ojs.get("/ojs/v1/cron/probe").await;
        (body["cron_job"]["run_count"] == json!(1)).then_some(())
    })
    .await;
    assert_eq!(jobs().await, 1);

    // Enabled again: the next run is a future one, not the tick missed while disabled.
    let (status, body) = ojs
        .call(
            "PATCH",
            "/ojs/v1/cron/nightly.report-1",
            Some(json!({ "enabled": true })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let next = body["cron_job"]["next_run_at"].as_str().unwrap().to_string();
    let in_future: bool = sql
        .query_one("SELECT $1::text::timestamptz > now() AS later", &[&next])
        .await
        .unwrap()
        .get("later");
    assert!(in_future, "{body}");
    assert_eq!(body["cron_job"]["run_count"], 1, "{body}");

    // Registered disabled; bad toggles and names refused; unknown names 404.
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "paused", "cron": "@hourly", "type": "report.build", "enabled": false }),
        )
        .await;
    assert_eq!((status, &body["cron"]["next_run_at"]), (201, &Value::Null), "{body}");
    for (method, path, body) in [
        ("PATCH", "/ojs/v1/cron/paused", json!({ "enabled": "no" })),
        (
            "PATCH",
            "/ojs/v1/cron/paused",
            json!({ "enabled": true, "cron": "* * * * *" }),
        ),
        (
            "POST",
            "/ojs/v1/cron",
            json!({ "name": "Nightly", "cron": "@daily", "type": "report.build" }),
        ),
        (
            "POST",
            "/ojs/v1/cron",
            json!({ "name": "-nightly", "cron": "@daily", "type": "report.build" }),
        ),
        (
            "POST",
            "/ojs/v1/cron",
            json!({ "name": "night_ly", "cron": "@daily", "type": "report.build" }),
        ),
        (
            "POST",
            "/ojs/v1/cron",
            json!({ "name": "x", "cron": "@daily", "type": "report.build", "enabled": 1 }),
        ),
    ] {
        let (status, answer) = ojs.call(method, path, Some(body.clone())).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}: {answer}"
        );
    }
    for (method, body) in [("GET", None), ("PATCH", Some(json!({ "enabled": true })))] {
        let (status, answer) = ojs.call(method, "/ojs/v1/cron/no-such", body).await;
        assert_eq!(status, 404, "{method}: {answer}");
    }
    gateway.stop().await;
}

/// A schedule is refused at registration when its ticks could not enqueue: a template with a
/// fixed `id` (the second tick's job would collide with the first's), or a name so long that
/// the `enqueue` policy's rate-limit key `cron:<name>` is past 255 bytes. Fails before: both were
/// 201, and their ticks failed later.
#[tokio::test]
async fn a_schedule_whose_ticks_could_not_enqueue_is_refused() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let long_name = "n".repeat(251);
    for registration in [
        json!({ "name": "fixed-id", "cron": "* * * * *", "job_template": { "type": "t", "args": [],
                "id": "0190b1d2-5c4e-7a3b-9c1d-2e3f4a5b6c7d" } }),
        json!({ "name": long_name, "cron": "* * * * *", "type": "t", "overlap_policy": "enqueue" }),
    ] {
        let (status, body) = ojs.post("/ojs/v1/cron", registration.clone()).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_request")),
            "{registration}: {body}"
        );
    }
    // The long name with another policy enqueues no rate-limited job: it is fine.
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": long_name, "cron": "* * * * *", "type": "t" }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    gateway.stop().await;
}

/// One schedule whose tick fails (stored before registration checked what ticks build) misses
/// its tick and moves on; the others due with it fire. Fails before: every due schedule fired in
/// one transaction, which the failing one rolled back, every second, for good.
#[tokio::test]
async fn one_failing_schedule_does_not_stop_the_others() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "healthy", "cron": "0 0 1 1 *", "type": "cron.ok", "options": { "queue": "healthy" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let broken = "b".repeat(251);
    let sql = gateway.sql().await;
    // As an older gateway stored it: due to enqueue a job whose rate-limit key is too long.
    sql.execute(
        "INSERT INTO ojs.cron (name, definition, next_run, enabled)
         SELECT $1, definition || jsonb_build_object('name', $1::text, 'overlap_policy', 'enqueue'), now(), true
           FROM ojs.cron WHERE name = 'healthy'",
        &[&broken],
    )
    .await
    .unwrap();
    sql.execute("UPDATE ojs.cron SET next_run = now() - interval '1 second'", &[])
        .await
        .unwrap();
    common::eventually(Duration::from_secs(10), "the healthy schedule's tick", || async {
        let (_, body) = ojs.get("/ojs/v1/cron/healthy").await;
        (body["cron_job"]["run_count"] == json!(1)).then_some(())
    })
    .await;
    let row = sql
        .query_one(
            "SELECT next_run > now() + interval '1 day' AS moved_on, run_count FROM ojs.cron WHERE name = $1",
            &[&broken],
        )
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>("moved_on"),
        "the failing schedule waits for its next tick"
    );
    assert_eq!(row.get::<_, i64>("run_count"), 0);
    let jobs: i64 = sql
        .query_one("SELECT count(*) AS jobs FROM ojs.jobs WHERE queue = 'healthy'", &[])
        .await
        .unwrap()
        .get("jobs");
    assert_eq!(jobs, 1, "the healthy schedule's job, and no other");
    gateway.stop().await;
}

/// Registers a schedule in a time zone and answers its `next_run_at`.
async fn next_run_in_zone(ojs: &Ojs, name: &str, cron: &str, zone: &str) -> String {
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": name, "cron": cron, "timezone": zone, "type": "report.generate", "args": [],
                    "options": { "queue": "reports" } }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["cron"]["next_run_at"].as_str().unwrap().to_string()
}

/// A schedule's next run takes the zone's UTC offset at that run, not now: 9:00 New York on a
/// day in the other half of the year from now is an hour apart in UTC from 9:00 today (it was
/// found with today's offset, an hour off).
#[tokio::test]
async fn a_zoned_schedule_runs_at_its_wall_time_in_the_other_half_of_the_year() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let month: i32 = sql
        .query_one(
            "SELECT extract(month FROM now() AT TIME ZONE 'America/New_York')::int AS m",
            &[],
        )
        .await
        .unwrap()
        .get("m");
    // New York is UTC-5 in January and UTC-4 in July.
    let (other_month, utc_hour) = if (4..=10).contains(&month) {
        (1, "T14:00:00")
    } else {
        (7, "T13:00:00")
    };
    let next = next_run_in_zone(
        &ojs,
        "other-half",
        &format!("0 9 1 {other_month} *"),
        "America/New_York",
    )
    .await;
    assert!(
        next.contains(utc_hour),
        "9:00 New York in month {other_month} is {utc_hour}Z, not {next}"
    );
    gateway.stop().await;
}

/// Where the clocks go forward (New York, the second Sunday of March, 02:00 EST to 03:00 EDT),
/// 02:30 does not happen: the run comes when the clock jumps past it, 03:00 EDT (07:00Z), as
/// cron(8) runs what the jump skipped. Where they go back (the first Sunday of November, 02:00
/// EDT to 01:00 EST), 01:30 happens twice: it runs once, at the first (05:30Z, EDT).
#[tokio::test]
async fn a_zoned_schedule_runs_once_across_the_clock_changes() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let sunday_in = |next: &str, month: i32, days: std::ops::RangeInclusive<i32>| {
        let (date, sql) = (next[..10].to_string(), &sql);
        async move {
            let row = sql
                .query_one(
                    "SELECT extract(dow FROM $1::text::date)::int AS dow, extract(month FROM $1::text::date)::int AS month,
                            extract(day FROM $1::text::date)::int AS day",
                    &[&date],
                )
                .await
                .unwrap();
            let (dow, m, day): (i32, i32, i32) = (row.get("dow"), row.get("month"), row.get("day"));
            dow == 0 && m == month && days.contains(&day)
        }
    };
    let gap = next_run_in_zone(&ojs, "gap", "30 2 * 3 0#2", "America/New_York").await;
    assert!(gap.contains("T07:00:00") && sunday_in(&gap, 3, 8..=14).await, "{gap}");
    let twice = next_run_in_zone(&ojs, "twice", "30 1 * 11 0#1", "America/New_York").await;
    assert!(
        twice.contains("T05:30:00") && sunday_in(&twice, 11, 1..=7).await,
        "{twice}"
    );
    gateway.stop().await;
}

/// When schedule `cron` in `zone` runs next (UTC, to the minute), as the engine finds it with
/// the database's clock at `now` while firing the tick due at `tick`.
async fn next_run_then(gateway: &TestGateway, cron: &str, zone: &str, now: &str, tick: &str) -> String {
    let config: tokio_postgres::Config = gateway.database_url.parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).max_size(1).build().unwrap();
    let client = pool.get().await.unwrap();
    let epoch = |at: &str| {
        let (client, at) = (&client, at.to_string());
        async move {
            client
                .query_one("SELECT extract(epoch FROM $1::text::timestamptz)::float8 AS e", &[&at])
                .await
                .unwrap()
                .get::<_, f64>("e")
        }
    };
    let (now, tick) = (epoch(now).await, epoch(tick).await);
    let definition = json!({ "expression": cron, "timezone": zone });
    let next = pgvs3_ojs::ojs::engine::cron::next_run(&client, &definition, Some(now), Some(tick))
        .await
        .unwrap()
        .unwrap();
    client
        .query_one(
            "SELECT to_char(to_timestamp($1) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI\"Z\"') AS t",
            &[&next],
        )
        .await
        .unwrap()
        .get("t")
}

/// Where the clocks go back, a wildcard schedule (minute or hour starting with `*`) runs in
/// both copies of the repeated hour and a fixed-time one once, as cron(8) (Vixie cron, cronie)
/// does: New York on 2026-11-01 (02:00 EDT to 01:00 EST, 06:00Z), Sydney on 2026-04-05
/// (03:00 AEDT to 02:00 AEST, 16:00Z), Lord Howe the same day (02:00 +11 to 01:30 +10:30,
/// 15:00Z). A fixed-time tick fired late, in the second copy, does not come back the same day.
#[tokio::test]
async fn a_wildcard_schedule_runs_in_both_copies_of_a_repeated_hour() {
    let gateway = start().await;
    let ny = "America/New_York";
    // (schedule, zone, now, tick, next run)
    let cases = [
        (
            "*/15 * * * *",
            ny,
            "2026-11-01 05:45:01Z",
            "2026-11-01 05:45Z",
            "2026-11-01T06:00Z",
        ),
        (
            "*/15 * * * *",
            ny,
            "2026-11-01 06:45:01Z",
            "2026-11-01 06:45Z",
            "2026-11-01T07:00Z",
        ),
        // Three hours before, the new offset's wall time (23:00) is not one that comes again.
        (
            "*/15 * * * *",
            ny,
            "2026-11-01 04:00:01Z",
            "2026-11-01 04:00Z",
            "2026-11-01T04:15Z",
        ),
        (
            "*/15 1 * * *",
            ny,
            "2026-11-01 05:45:01Z",
            "2026-11-01 05:45Z",
            "2026-11-01T06:00Z",
        ),
        (
            "0 * * * *",
            ny,
            "2026-11-01 05:00:01Z",
            "2026-11-01 05:00Z",
            "2026-11-01T06:00Z",
        ),
        (
            "*/15 * * * *",
            "Australia/Sydney",
            "2026-04-04 15:45:01Z",
            "2026-04-04 15:45Z",
            "2026-04-04T16:00Z",
        ),
        (
            "*/15 * * * *",
            "Australia/Lord_Howe",
            "2026-04-04 14:45:01Z",
            "2026-04-04 14:45Z",
            "2026-04-04T15:00Z",
        ),
        (
            "30 1 * * *",
            ny,
            "2026-11-01 05:30:01Z",
            "2026-11-01 05:30Z",
            "2026-11-02T06:30Z",
        ),
        (
            "30 1 * * *",
            ny,
            "2026-11-01 06:20Z",
            "2026-11-01 05:30Z",
            "2026-11-02T06:30Z",
        ),
        (
            "0 1 * * *",
            ny,
            "2026-11-01 05:00:01Z",
            "2026-11-01 05:00Z",
            "2026-11-02T06:00Z",
        ),
    ];
    for (cron, zone, now, tick, expected) in cases {
        let next = next_run_then(&gateway, cron, zone, now, tick).await;
        assert_eq!(next, expected, "{cron} in {zone} at {now}, tick {tick}");
    }
    gateway.stop().await;
}

/// Makes schedule `name` due and waits for a gateway's ticker to fire it (it moves on).
async fn tick_now(sql: &tokio_postgres::Client, name: &str) {
    sql.execute(
        "UPDATE ojs.cron SET next_run = now() - interval '1 s' WHERE name = $1",
        &[&name],
    )
    .await
    .unwrap();
    for _ in 0..400 {
        let row = sql
            .query_one(
                "SELECT next_run > now() AS moved FROM ojs.cron WHERE name = $1",
                &[&name],
            )
            .await
            .unwrap();
        if row.get::<_, bool>("moved") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("schedule {name} was not fired");
}

/// A template's `options.unique` holds at every tick: while the job of one tick waits, the next
/// tick's duplicate is refused (`cron.skipped`, reason `duplicate`) rather than queued beside it.
#[tokio::test]
async fn a_cron_templates_unique_option_holds_across_ticks() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    for (name, on_conflict) in [("uniq-reject", "reject"), ("uniq-ignore", "ignore")] {
        let queue = format!("q-{name}");
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": name, "cron": "0 0 1 1 *", "overlap_policy": "allow", "type": "c.task", "args": [],
                        "options": { "queue": queue, "unique": { "on_conflict": on_conflict } } }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        tick_now(&sql, name).await;
        tick_now(&sql, name).await;
        let (_, stats) = ojs.get(&format!("/ojs/v1/queues/{queue}/stats")).await;
        assert_eq!(
            stats["stats"]["available"], 1,
            "{on_conflict}: one job waits at a time: {stats}"
        );
        let (_, body) = ojs.get(&format!("/ojs/v1/cron/{name}")).await;
        assert_eq!(body["cron"]["run_count"], 1, "{body}");
    }
    let (_, body) = ojs.get("/ojs/v1/events?types=cron.skipped&limit=1000").await;
    let events = body["events"].as_array().unwrap();
    let skipped = events
        .iter()
        .find(|event| event["data"]["cron_name"] == "uniq-reject")
        .unwrap_or_else(|| panic!("a skipped tick: {events:?}"));
    assert_eq!(skipped["data"]["reason"], "duplicate", "{skipped}");
    assert!(skipped["data"]["existing_job_id"].is_string(), "{skipped}");
    gateway.stop().await;
}

/// A tick's enqueues take a bounded queue's lock and a unique key's, which a client's enqueue
/// takes in the other order (the key, then the queue): each due schedule fires in a transaction
/// of its own, so the tick never holds one schedule's lock while it waits for another's. Here a
/// client holds the key the second schedule needs while the tick waits for it, then asks for
/// the queue the first schedule enqueued into: it gets it (held across schedules, this was a
/// deadlock, and one side's enqueue was lost), and each schedule fires once.
#[tokio::test]
async fn a_cron_tick_takes_no_lock_across_schedules() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let sql = gateway.sql().await;
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/queues/q-bounded/config",
            Some(json!({ "backpressure": { "max_depth": 10 } })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for (name, options) in [
        ("bounded", json!({ "queue": "q-bounded" })),
        (
            "keyed",
            json!({ "queue": "q-keyed", "unique": { "on_conflict": "reject" } }),
        ),
    ] {
        let (status, body) = ojs
            .post(
                "/ojs/v1/cron",
                json!({ "name": name, "cron": "0 0 1 1 *", "overlap_policy": "allow", "type": "c.task", "args": [],
                        "options": options }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // One tick of the keyed schedule shows its job's unique key; its job goes again.
    tick_now(&sql, "keyed").await;
    let row = sql
        .query_one(
            "DELETE FROM ojs.jobs WHERE queue = 'q-keyed' RETURNING unique_key, tenant",
            &[],
        )
        .await
        .unwrap();
    let (key, tenant): (String, String) = (row.get("unique_key"), row.get("tenant"));
    sql.execute("UPDATE ojs.cron SET run_count = 0", &[]).await.unwrap();
    let mut client = gateway.sql().await;
    let holder = client.transaction().await.unwrap();
    holder
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(ojs.tenant_key($1, $2), 0))",
            &[&tenant, &key],
        )
        .await
        .unwrap();
    // The bounded schedule is due first, the keyed one after it.
    sql.execute(
        "UPDATE ojs.cron SET next_run = now() - CASE name WHEN 'bounded' THEN interval '2 s' ELSE interval '1 s' END",
        &[],
    )
    .await
    .unwrap();
    common::await_statement_wait(&sql, "%pg_advisory_xact_lock(hashtextextended(ojs.tenant_key%").await;
    holder
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('ojs.bounded_depth ' || ojs.tenant_key($1, 'q-bounded'), 0))",
            &[&tenant],
        )
        .await
        .expect("the bounded queue's lock, with no deadlock");
    holder.commit().await.unwrap();
    common::eventually(Duration::from_secs(10), "both schedules fired", || async {
        let fired: i64 = sql
            .query_one(
                "SELECT count(*) AS n FROM ojs.cron WHERE next_run > now() AND run_count = 1",
                &[],
            )
            .await
            .unwrap()
            .get("n");
        (fired == 2).then_some(())
    })
    .await;
    let jobs: i64 = sql
        .query_one(
            "SELECT count(*) AS n FROM ojs.jobs WHERE queue IN ('q-bounded', 'q-keyed')",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(jobs, 2, "one job of each schedule");
    gateway.stop().await;
}

/// Schedules belong to no tenant and enqueue as the default one: a template naming another
/// tenant in `meta.tenant_id` is refused rather than enqueued as the default tenant's.
#[tokio::test]
async fn a_cron_template_naming_a_tenant_is_refused() {
    let gateway = start().await;
    let ojs = Ojs::of(&gateway);
    let (status, body) = ojs
        .post(
            "/ojs/v1/cron",
            json!({ "name": "acme", "cron": "0 0 * * *",
                    "job_template": { "type": "c.task", "args": [], "meta": { "tenant_id": "acme" } } }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    gateway.stop().await;
}
