//! The web console against a real gateway and PostgreSQL: its security at the HTTP level
//! (headers, escaping, CSRF, session fixation, throttling, a read-only key), and a walk through
//! it in headless Chromium over WebDriver. Without chromium and chromedriver the browser test
//! says "browser tier not run" and passes, unless PGVS3_REQUIRE_BROWSER=1 (as CI sets).

mod support;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use serde_json::json;
use support::front::Fault;
use support::{ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Stack, Visitor, http, sign_in_answer, webdriver};

async fn put(stack: &Stack, bucket: &str, key: &str, body: impl AsRef<[u8]>) {
    stack
        .root
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.as_ref().to_vec()))
        .send()
        .await
        .unwrap_or_else(|err| panic!("put {key:?}: {err:?}"));
}

async fn body_of(stack: &Stack, bucket: &str, key: &str) -> String {
    let object = stack.root.get_object().bucket(bucket).key(key).send().await.unwrap();
    String::from_utf8(object.body.collect().await.unwrap().to_vec()).unwrap()
}

async fn bucket_exists(stack: &Stack, bucket: &str) -> bool {
    stack.root.head_bucket().bucket(bucket).send().await.is_ok()
}

#[tokio::test]
async fn every_answer_carries_a_strict_policy_and_cookies_stay_out_of_scripts() {
    let stack = Stack::start().await;
    let login = http(stack.console, "GET", "/login?next=https://evil.example/", &[], "").await;
    assert_eq!(login.status, 200);
    let csp = login.header("content-security-policy");
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "base-uri 'none'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(login.header("x-frame-options"), "DENY");
    assert_eq!(login.header("x-content-type-options"), "nosniff");
    assert_eq!(login.header("referrer-policy"), "same-origin");
    // No open redirect: a `next` is not followed anywhere.
    assert!(login.header("location").is_empty());
    // Script only as an external module of this origin.
    assert_eq!(login.body.matches("<script").count(), 1);
    assert!(
        login
            .body
            .contains("<script type=\"module\" src=\"/static/console.js\"></script>")
    );
    let cookie = login.set_cookie("pgvs3_login").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    let signed_in = sign_in_answer(stack.console, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, None).await;
    assert_eq!(signed_in.status, 303);
    assert_eq!(signed_in.header("location"), "/buckets");
    let session = signed_in.set_cookie("pgvs3_session").unwrap();
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Path=/"),
        "{session}"
    );
    // Plaintext listener: no Secure (the browser would drop the cookie); TLS adds it.
    assert!(!session.contains("Secure"), "{session}");
    // The secret is in no answer.
    assert!(!signed_in.body.contains(ROOT_SECRET_KEY));
    let script = http(stack.console, "GET", "/static/console.js", &[], "").await;
    assert_eq!(script.status, 200);
    assert!(script.header("content-type").starts_with("text/javascript"));
    assert!(script.header("content-security-policy").contains("default-src 'self'"));
}

#[tokio::test]
async fn hostile_names_render_as_text() {
    let stack = Stack::start().await;
    stack.root.create_bucket().bucket("hostile").send().await.unwrap();
    let long = "k".repeat(1024);
    let keys = [
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(1)>",
        "'onmouseover='alert(1)",
        "evil\u{202E}gpj.exe",
        "zero\u{200B}width",
        long.as_str(),
    ];
    for key in keys {
        put(&stack, "hostile", key, "x").await;
    }
    let visitor = stack.sign_in_root().await;
    let page = visitor.get("/objects?bucket=hostile").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(!page.body.contains("<img"), "{}", page.body);
    assert!(!page.body.contains("'onmouseover='"), "{}", page.body);
    // (its `/` makes it a folder, `<script>alert(1)<`, in a listing by `/`)
    assert!(page.body.contains("<a class=\"folder\" href=\"/objects?bucket=hostile&amp;prefix=%3Cscript%3Ealert%281%29%3C%2F\">&lt;script&gt;alert(1)&lt;/</a>"), "{}", page.body);
    assert!(page.body.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    // Direction overrides and zero-width characters are shown, not obeyed.
    assert!(page.body.contains("evil<span class=\"cp\">⟨U+202E⟩</span>gpj.exe"));
    assert!(page.body.contains("zero<span class=\"cp\">⟨U+200B⟩</span>width"));
    assert!(!page.body.contains('\u{202E}') && !page.body.contains('\u{200B}'));
    assert!(page.body.contains(&long));
    let object = visitor.get(&format!("/object?bucket=hostile&key={long}")).await;
    assert_eq!(object.status, 200);
    assert!(object.body.contains("<tr class=\"version latest\""), "{}", object.body);
    // A hostile bucket name in the address is text too (and the gateway's refusal is shown).
    let page = visitor.get("/objects?bucket=%3Cscript%3Ealert(1)%3C/script%3E").await;
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn changes_without_the_token_or_from_another_origin_are_refused() {
    let stack = Stack::start().await;
    let visitor = stack.sign_in_root().await;
    let origin = format!("http://{}", stack.console);
    let attempts = [
        (origin.as_str(), "bucket=csrf1".to_owned(), None),
        (origin.as_str(), "bucket=csrf1&_csrf=guessed".to_owned(), None),
        (
            "http://evil.example",
            format!("bucket=csrf1&_csrf={}", visitor.csrf),
            None,
        ),
        ("null", format!("bucket=csrf1&_csrf={}", visitor.csrf), None),
        (
            origin.as_str(),
            format!("bucket=csrf1&_csrf={}", visitor.csrf),
            Some("cross-site"),
        ),
    ];
    for (from, body, fetch_site) in attempts {
        let mut headers = vec![
            ("Cookie", visitor.cookie.as_str()),
            ("Origin", from),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ];
        if let Some(site) = fetch_site {
            headers.push(("Sec-Fetch-Site", site));
        }
        let answer = http(stack.console, "POST", "/buckets/create", &headers, &body).await;
        assert_eq!(answer.status, 403, "{from} {body}: {}", answer.body);
    }
    // No Origin at all.
    let answer = http(
        stack.console,
        "POST",
        "/buckets/create",
        &[
            ("Cookie", &visitor.cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("bucket=csrf1&_csrf={}", visitor.csrf),
    )
    .await;
    assert_eq!(answer.status, 403);
    // The upload API takes its token in a header, under the same rules.
    let answer = http(
        stack.console,
        "POST",
        "/api/upload/put",
        &[
            ("Cookie", &visitor.cookie),
            ("Origin", "http://evil.example"),
            ("X-CSRF-Token", &visitor.csrf),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        "bucket=csrf1&key=a",
    )
    .await;
    assert_eq!(answer.status, 403);
    assert!(
        !bucket_exists(&stack, "csrf1").await,
        "a refused change changed nothing"
    );

    let done = visitor.post("/buckets/create", &[("bucket", "csrf1")]).await;
    let page = visitor.follow(&done).await;
    assert!(page.body.contains("Bucket csrf1 created."), "{}", page.body);
    assert!(bucket_exists(&stack, "csrf1").await);

    // Login CSRF: a sign-in post without the form's own cookie is refused.
    let answer = http(
        stack.console,
        "POST",
        "/login",
        &[
            ("Origin", &origin),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("_login=x&access_key={ROOT_ACCESS_KEY}&secret_key={ROOT_SECRET_KEY}"),
    )
    .await;
    assert_eq!(answer.status, 403);
    assert!(answer.set_cookie("pgvs3_session").is_none());
}

#[tokio::test]
async fn sign_in_always_starts_a_new_session_and_sign_out_ends_it() {
    let stack = Stack::start().await;
    // Fixation: an id planted before sign-in is neither kept nor made valid.
    let planted = "pgvs3_session=planted-by-an-attacker";
    let answer = sign_in_answer(stack.console, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Some(planted)).await;
    assert_eq!(answer.status, 303);
    let issued = answer
        .set_cookie("pgvs3_session")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_ne!(issued, planted);
    let page = http(stack.console, "GET", "/buckets", &[("Cookie", planted)], "").await;
    assert_eq!((page.status, page.header("location")), (303, "/login"));
    let page = http(stack.console, "GET", "/buckets", &[("Cookie", &issued)], "").await;
    assert_eq!(page.status, 200);

    // Signing in again from the same browser ends the session it had.
    let again = sign_in_answer(stack.console, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Some(&issued)).await;
    let second = again
        .set_cookie("pgvs3_session")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_ne!(second, issued);
    let page = http(stack.console, "GET", "/buckets", &[("Cookie", &issued)], "").await;
    assert_eq!(page.status, 303, "the earlier session ended");

    let page = http(stack.console, "GET", "/buckets", &[("Cookie", &second)], "").await;
    let visitor = Visitor {
        console: stack.console,
        csrf: support::field(&page.body, "csrf-token"),
        cookie: second.clone(),
    };
    let out = visitor.post("/logout", &[]).await;
    assert_eq!((out.status, out.header("location")), (303, "/login"));
    assert!(out.set_cookie("pgvs3_session").unwrap().contains("Max-Age=0"));
    let page = visitor.get("/buckets").await;
    assert_eq!((page.status, page.header("location")), (303, "/login"));
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_per_key() {
    let stack = Stack::start().await;
    for _ in 0..5 {
        let answer = sign_in_answer(stack.console, ROOT_ACCESS_KEY, "wrong", None).await;
        assert_eq!(answer.status, 401);
        assert!(answer.body.contains("Unknown access key or wrong secret."));
    }
    // The right secret no longer helps for this key...
    let answer = sign_in_answer(stack.console, ROOT_ACCESS_KEY, ROOT_SECRET_KEY, None).await;
    assert_eq!(answer.status, 429);
    assert!(answer.set_cookie("pgvs3_session").is_none());
    // ...while another key from the same address still signs in.
    stack.add_key("OTHERKEY", false).await;
    let answer = sign_in_answer(stack.console, "OTHERKEY", "OTHERKEY-secret", None).await;
    assert_eq!(answer.status, 303);
}

#[tokio::test]
async fn a_read_only_key_can_change_nothing_through_the_console() {
    let stack = Stack::start().await;
    stack.root.create_bucket().bucket("owned").send().await.unwrap();
    put(&stack, "owned", "a.txt", "kept").await;
    let reader = stack.sign_in_new_key("READER", true).await;

    let page = reader
        .follow(&reader.post("/buckets/create", &[("bucket", "made-by-reader")]).await)
        .await;
    assert!(page.body.contains("AccessDenied"), "{}", page.body);
    let page = reader
        .follow(&reader.post("/buckets/delete", &[("bucket", "owned")]).await)
        .await;
    assert!(page.body.contains("flash error"), "{}", page.body);
    let page = reader
        .follow(
            &reader
                .post("/object/delete", &[("bucket", "owned"), ("key", "a.txt")])
                .await,
        )
        .await;
    assert!(page.body.contains("flash error"), "{}", page.body);
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::owned/*"}]}"#;
    let page = reader
        .post("/bucket/policy", &[("bucket", "owned"), ("policy", policy)])
        .await;
    assert_eq!(page.status, 400);
    assert!(page.body.contains("<li>AccessDenied"), "{}", page.body);
    let answer = reader
        .post("/api/upload/create", &[("bucket", "owned"), ("key", "b.txt")])
        .await;
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("AccessDenied"), "{}", answer.body);
    // A presigned URL is only a signature: the gateway still refuses the reader's upload.
    let answer = reader
        .post("/api/upload/put", &[("bucket", "owned"), ("key", "b.txt")])
        .await;
    let url: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    let url = url["url"].as_str().unwrap();
    let path = &url[url.find("/owned/").unwrap()..];
    let upload = http(stack.gateway.s3_addr, "PUT", path, &[], "sneaked in").await;
    assert_eq!(upload.status, 403, "{}", upload.body);

    assert!(!bucket_exists(&stack, "made-by-reader").await);
    assert!(bucket_exists(&stack, "owned").await);
    assert_eq!(body_of(&stack, "owned", "a.txt").await, "kept");
    assert!(stack.root.get_bucket_policy().bucket("owned").send().await.is_err());
    assert!(
        stack
            .root
            .head_object()
            .bucket("owned")
            .key("b.txt")
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn an_objects_retention_and_legal_hold_are_shown_and_changed_as_s3_allows() {
    let stack = Stack::start().await;
    stack
        .root
        .create_bucket()
        .bucket("vault")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    put(&stack, "vault", "deed.txt", "signed").await;
    stack.root.create_bucket().bucket("plain").send().await.unwrap();
    put(&stack, "plain", "note.txt", "unlocked").await;
    let version = stack
        .root
        .head_object()
        .bucket("vault")
        .key("deed.txt")
        .send()
        .await
        .unwrap()
        .version_id()
        .unwrap()
        .to_owned();
    let root = stack.sign_in_root().await;
    let object = "/object?bucket=vault&key=deed.txt";
    let page = root.get(object).await.body;
    assert!(page.contains("<strong id=\"retention\">none</strong>"), "{page}");
    assert!(page.contains("<strong id=\"legal-hold\">OFF</strong>"), "{page}");
    assert!(
        page.contains("<a class=\"lock\" href="),
        "each version links to its lock: {page}"
    );
    // A bucket without object lock has no such section (S3 answers InvalidRequest).
    let page = root.get("/object?bucket=plain&key=note.txt").await.body;
    assert!(
        !page.contains("id=\"lock\"") && !page.contains("class=\"lock\""),
        "{page}"
    );
    let retention = || async {
        stack
            .root
            .get_object_retention()
            .bucket("vault")
            .key("deed.txt")
            .send()
            .await
            .ok()
            .and_then(|answer| answer.retention)
            .and_then(|retention| {
                Some((
                    retention.mode()?.as_str().to_owned(),
                    retention.retain_until_date()?.secs(),
                ))
            })
    };
    let fields = |extra: &[(&'static str, &'static str)]| {
        let mut fields = vec![("bucket", "vault"), ("key", "deed.txt")];
        fields.extend_from_slice(extra);
        fields
    };

    // A date that is none is refused before S3 is asked.
    let page = root
        .change(
            "/object/retention",
            &fields(&[("mode", "GOVERNANCE"), ("until", "next tuesday")]),
        )
        .await;
    assert!(
        page.contains("flash error") && page.contains("Retain until: a date such as"),
        "{page}"
    );
    assert_eq!(retention().await, None);

    // GOVERNANCE for a year, and a legal hold: S3 has both, and the version is kept.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let until_secs = now - now % 86_400 + 366 * 86_400;
    let until = aws_sdk_s3::primitives::DateTime::from_secs(until_secs)
        .fmt(aws_sdk_s3::primitives::DateTimeFormat::DateTime)
        .unwrap();
    let day = until[..10].to_owned();
    let page = root
        .change(
            "/object/retention",
            &[
                ("bucket", "vault"),
                ("key", "deed.txt"),
                ("mode", "GOVERNANCE"),
                ("until", &day),
            ],
        )
        .await;
    assert!(page.contains("Retention set: GOVERNANCE."), "{page}");
    assert!(
        page.contains(&format!("<strong id=\"retention\">GOVERNANCE until {until}</strong>")),
        "{page}"
    );
    assert_eq!(retention().await, Some(("GOVERNANCE".to_owned(), until_secs)));
    let page = root.change("/object/legal-hold", &fields(&[("status", "ON")])).await;
    assert!(
        page.contains("Legal hold ON.") && page.contains("<strong id=\"legal-hold\">ON</strong>"),
        "{page}"
    );
    let hold = || async {
        stack
            .root
            .get_object_legal_hold()
            .bucket("vault")
            .key("deed.txt")
            .version_id(&version)
            .send()
            .await
            .ok()
            .and_then(|answer| Some(answer.legal_hold?.status?.as_str().to_owned()))
    };
    assert_eq!(hold().await.as_deref(), Some("ON"));
    let page = root
        .change(
            "/object/delete-version",
            &[("bucket", "vault"), ("key", "deed.txt"), ("version", &version)],
        )
        .await;
    assert!(
        page.contains("flash error")
            && page.contains("AccessDenied: Access Denied because object protected by object lock."),
        "the gateway's refusal, verbatim: {page}"
    );

    // Removing the GOVERNANCE retention needs the bypass: without it the gateway refuses.
    let page = root.change("/object/retention", &fields(&[("mode", "")])).await;
    assert!(page.contains("flash error") && page.contains("AccessDenied"), "{page}");
    assert_eq!(retention().await, Some(("GOVERNANCE".to_owned(), until_secs)));
    let page = root
        .change("/object/retention", &fields(&[("mode", ""), ("bypass", "on")]))
        .await;
    assert!(
        page.contains("Retention removed.") && page.contains("<strong id=\"retention\">none</strong>"),
        "{page}"
    );
    assert_eq!(retention().await, None);

    // Another key that may not write the bucket changes nothing.
    let reader = stack.sign_in_new_key("LOCKREADER", true).await;
    let page = reader.change("/object/legal-hold", &fields(&[("status", "OFF")])).await;
    assert!(page.contains("flash error") && page.contains("AccessDenied"), "{page}");
    assert_eq!(hold().await.as_deref(), Some("ON"));

    // The version's own page: its lock by version id, released there.
    let page = root
        .get(&format!("/object?bucket=vault&key=deed.txt&version={version}"))
        .await
        .body;
    assert!(page.contains(&format!("Of version <code>{version}</code>.")), "{page}");
    let answer = root
        .post(
            "/object/legal-hold",
            &[
                ("bucket", "vault"),
                ("key", "deed.txt"),
                ("version", &version),
                ("status", "OFF"),
            ],
        )
        .await;
    assert!(
        answer.header("location").contains("version="),
        "back to the version's page"
    );
    let page = root.follow(&answer).await.body;
    assert!(page.contains("Legal hold OFF."), "{page}");
    assert_eq!(hold().await.as_deref(), Some("OFF"));
    // Unlocked, the version can go.
    let page = root
        .change(
            "/object/delete-version",
            &[("bucket", "vault"), ("key", "deed.txt"), ("version", &version)],
        )
        .await;
    assert!(page.contains("Version deleted permanently."), "{page}");
}

#[tokio::test]
async fn bucket_settings_are_s3_configurations_edited_with_the_sessions_key() {
    let stack = Stack::start().await;
    let root = stack.sign_in_root().await;
    let done = root
        .post("/buckets/create", &[("bucket", "configured"), ("object_lock", "on")])
        .await;
    assert!(root.follow(&done).await.body.contains("Bucket configured created."));
    let bucket = [("bucket", "configured")];
    let change = async |path: &str, pairs: &[(&str, &str)]| {
        let mut all = bucket.to_vec();
        all.extend_from_slice(pairs);
        root.change(path, &all).await
    };

    // Object lock: on from creation; a default retention set and shown.
    let page = change("/bucket/object-lock", &[("mode", "GOVERNANCE"), ("days", "7")]).await;
    assert!(page.contains("New objects are now kept 7 days (GOVERNANCE)."), "{page}");
    assert!(
        page.contains("Default retention: <strong>GOVERNANCE for 7 days</strong>"),
        "{page}"
    );
    let lock = stack
        .root
        .get_object_lock_configuration()
        .bucket("configured")
        .send()
        .await
        .unwrap();
    let retention = lock
        .object_lock_configuration()
        .unwrap()
        .rule()
        .unwrap()
        .default_retention()
        .unwrap();
    assert_eq!(
        (retention.mode().unwrap().as_str(), retention.days()),
        ("GOVERNANCE", Some(7))
    );

    // Lifecycle: two rules, one replaced, one deleted; a bad number changes nothing.
    let page = change(
        "/bucket/lifecycle/add",
        &[
            ("rule_id", "logs"),
            ("prefix", "logs/"),
            ("expire_days", "30"),
            ("abort_days", "2"),
        ],
    )
    .await;
    assert!(page.contains("Lifecycle rule logs saved."), "{page}");
    let page = change(
        "/bucket/lifecycle/add",
        &[("rule_id", "<b>old</b>"), ("noncurrent_days", "9")],
    )
    .await;
    assert!(
        page.contains("<td>&lt;b&gt;old&lt;/b&gt;</td>"),
        "a rule id is text: {page}"
    );
    let page = change("/bucket/lifecycle/add", &[("rule_id", "logs"), ("expire_days", "many")]).await;
    assert!(
        page.contains("flash error") && page.contains("a whole number of days"),
        "{page}"
    );
    let page = change(
        "/bucket/lifecycle/add",
        &[("rule_id", "logs"), ("prefix", "logs/"), ("expire_days", "60")],
    )
    .await;
    assert!(page.contains("<td>60 days</td>"), "{page}");
    let rules = async || {
        let config = stack
            .root
            .get_bucket_lifecycle_configuration()
            .bucket("configured")
            .send()
            .await
            .unwrap();
        config
            .rules()
            .iter()
            .map(|rule| {
                (
                    rule.id().unwrap().to_owned(),
                    rule.expiration().and_then(|e| e.days()),
                    rule.noncurrent_version_expiration().and_then(|e| e.noncurrent_days()),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rules().await,
        vec![
            ("<b>old</b>".to_owned(), None, Some(9)),
            ("logs".to_owned(), Some(60), None)
        ]
    );
    let page = change("/bucket/lifecycle/delete", &[("rule_id", "<b>old</b>")]).await;
    assert!(
        page.contains(
            "Lifecycle rule <b>old</b> deleted."
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .as_str()
        ),
        "{page}"
    );
    assert_eq!(rules().await, vec![("logs".to_owned(), Some(60), None)]);

    // CORS: a rule added, shown, and deleted (the last one: no configuration left).
    let page = change(
        "/bucket/cors/add",
        &[
            ("rule_id", "app"),
            ("origins", "https://app.example, https://admin.example"),
            ("method_GET", "on"),
            ("method_PUT", "on"),
            ("expose", "ETag"),
            ("max_age", "600"),
        ],
    )
    .await;
    assert!(page.contains("CORS rule app saved."), "{page}");
    assert!(
        page.contains("<td>https://app.example, https://admin.example</td><td>GET, PUT</td>"),
        "{page}"
    );
    let cors = stack.root.get_bucket_cors().bucket("configured").send().await.unwrap();
    assert_eq!(
        cors.cors_rules()[0].allowed_origins(),
        ["https://app.example", "https://admin.example"]
    );
    assert_eq!(cors.cors_rules()[0].max_age_seconds(), Some(600));
    let page = change("/bucket/cors/delete", &[("rule_id", "app")]).await;
    assert!(
        page.contains("CORS rule app deleted.") && page.contains("No CORS rules"),
        "{page}"
    );
    assert!(stack.root.get_bucket_cors().bucket("configured").send().await.is_err());

    // Default encryption on, then off.
    let page = change("/bucket/encryption", &[("default", "AES256")]).await;
    assert!(
        page.contains("New objects are encrypted with AES256 by default."),
        "{page}"
    );
    let encryption = stack
        .root
        .get_bucket_encryption()
        .bucket("configured")
        .send()
        .await
        .unwrap();
    assert_eq!(
        encryption.server_side_encryption_configuration().unwrap().rules()[0]
            .apply_server_side_encryption_by_default()
            .unwrap()
            .sse_algorithm()
            .as_str(),
        "AES256"
    );

    // Notifications are shown as the gateway has them.
    let queue = aws_sdk_s3::types::QueueConfiguration::builder()
        .id("to-jobs")
        .queue_arn("arn:pgvs3:ojs:::uploads")
        .events(aws_sdk_s3::types::Event::from("s3:ObjectCreated:*"))
        .build()
        .unwrap();
    stack
        .root
        .put_bucket_notification_configuration()
        .bucket("configured")
        .notification_configuration(
            aws_sdk_s3::types::NotificationConfiguration::builder()
                .queue_configurations(queue)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let page = root.get("/bucket?bucket=configured").await.body;
    assert!(
        page.contains("<td>to-jobs</td><td><code>arn:pgvs3:ojs:::uploads</code></td><td>s3:ObjectCreated:*</td>"),
        "{page}"
    );
    // ... and edited: added, checked before S3 is asked, refused by the gateway in its own
    // words, replaced by id and deleted, the other rules kept as the gateway had them.
    let notifications = || async {
        let config = stack
            .root
            .get_bucket_notification_configuration()
            .bucket("configured")
            .send()
            .await
            .unwrap();
        config
            .queue_configurations()
            .iter()
            .map(|rule| {
                let filter = rule
                    .filter()
                    .and_then(|f| f.key())
                    .map(|key| {
                        key.filter_rules()
                            .iter()
                            .map(|r| r.value().unwrap_or("").to_owned())
                            .collect()
                    })
                    .unwrap_or_else(Vec::new);
                (
                    rule.id().unwrap_or("").to_owned(),
                    rule.queue_arn().to_owned(),
                    rule.events().len(),
                    filter,
                )
            })
            .collect::<Vec<_>>()
    };
    let add = |id: &'static str, target: &'static str, events: &'static str, prefix: &'static str| {
        vec![
            ("bucket", "configured"),
            ("rule_id", id),
            ("target", target),
            ("events", events),
            ("prefix", prefix),
            ("suffix", ""),
        ]
    };
    let page = root
        .change(
            "/bucket/notifications/add",
            &add(
                "csv",
                "arn:pgvs3:pubsub:::s3:csv",
                "s3:ObjectCreated:*, s3:ObjectRemoved:*",
                "",
            ),
        )
        .await;
    assert!(page.contains("Notification rule csv saved."), "{page}");
    let both = vec![
        ("to-jobs".to_owned(), "arn:pgvs3:ojs:::uploads".to_owned(), 1, vec![]),
        ("csv".to_owned(), "arn:pgvs3:pubsub:::s3:csv".to_owned(), 2, vec![]),
    ];
    assert_eq!(notifications().await, both);
    for (pairs, problem) in [
        (
            add("bad", "http://elsewhere.example/", "s3:ObjectCreated:*", ""),
            "Target: arn:pgvs3:ojs:::",
        ),
        (
            add("bad", "arn:pgvs3:ojs:::q", "ObjectCreated", ""),
            "Events: one or more S3 event names",
        ),
        (
            add("", "arn:pgvs3:ojs:::q", "s3:ObjectCreated:*", ""),
            "A rule needs an id",
        ),
        (
            add("hook", "arn:pgvs3:webhook:::nowhere", "s3:ObjectCreated:*", ""),
            "Unable to validate the following destination configurations: arn:pgvs3:webhook:::nowhere",
        ),
    ] {
        let page = root.change("/bucket/notifications/add", &pairs).await;
        assert!(
            page.contains("flash error") && page.contains(problem),
            "{problem}: {page}"
        );
        assert_eq!(notifications().await, both);
    }
    let page = root
        .change(
            "/bucket/notifications/add",
            &add("csv", "arn:pgvs3:ojs:::csv-jobs", "s3:ObjectCreated:Put", "in/"),
        )
        .await;
    assert!(page.contains("Notification rule csv saved."), "{page}");
    let page = root
        .change(
            "/bucket/notifications/delete",
            &[("bucket", "configured"), ("rule_id", "to-jobs")],
        )
        .await;
    assert!(page.contains("Notification rule to-jobs deleted."), "{page}");
    let kept = vec![(
        "csv".to_owned(),
        "arn:pgvs3:ojs:::csv-jobs".to_owned(),
        1,
        vec!["in/".to_owned()],
    )];
    assert_eq!(notifications().await, kept);

    // Quotas have no S3 API: the root key's session sees them (asked of the gateway in-process).
    stack
        .gateway
        .store
        .catalog()
        .set_bucket_quota("configured", Some(10 << 20), None)
        .await
        .unwrap();
    let page = root.get("/bucket?bucket=configured").await.body;
    assert!(
        page.contains("<p id=\"quota-status\">0 B of 10.0 MiB; 0 of unlimited objects.</p>"),
        "{page}"
    );

    // A read-only key sees the settings and gets the gateway's AccessDenied for each change.
    let reader = stack.sign_in_new_key("READER", true).await;
    for (path, pairs) in [
        (
            "/bucket/lifecycle/add",
            vec![("rule_id", "sneaky"), ("expire_days", "1")],
        ),
        ("/bucket/lifecycle/delete", vec![("rule_id", "logs")]),
        (
            "/bucket/cors/add",
            vec![("rule_id", "sneaky"), ("origins", "*"), ("method_GET", "on")],
        ),
        ("/bucket/encryption", vec![("default", "none")]),
        ("/bucket/object-lock", vec![("mode", "")]),
        (
            "/bucket/notifications/add",
            vec![
                ("rule_id", "sneaky"),
                ("target", "arn:pgvs3:ojs:::sneaky"),
                ("events", "s3:ObjectCreated:*"),
            ],
        ),
        ("/bucket/notifications/delete", vec![("rule_id", "csv")]),
    ] {
        let mut all = bucket.to_vec();
        all.extend(pairs);
        let page = reader.change(path, &all).await;
        assert!(
            page.contains("flash error") && page.contains("AccessDenied"),
            "{path}: {page}"
        );
    }
    let page = reader.get("/bucket?bucket=configured").await.body;
    assert!(!page.contains("quota-status"), "only root sessions see quotas: {page}");
    assert_eq!(rules().await, vec![("logs".to_owned(), Some(60), None)]);
    assert!(stack.root.get_bucket_cors().bucket("configured").send().await.is_err());
    assert!(
        stack
            .root
            .get_bucket_encryption()
            .bucket("configured")
            .send()
            .await
            .is_ok()
    );
    let lock = stack
        .root
        .get_object_lock_configuration()
        .bucket("configured")
        .send()
        .await
        .unwrap();
    assert!(lock.object_lock_configuration().unwrap().rule().is_some());
    assert_eq!(notifications().await, kept);
}

/// The `class="key"` links of a keys page, as the names they show.
fn listed_keys(page: &str) -> Vec<String> {
    page.split("<a class=\"key\" href=\"")
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find("\">").unwrap() + 2..];
            text[..text.find("</a>").unwrap()].to_owned()
        })
        .collect()
}

#[tokio::test]
async fn the_keyspace_is_scanned_shown_per_type_and_edited_with_the_sessions_rights() {
    let stack = Stack::start().await;
    let redis = async |args: &[&str]| stack.redis(args).await;
    redis(&["SET", "greeting", "hello\nworld"]).await;
    redis(&["EXPIRE", "greeting", "1000"]).await;
    redis(&["SET", "big", &"x".repeat(20_000)]).await;
    redis(&["HSET", "user:1", "name", "<script>alert(1)</script>", "age", "42"]).await;
    redis(&["SADD", "tags", "red", "blue"]).await;
    redis(&["ZADD", "board", "1", "alice", "2.5", "bob"]).await;
    redis(&["RPUSH", "queue", "one", "two"]).await;
    redis(&["XADD", "events", "1-1", "kind", "created"]).await;
    redis(&["XADD", "events", "2-1", "kind", "deleted"]).await;
    redis(&["XGROUP", "CREATE", "events", "workers", "0"]).await;
    redis(&[
        "XREADGROUP",
        "GROUP",
        "workers",
        "w1",
        "COUNT",
        "1",
        "STREAMS",
        "events",
        ">",
    ])
    .await;
    redis(&["SET", "evil\u{202E}gpj", "x"]).await;
    let mut mass = vec!["MSET".to_owned()];
    for n in 0..150 {
        mass.push(format!("page:{n}"));
        mass.push("v".to_owned());
    }
    redis(&mass.iter().map(String::as_str).collect::<Vec<_>>()).await;

    let root = stack.sign_in_root().await;
    // By pattern, with each key's type.
    let page = root.get("/keys?pattern=user:*").await.body;
    assert_eq!(listed_keys(&page), ["user:1"], "{page}");
    assert!(page.contains("<td class=\"type\">hash</td>"), "{page}");
    // Every key, SCAN step by step: each page bounded, all keys found once the cursor is 0.
    let mut found = std::collections::HashSet::new();
    let mut next = "/keys?db=0".to_owned();
    let mut pages = 0;
    loop {
        let page = root.get(&next).await.body;
        let keys = listed_keys(&page);
        assert!(keys.len() <= 200, "a bounded step: {}", keys.len());
        found.extend(keys);
        pages += 1;
        match page.split("<a id=\"next-keys\" href=\"").nth(1) {
            Some(rest) => next = rest[..rest.find('"').unwrap()].replace("&amp;", "&"),
            None => break,
        }
        assert!(pages < 50, "the scan ends");
    }
    assert!(pages > 1, "158 keys take more than one step");
    // A step's cursor is single-use (pgvs3's SCAN): reading it again says so.
    let again = root.get(&next).await.body;
    assert!(again.contains("This page of the scan was read already"), "{again}");
    assert_eq!(found.len(), 158, "{found:?}");
    assert!(
        found.contains("evil<span class=\"cp\">⟨U+202E⟩</span>gpj"),
        "shown, not obeyed: {found:?}"
    );

    // A view per type.
    let page = root.get("/key?key=greeting").await.body;
    assert!(page.contains("<dd id=\"key-type\">string</dd>"), "{page}");
    assert!(page.contains("<dd id=\"key-ttl\">16 min"), "{page}");
    assert!(page.contains(">hello\nworld</textarea>"), "{page}");
    let page = root.get("/key?key=big").await.body;
    assert!(page.contains("The first 16.0 KiB shown; not editable here."), "{page}");
    assert!(page.contains(&"x".repeat(16 * 1024)) && !page.contains(&"x".repeat(16 * 1024 + 1)));
    let page = root.get("/key?key=user:1").await.body;
    assert!(
        page.contains("<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
    let page = root.get("/key?key=board").await.body;
    assert!(
        page.contains("<td>alice</td><td>1</td>") && page.contains("<td>bob</td><td>2.5</td>"),
        "{page}"
    );
    let page = root.get("/key?key=queue").await.body;
    assert!(
        page.contains("<td>0</td><td>one</td>") && page.contains("<td>1</td><td>two</td>"),
        "{page}"
    );
    let page = root.get("/key?key=tags").await.body;
    assert!(
        page.contains("<td>red</td>") && page.contains("<td>blue</td>"),
        "{page}"
    );
    let page = root.get("/key?key=events").await.body;
    assert!(page.contains("<code>1-1</code></td><td>kind = created</td>"), "{page}");
    assert!(
        page.contains(
            "<tr class=\"group\" data-group=\"workers\"><td>workers</td><td>1</td><td>1</td><td><code>1-1</code></td>"
        ),
        "{page}"
    );
    assert!(page.contains("w1: 1"), "{page}");

    // A hash of 60 fields, 50 a page by HSCAN cursor. One value is longer than
    // hash-max-listpack-value, so the hash is a hashtable: HSCAN of a listpack answers every
    // field at once, as Redis's does.
    let mut fields = vec!["HSET".to_owned(), "wide".to_owned()];
    for n in 0..60 {
        fields.push(format!("f{n:02}"));
        fields.push(match n {
            0 => "0".repeat(100),
            n => n.to_string(),
        });
    }
    redis(&fields.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let page = root.get("/key?key=wide").await.body;
    assert_eq!(page.matches("<tr class=\"element\">").count(), 50, "{page}");
    let rest = page
        .split("<a id=\"next-elements\" href=\"")
        .nth(1)
        .expect("a next page");
    let next = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
    let page = root.get(&next).await.body;
    assert_eq!(page.matches("<tr class=\"element\">").count(), 10, "{page}");
    assert!(
        page.contains("<td>f59</td>") && !page.contains("next-elements"),
        "{page}"
    );

    // Edits, each one RESP command.
    let edit = async |pairs: &[(&str, &str)]| root.change("/key/command", pairs).await;
    let page = edit(&[("key", "user:1"), ("op", "hset"), ("field", "city"), ("value", "Oslo")]).await;
    assert!(page.contains("Field saved."), "{page}");
    assert_eq!(redis(&["HGET", "user:1", "city"]).await, "Oslo");
    let page = edit(&[("key", "greeting"), ("op", "set"), ("value", "bye")]).await;
    assert!(page.contains("Value saved."), "{page}");
    assert_eq!(redis(&["GET", "greeting"]).await, "bye");
    assert_ne!(redis(&["TTL", "greeting"]).await, "-1", "KEEPTTL");
    edit(&[("key", "greeting"), ("op", "expire"), ("ttl", "")]).await;
    assert_eq!(redis(&["TTL", "greeting"]).await, "-1");
    let page = edit(&[("key", "board"), ("op", "zadd"), ("score", "lots"), ("member", "carol")]).await;
    assert!(
        page.contains("flash error") && page.contains("ERR value is not a valid float"),
        "{page}"
    );
    let page = edit(&[("key", "tags"), ("op", "del")]).await;
    assert!(
        page.contains("Key deleted.") && page.contains("<h1>Keys</h1>"),
        "{page}"
    );
    assert_eq!(redis(&["EXISTS", "tags"]).await, "0");

    let page = edit(&[("db", "x"), ("key", "queue"), ("op", "del")]).await;
    assert!(page.contains("The database is a number"), "never database 0: {page}");
    assert_eq!(redis(&["EXISTS", "queue"]).await, "1");

    // A key that does not own the database's bucket gets RESP's NOPERM, and changes nothing.
    let other = stack.sign_in_new_key("OTHERKEY", false).await;
    let page = other.get("/keys").await.body;
    assert!(page.contains("NOPERM"), "{page}");
    assert!(listed_keys(&page).is_empty());
    let page = other.change("/key/command", &[("key", "queue"), ("op", "del")]).await;
    assert!(page.contains("flash error") && page.contains("NOPERM"), "{page}");
    assert_eq!(redis(&["EXISTS", "queue"]).await, "1");
    // A wrong secret never reaches RESP: sign-in is S3's check first.
    assert_eq!(
        sign_in_answer(stack.console, "OTHERKEY", "wrong", None).await.status,
        401
    );
}

#[tokio::test]
async fn a_streams_groups_consumers_and_pending_entries_are_shown_and_edited_with_the_sessions_rights() {
    let stack = Stack::start().await;
    let redis = async |args: &[&str]| stack.redis(args).await;
    redis(&["XADD", "orders", "1-1", "item", "<img src=x onerror=alert(1)>"]).await;
    redis(&["XADD", "orders", "2-1", "item", "book"]).await;
    redis(&["XADD", "orders", "3-1", "item", "pen"]).await;
    redis(&["XGROUP", "CREATE", "orders", "billing\u{202E}", "0"]).await;
    redis(&[
        "XREADGROUP",
        "GROUP",
        "billing\u{202E}",
        "alice",
        "COUNT",
        "2",
        "STREAMS",
        "orders",
        ">",
    ])
    .await;
    let root = stack.sign_in_root().await;
    let page = root.get("/key?key=orders").await.body;
    assert!(
        page.contains("item = &lt;img src=x onerror=alert(1)&gt;") && !page.contains("<img src=x"),
        "{page}"
    );
    // The group (a bidi override in its name shown as a code point), its consumer and its two
    // pending entries, each with Acknowledge and Claim.
    assert!(
        page.contains("<td>billing<span class=\"cp\">⟨U+202E⟩</span></td><td>1</td><td>2</td>"),
        "{page}"
    );
    assert!(
        page.contains("<tr class=\"consumer\"><td>alice</td><td>2</td>"),
        "{page}"
    );
    assert_eq!(page.matches("<tr class=\"pending-entry\"").count(), 2, "{page}");
    assert!(
        page.contains("<tr class=\"pending-entry\" data-id=\"1-1\"><td><code>1-1</code></td><td>alice</td>"),
        "{page}"
    );

    let edit = async |pairs: &[(&str, &str)]| root.change("/key/command", pairs).await;
    let group = "billing\u{202E}";
    let page = edit(&[("key", "orders"), ("op", "xack"), ("group", group), ("id", "1-1")]).await;
    assert!(page.contains("Entry acknowledged."), "{page}");
    let page = edit(&[
        ("key", "orders"),
        ("op", "xclaim"),
        ("group", group),
        ("id", "2-1"),
        ("consumer", "bob"),
    ])
    .await;
    assert!(page.contains("Entry claimed."), "{page}");
    let pending = redis(&["XPENDING", "orders", group, "-", "+", "10"]).await;
    assert!(pending.starts_with("2-1\nbob\n"), "{pending}");
    let page = edit(&[("key", "orders"), ("op", "xadd"), ("fields", "item=ink\r\nqty=2")]).await;
    assert!(page.contains("Entry added."), "{page}");
    assert_eq!(redis(&["XLEN", "orders"]).await, "4");
    let page = edit(&[("key", "orders"), ("op", "xadd"), ("fields", "no pair here")]).await;
    assert!(page.contains("is not field=value"), "{page}");
    assert_eq!(redis(&["XLEN", "orders"]).await, "4");
    let page = edit(&[("key", "orders"), ("op", "xdel"), ("id", "3-1")]).await;
    assert!(page.contains("Entry deleted."), "{page}");
    assert_eq!(redis(&["XRANGE", "orders", "3-1", "3-1"]).await, "");
    let page = edit(&[
        ("key", "orders"),
        ("op", "xgroup-create"),
        ("group", "audit"),
        ("id", "0"),
    ])
    .await;
    assert!(page.contains("Group created."), "{page}");
    let page = edit(&[("key", "orders"), ("op", "xgroup-create"), ("group", "audit")]).await;
    assert!(page.contains("BUSYGROUP"), "Redis's own error: {page}");
    let page = edit(&[
        ("key", "orders"),
        ("op", "xgroup-setid"),
        ("group", "audit"),
        ("id", "2-1"),
    ])
    .await;
    assert!(page.contains("The group&#39;s last delivered ID is set."), "{page}");
    assert!(
        page.contains(
            "<tr class=\"group\" data-group=\"audit\"><td>audit</td><td>0</td><td>0</td><td><code>2-1</code></td>"
        ),
        "{page}"
    );
    let page = edit(&[("key", "orders"), ("op", "xgroup-destroy"), ("group", "audit")]).await;
    assert!(
        page.contains("Group destroyed.") && !page.contains("data-group=\"audit\""),
        "{page}"
    );

    // A key that does not own the database's bucket: RESP's NOPERM for each, nothing changed.
    let other = stack.sign_in_new_key("OTHERKEY", false).await;
    assert!(other.get("/key?key=orders").await.body.contains("NOPERM"));
    for pairs in [
        &[("key", "orders"), ("op", "xadd"), ("fields", "item=x")][..],
        &[("key", "orders"), ("op", "xack"), ("group", group), ("id", "2-1")][..],
        &[("key", "orders"), ("op", "xgroup-destroy"), ("group", group)][..],
    ] {
        let page = other.change("/key/command", pairs).await;
        assert!(page.contains("flash error") && page.contains("NOPERM"), "{page}");
    }
    assert_eq!(redis(&["XLEN", "orders"]).await, "3");
    assert!(redis(&["XINFO", "GROUPS", "orders"]).await.contains("billing"));
}

/// A job in `queue` that fails once and is dead-lettered with `code: message`; its id.
async fn dead_job(stack: &Stack, queue: &str, code: &str, message: &str) -> String {
    let (status, job) = stack
        .ojs(
            "POST",
            "/ojs/v1/jobs",
            json!({ "type": "mail.send", "args": ["<script>alert(1)</script>"], "options": { "queue": queue,
                    "retry": { "max_attempts": 1, "on_exhaustion": "dead_letter" } } }),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let (status, fetched) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/fetch",
            json!({ "queues": [queue], "worker_id": "w1" }),
        )
        .await;
    assert_eq!(status, 200, "{fetched}");
    let claimed = &fetched["jobs"][0];
    let (status, nacked) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/nack",
            json!({ "job_id": claimed["id"], "attempt": claimed["attempt"], "error": { "code": code, "message": message } }),
        )
        .await;
    assert_eq!(status, 200, "{nacked}");
    job["job"]["id"].as_str().unwrap().to_owned()
}

/// The `<g class="node` elements of a page's workflow graph.
fn graph_nodes(page: &str) -> Vec<String> {
    page.split("<g class=\"node ")
        .skip(1)
        .map(|node| node[..node.find("</g>").unwrap()].to_owned())
        .collect()
}

#[tokio::test]
async fn a_workflow_is_drawn_as_a_graph_of_its_jobs_and_their_states() {
    let stack = Stack::start().await;
    let job = |kind: &str| json!({ "type": kind, "args": [], "options": { "queue": "flow" } });
    let (status, created) = stack
        .ojs(
            "POST",
            "/ojs/v1/workflows",
            json!({ "type": "chain", "name": "etl", "steps": [
                job("etl.extract"),
                { "type": "group", "name": "<img onerror=a>\u{202e}", "jobs": [job("etl.t0"), job("etl.t1")] },
                job("etl.load") ] }),
        )
        .await;
    assert!(status == 200 || status == 201, "{created}");
    let created = if created["workflow"].is_object() {
        created["workflow"].clone()
    } else {
        created
    };
    let id = created["id"].as_str().unwrap().to_owned();
    let group = created["steps"][1]["workflow_id"].as_str().unwrap().to_owned();
    let root = stack.sign_in_root().await;
    let jobs = root.get("/jobs").await.body;
    assert!(jobs.contains("action=\"/jobs/workflow\""), "{jobs}");

    // The chain: three nodes left to right, two arrows; the nested group links to its graph.
    let page = root.get(&format!("/jobs/workflow?id={id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<dd id=\"workflow-type\">chain</dd>"),
        "{}",
        page.body
    );
    let svg = &page.body[page.body.find("<svg id=\"workflow-graph\"").unwrap()..];
    assert!(!svg[..svg.find("</svg>").unwrap()].contains("style="), "{svg}");
    let nodes = graph_nodes(&page.body);
    assert_eq!(nodes.len(), 3, "{}", page.body);
    assert!(
        nodes[0].contains(">etl.extract</text>") && nodes[0].starts_with("state-pending\""),
        "{}",
        nodes[0]
    );
    // The nested group is drawn with its name, a hostile one as text.
    assert!(
        nodes[1].contains(">group &lt;img onerror=a&gt;<tspan class=\"cp\">⟨U+202E⟩</tspan></text>")
            && nodes[1].contains("data-state=\"waiting\""),
        "{}",
        nodes[1]
    );
    assert!(!page.body.contains("<img onerror"), "{}", page.body);
    assert_eq!(page.body.matches("<line class=\"edge\"").count(), 2, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("<a href=\"/jobs/workflow?id={group}&amp;tenant=default\">")),
        "{}",
        page.body
    );

    // The group: its two jobs in one column, no arrows, its hostile name as text.
    let page = root.get(&format!("/jobs/workflow?id={group}")).await.body;
    assert_eq!(graph_nodes(&page).len(), 2, "{page}");
    assert_eq!(page.matches("<line class=\"edge\"").count(), 0, "{page}");
    assert!(
        page.contains("&lt;img onerror=a&gt;<span class=\"cp\">⟨U+202E⟩</span>"),
        "{page}"
    );
    assert!(!page.contains("<img onerror"), "{page}");
    assert!(page.contains("<dt>Part of</dt>"), "{page}");

    // The first step done: its node says so, and the group is released.
    let (_, fetched) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["flow"], "worker_id": "w1" }),
        )
        .await;
    let claimed = &fetched["jobs"][0];
    assert_eq!(claimed["type"], "etl.extract", "{fetched}");
    let (status, acked) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/ack",
            json!({ "job_id": claimed["id"], "attempt": claimed["attempt"], "result": { "rows": 3 } }),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    let page = root.get(&format!("/jobs/workflow?id={id}")).await.body;
    let nodes = graph_nodes(&page);
    assert!(nodes[0].starts_with("state-completed\""), "{}", nodes[0]);
    assert!(!nodes[1].contains("data-state=\"waiting\""), "{}", nodes[1]);

    // An id that would leave the route is refused before OJS is asked; another key sees nothing.
    let page = root.get("/jobs/workflow?id=..%2Fqueues").await.body;
    assert!(page.contains("That is not a job id."), "{page}");
    let other = stack.sign_in_new_key("FLOWLESS", false).await;
    let page = other.get(&format!("/jobs/workflow?id={id}")).await;
    assert_eq!(page.status, 403);
    assert!(graph_nodes(&page.body).is_empty(), "{}", page.body);
}

/// The Queues section pages through `GET /queues` (100 a page) instead of asking for every
/// queue at once, which past the console's answer cap broke the section (30,000 queues made
/// 21.8 MB).
#[tokio::test]
async fn the_queues_section_pages_through_the_queues() {
    let stack = Stack::start().await;
    let jobs: Vec<_> = (0..101)
        .map(|n| json!({ "type": "t", "args": [], "options": { "queue": format!("p{n:03}") } }))
        .collect();
    let (status, body) = stack.ojs("POST", "/ojs/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert!(status == 200 || status == 201, "{body}");
    let root = stack.sign_in_root().await;
    let first = root.get("/jobs").await.body;
    assert_eq!(first.matches("<tr class=\"queue\">").count(), 100, "{first}");
    assert!(first.contains(">p099</a>") && !first.contains(">p100</a>"), "{first}");
    assert!(
        first.contains("Page 1 of 2 <a href=\"/jobs?tenant=default&amp;queues_page=2\" id=\"queues-next\">Next</a>"),
        "{first}"
    );
    let second = root.get("/jobs?queues_page=2").await.body;
    assert_eq!(second.matches("<tr class=\"queue\">").count(), 1, "{second}");
    assert!(
        second.contains(">p100</a>") && second.contains("id=\"queues-previous\""),
        "{second}"
    );
}

#[tokio::test]
async fn the_jobs_pages_are_the_root_keys_and_retry_and_delete_dead_jobs() {
    let stack = Stack::start().await;
    let first = dead_job(&stack, "mail", "SMTP", "mailbox <b>full</b>").await;
    let second = dead_job(&stack, "mail", "SMTP", "gone").await;
    let (status, _) = stack
        .ojs(
            "POST",
            "/ojs/v1/jobs",
            json!({ "type": "report.build", "args": [], "options": { "queue": "reports" } }),
        )
        .await;
    assert_eq!(status, 201);
    let (status, cron) = stack
        .ojs(
            "POST",
            "/ojs/v1/cron",
            json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "type": "report.build", "args": [] }),
        )
        .await;
    assert!(status == 200 || status == 201, "{cron}");

    let root = stack.sign_in_root().await;
    let page = root.get("/jobs").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    assert!(
        body.contains("<a href=\"/jobs\">Jobs</a>"),
        "the root key's menu has Jobs"
    );
    assert!(
        body.contains("<tr class=\"queue\"><td><a href=\"/jobs/queue?name=reports&amp;tenant=default\">reports</a></td><td>active</td><td>1</td>"),
        "{body}"
    );
    assert!(
        body.contains(&format!("<tr class=\"dead\" data-job=\"{first}\">")),
        "{body}"
    );
    assert!(
        body.contains("SMTP: mailbox &lt;b&gt;full&lt;/b&gt;"),
        "an error is text: {body}"
    );
    assert!(
        body.contains(
            "<tr class=\"cron\"><td>nightly</td><td><code>0 3 * * *</code></td><td>UTC</td><td>report.build</td>"
        ),
        "{body}"
    );
    let page = root.get("/jobs/queue?name=reports").await.body;
    assert!(
        page.contains("<dd id=\"depth\">1</dd>")
            && page.contains(
                "<tr><td><a href=\"/jobs/queue?name=reports&amp;tenant=default&amp;state=available\">available</a></td><td>1</td></tr>"
            ),
        "{page}"
    );
    // Rates, from the event log: the mail queue's two jobs were enqueued and failed this minute.
    let mail_row = body
        .split("<tr class=\"queue\">")
        .find(|row| row.contains(">mail</a>"))
        .unwrap_or_default();
    assert!(
        mail_row.contains("<td class=\"rate\">2</td><td class=\"rate\">0</td><td class=\"rate\">2</td></tr>"),
        "{body}"
    );
    // A queue's jobs by state, newest first, 50 a page by keyset: 55 enqueued, one completed.
    let bulk: Vec<_> = (0..55)
        .map(|n| json!({ "type": "bulk.item", "args": [n], "options": { "queue": "bulk" } }))
        .collect();
    let (status, batch) = stack.ojs("POST", "/ojs/v1/jobs/batch", json!({ "jobs": bulk })).await;
    assert_eq!(status, 201, "{batch}");
    let (status, fetched) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/fetch",
            json!({ "queues": ["bulk"], "worker_id": "w1" }),
        )
        .await;
    assert_eq!(status, 200, "{fetched}");
    let done = fetched["jobs"][0]["id"].as_str().unwrap().to_owned();
    let (status, acked) = stack
        .ojs(
            "POST",
            "/ojs/v1/workers/ack",
            json!({ "job_id": done, "attempt": fetched["jobs"][0]["attempt"], "result": { "ok": true } }),
        )
        .await;
    assert_eq!(status, 200, "{acked}");
    let body = root.get("/jobs").await.body;
    let bulk_row = body
        .split("<tr class=\"queue\">")
        .find(|row| row.contains(">bulk</a>"))
        .unwrap_or_default();
    assert!(
        bulk_row.contains("<td class=\"rate\">55</td><td class=\"rate\">1</td><td class=\"rate\">0</td></tr>"),
        "{body}"
    );
    let page = root.get("/jobs/queue?name=bulk").await.body;
    assert!(
        page.contains("<a href=\"/jobs/queue?name=bulk&amp;tenant=default&amp;state=available\">available</a>"),
        "each state links to its jobs: {page}"
    );
    let first_page = root.get("/jobs/queue?name=bulk&state=available").await.body;
    let rows = |page: &str| page.matches("<tr class=\"job\"").count();
    assert_eq!(rows(&first_page), 50, "{first_page}");
    assert!(first_page.contains("<td>bulk.item</td><td>0 of "), "{first_page}");
    assert!(!first_page.contains(&format!("data-job=\"{done}\"")), "{first_page}");
    let older = first_page
        .split("<a id=\"older\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .replace("&amp;", "&");
    assert!(older.contains("before="), "{older}");
    let second_page = root.get(&older).await.body;
    assert_eq!(rows(&second_page), 4, "{second_page}");
    assert!(!second_page.contains("id=\"older\""), "{second_page}");
    let completed = root.get("/jobs/queue?name=bulk&state=completed").await.body;
    assert!(
        completed.contains(&format!("data-job=\"{done}\"")) && rows(&completed) == 1,
        "{completed}"
    );
    let discarded = root.get("/jobs/queue?name=mail&state=discarded").await.body;
    assert!(
        rows(&discarded) == 2 && discarded.contains("SMTP: mailbox &lt;b&gt;full&lt;/b&gt;"),
        "the dead letter's jobs are discarded, their last error as text: {discarded}"
    );
    for bad in [
        "/jobs/queue?name=bulk&state=%3Cscript%3E",
        "/jobs/queue?name=bulk&state=available&before=x",
    ] {
        let page = root.get(bad).await.body;
        assert!(
            page.contains("flash error") && !page.contains("<tr class=\"job\""),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
    }
    // A job's history: enqueued, its attempt failed, discarded — in time order.
    let page = root.get(&format!("/job?id={first}")).await.body;
    assert!(
        page.contains("<td>1</td><td>SMTP</td><td>mailbox &lt;b&gt;full&lt;/b&gt;</td>"),
        "{page}"
    );
    let history = page.split("<ol id=\"history\">").nth(1).unwrap_or_default();
    let enqueued = history.find("</time> enqueued</li>");
    let failed = history.find("</time> attempt 1 failed: SMTP</li>");
    let discarded = history.find("</time> discarded</li>");
    assert!(enqueued.is_some() && enqueued < failed && failed <= discarded, "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !page.contains("<script>alert"),
        "{page}"
    );
    let page = root.get("/job?id=../../admin/reset").await.body;
    assert!(page.contains("That is not a job id."), "{page}");

    // Retry one from the dead letter, delete the other.
    let page = root.change("/jobs/retry", &[("id", &first)]).await;
    assert!(page.contains(&format!("Job {first} is queued again.")), "{page}");
    let (_, job) = stack.ojs("GET", &format!("/ojs/v1/jobs/{first}"), json!(null)).await;
    assert_eq!(
        job["job"]["state"].as_str().or(job["state"].as_str()),
        Some("available"),
        "{job}"
    );
    let page = root.change("/jobs/delete", &[("id", &second)]).await;
    assert!(page.contains(&format!("Job {second} deleted.")), "{page}");
    assert!(page.contains("No dead-lettered jobs."), "{page}");
    let (status, _) = stack.ojs("GET", &format!("/ojs/v1/jobs/{second}"), json!(null)).await;
    assert_eq!(status, 404);

    // Any other key, however privileged over S3, gets no OJS through the console.
    let other = stack.sign_in_new_key("OTHERKEY", false).await;
    let page = other.get("/jobs").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("for the root key&#39;s sessions") && !page.body.contains("<a href=\"/jobs\">Jobs</a>"));
    assert!(!page.body.contains("reports"));
    let third = dead_job(&stack, "mail", "SMTP", "again").await;
    let page = other.change("/jobs/delete", &[("id", &third)]).await;
    assert!(page.contains("flash error"), "{page}");
    let (status, _) = stack.ojs("GET", &format!("/ojs/v1/jobs/{third}"), json!(null)).await;
    assert_eq!(status, 200, "still there");
    let page = other.get("/jobs/queue?name=bulk&state=available").await.body;
    assert!(
        page.contains("flash error") && !page.contains("<tr class=\"job\""),
        "{page}"
    );
    assert_eq!(other.get(&format!("/job?id={third}")).await.status, 200);
    assert!(!other.get(&format!("/job?id={third}")).await.body.contains("SMTP"));
}

#[tokio::test]
async fn the_health_page_shows_this_gateway_to_the_root_key_only() {
    let stack = Stack::start().await;
    let root = stack.sign_in_root().await;
    let page = root.get("/health").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    assert!(
        body.contains("<dd id=\"ready\">yes</dd><dt>Role</dt><dd id=\"role\">primary</dd>"),
        "{body}"
    );
    assert!(body.contains("<dd id=\"lag\">0.0 s</dd>"), "{body}");
    assert!(
        body.contains("<dd id=\"database-size\">") && body.contains(" MiB</dd>"),
        "{body}"
    );
    assert!(
        body.contains("<tr class=\"protocol\"><td>s3</td>"),
        "the sign-in's ListBuckets counted: {body}"
    );
    for _ in 0..20 {
        stack.root.list_buckets().send().await.unwrap();
    }
    // The next look, at least half a second on, is a sample of its own: rates, and a point in
    // each chart.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let page = root.get("/health").await.body;
    assert!(page.contains("Rates over the last interval"), "{page}");
    assert!(page.contains("/s</td></tr>"), "{page}");
    let points = |page: &str, chart: &str| -> usize {
        let svg = &page[page
            .find(&format!("<svg id=\"{chart}\""))
            .unwrap_or_else(|| panic!("{chart}: {page}"))..];
        let svg = &svg[..svg.find("</svg>").unwrap()];
        assert!(!svg.contains("<script") && !svg.contains("style="), "{svg}");
        let series = &svg[svg
            .find("data-protocol=\"s3\"")
            .unwrap_or_else(|| panic!("s3 in {svg}"))..];
        series[..series.find("</g>").unwrap()].matches("<circle").count()
    };
    let (rates, latency) = (points(&page, "chart-rates"), points(&page, "chart-latency"));
    assert!(rates >= 1 && latency >= 1, "{page}");
    // The console samples on its own too: after more than its 5 s, the next look has at least
    // two more points (the sampler's and its own).
    tokio::time::sleep(Duration::from_millis(5600)).await;
    let page = root.get("/health").await.body;
    assert!(points(&page, "chart-rates") >= rates + 2, "{page}");

    // The test cluster has no standby.
    assert!(
        page.contains("<p id=\"standbys-status\">No standby streams from this server"),
        "{page}"
    );
    // Cache buckets: none read yet; then one in front of this gateway's own bucket, read twice
    // (a miss, then a hit), and one whose origin is down.
    assert!(
        page.contains("No reads of cache buckets since this gateway started."),
        "{page}"
    );
    stack.root.create_bucket().bucket("source").send().await.unwrap();
    put(&stack, "source", "cached.txt", "from the origin").await;
    for (bucket, endpoint) in [
        ("mirror", format!("http://{}", stack.gateway.s3_addr)),
        ("broken", "http://127.0.0.1:9".to_owned()),
    ] {
        let origin = pgvs3_gateway::store::Origin {
            endpoint,
            region: "us-east-1".into(),
            origin_bucket: "source".into(),
            access_key: ROOT_ACCESS_KEY.into(),
            secret_key: ROOT_SECRET_KEY.into(),
            path_style: true,
            mode: pgvs3_gateway::store::CacheMode::ReadThrough,
            ttl: Duration::from_secs(600),
            negative_ttl: Duration::from_secs(60),
            fill_concurrency: pgvs3_gateway::store::Origin::DEFAULT_FILL_CONCURRENCY,
            size_limit: None,
            write_back_threshold: 8 << 20,
            range_chunk: 1 << 20,
        };
        stack.gateway.store.catalog().put_origin(bucket, &origin).await.unwrap();
    }
    for _ in 0..2 {
        assert_eq!(body_of(&stack, "mirror", "cached.txt").await, "from the origin");
    }
    assert!(
        stack
            .root
            .get_object()
            .bucket("broken")
            .key("cached.txt")
            .send()
            .await
            .is_err()
    );
    let page = root.get("/health").await.body;
    // The SDK retries the broken bucket's read, so the counts are "at least".
    let field = |id: &str| {
        let start = page
            .find(&format!("<dd id=\"{id}\">"))
            .unwrap_or_else(|| panic!("{id}: {page}"));
        let value = &page[start + id.len() + 10..];
        value[..value.find("</dd>").unwrap()].to_owned()
    };
    let reads: u32 = field("cache-reads").parse().unwrap();
    assert!(reads >= 3, "{page}");
    let ratio: f64 = field("cache-hit-ratio").trim_end_matches(" %").parse().unwrap();
    assert!(ratio > 0.0 && ratio < 50.0, "one hit in {reads} reads: {page}");
    assert!(field("origin-errors").starts_with("unreachable: "), "{page}");

    let other = stack.sign_in_new_key("OTHERKEY", false).await;
    let page = other.get("/health").await;
    assert_eq!(page.status, 403);
    assert!(
        !page.body.contains("database-size") && !page.body.contains("/health\">Health"),
        "{}",
        page.body
    );
}

/// The rows of the fleet table, each from `<tr class="gateway` to its `</tr>`.
fn gateway_rows(page: &str) -> Vec<String> {
    page.split("<tr class=\"gateway")
        .skip(1)
        .map(|row| row[..row.find("</tr>").unwrap()].to_owned())
        .collect()
}

#[tokio::test]
async fn the_fleet_lists_every_gateway_of_the_database_by_its_heartbeat() {
    let stack = Stack::start().await;
    let second = stack.second_gateway().await;
    let root = stack.sign_in_root().await;
    // Both gateways beat at once when they start, then every 5 s.
    eventually("both gateways listed", || async {
        gateway_rows(&root.get("/health").await.body).len() == 2
    })
    .await;
    let page = root.get("/health").await.body;
    let rows = gateway_rows(&page);
    for (row, gateway) in rows.iter().zip([&stack.gateway, &second]) {
        let s3 = format!("s3 {}", gateway.s3_addr);
        let admin = format!("admin {}", gateway.admin_addr);
        assert!(
            rows.iter().any(|row| row.contains(&s3) && row.contains(&admin)),
            "{s3}: {page}"
        );
        assert!(
            row.contains(&format!("<td>primary</td><td>{}</td>", env!("CARGO_PKG_VERSION"))),
            "{row}"
        );
        assert!(!row.contains("silent"), "{row}");
    }
    // The database: its WAL position, and after writes and a look at least half a second on,
    // the rate it was written at and a point in the WAL chart.
    assert!(
        page.contains("<dd id=\"wal-lsn\">") && !page.contains("<dd id=\"wal-lsn\"></dd>"),
        "{page}"
    );
    stack.root.create_bucket().bucket("walled").send().await.unwrap();
    put(&stack, "walled", "a", vec![7u8; 64 << 10]).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let page = root.get("/health").await.body;
    assert!(page.contains("<dd id=\"wal-rate\">"), "{page}");
    let chart = &page[page.find("<svg id=\"chart-wal\"").unwrap_or_else(|| panic!("{page}"))..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    assert!(
        chart.contains("data-protocol=\"WAL\"") && chart.contains("<circle"),
        "{chart}"
    );

    // A gateway that stopped beating 20 s ago is shown silent, its hostile host name as text;
    // one silent for two minutes is forgotten by the next beat.
    stack
        .sql(
            "INSERT INTO pgvs3.gateways (id, host, version, started, listeners, stats, history, beat) VALUES
               ('quiet', '<img src=x onerror=alert(1)>\u{202e}', '0.0.1', now() - interval '1 hour',
                '{\"s3\": \"10.0.0.9:9000\"}', '{\"requests\": 5}',
                jsonb_build_array(
                  jsonb_build_object('at', extract(epoch FROM now()) - 30, 'requests', 5, 'latency_seconds', 1,
                                     'latency_count', 5, 'cache_reads', 0, 'cache_hits', 0),
                  jsonb_build_object('at', extract(epoch FROM now()) - 25, 'requests', 15, 'latency_seconds', 1.2,
                                     'latency_count', 15, 'cache_reads', 4, 'cache_hits', 1)),
                now() - interval '20 seconds'),
               ('gone', 'gone-host', '0.0.1', now() - interval '1 hour', '{}', '{}', '[]', now() - interval '2 minutes')",
        )
        .await;
    let page = root.get("/health").await.body;
    let quiet = gateway_rows(&page)
        .into_iter()
        .find(|row| row.contains("data-id=\"quiet\""))
        .unwrap_or_else(|| panic!("{page}"));
    assert!(quiet.starts_with(" silent\""), "{quiet}");
    assert!(
        quiet.contains("&lt;img src=x onerror=alert(1)&gt;<span class=\"cp\">⟨U+202E⟩</span>")
            && !page.contains("<img src=x"),
        "{quiet}"
    );
    // Every gateway charted from its heartbeat ring: the silent one's single interval
    // (10 requests in 5 s, 20 ms each, 1 of 4 cache reads from the cache), a series of its
    // own under its host name as text.
    let svg = |page: &str, id: &str| {
        let start = page
            .find(&format!("<svg id=\"{id}\""))
            .unwrap_or_else(|| panic!("{page}"));
        let chart = &page[start..];
        chart[..chart.find("</svg>").unwrap()].to_owned()
    };
    let quiet_series = |chart: &str| {
        chart
            .split("<g class=")
            .find(|series| series.contains("data-protocol=\"&lt;img src=x onerror=alert(1)&gt;\u{202e} quiet\""))
            .map(|series| series.matches("<circle").count())
    };
    for chart in ["chart-gateway-rates", "chart-gateway-latency", "chart-gateway-cache"] {
        assert_eq!(quiet_series(&svg(&page, chart)), Some(1), "{chart}: {page}");
    }
    let running: Vec<String> = gateway_rows(&page)
        .into_iter()
        .filter(|row| !row.contains("quiet") && !row.contains("gone"))
        .filter_map(|row| {
            row.split("data-id=\"")
                .nth(1)
                .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        })
        .collect();
    assert!(running.len() >= 2, "{page}");
    eventually("both running gateways charted", || async {
        let chart = svg(&root.get("/health").await.body, "chart-gateway-rates");
        running.iter().all(|id| chart.contains(&format!(" {id}\"")))
    })
    .await;
    // The ring keeps the last 61 beats: one past that loses its oldest at the next beat.
    let first = &running[0];
    stack
        .sql(&format!(
            "UPDATE pgvs3.gateways SET history = (SELECT jsonb_agg(jsonb_build_object('at', n)) FROM generate_series(1, 70) n)
              WHERE id = '{first}'"
        ))
        .await;
    eventually("the ring trimmed at the next beat", || async {
        stack
            .sql_value(&format!(
                "SELECT jsonb_array_length(history)::text || ' ' || (history -> 0 ->> 'at') AS value
                   FROM pgvs3.gateways WHERE id = '{first}'"
            ))
            .await
            == "61 11"
    })
    .await;

    eventually("the long-silent row forgotten", || async {
        stack
            .sql_value("SELECT count(*)::text AS value FROM pgvs3.gateways WHERE id = 'gone'")
            .await
            == "0"
    })
    .await;
    assert_eq!(
        stack
            .sql_value("SELECT count(*)::text AS value FROM pgvs3.gateways WHERE id = 'quiet'")
            .await,
        "1"
    );

    // Another key sees no fleet.
    let other = stack.sign_in_new_key("FLEETLESS", false).await;
    let page = other.get("/health").await;
    assert_eq!(page.status, 403);
    assert!(gateway_rows(&page.body).is_empty(), "{}", page.body);
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_root_key_sets_and_removes_a_bucket_quota_and_other_keys_cannot() {
    use aws_sdk_s3::error::ProvideErrorMetadata;
    let stack = Stack::start().await;
    stack.root.create_bucket().bucket("limited").send().await.unwrap();
    let root = stack.sign_in_root().await;
    let quota = || async { stack.gateway.store.catalog().bucket_quota("limited").await.unwrap() };
    let set = |pairs: Vec<(&'static str, &'static str)>| {
        let root = &root;
        async move {
            let mut all = vec![("bucket", "limited")];
            all.extend(pairs);
            root.change("/bucket/quota", &all).await
        }
    };
    let page = root.get("/bucket?bucket=limited").await.body;
    assert!(
        page.contains("<p id=\"quota-status\">No quota.</p>") && page.contains("id=\"set-quota\""),
        "{page}"
    );

    let page = set(vec![("max_size", "1 KiB"), ("max_objects", "2")]).await;
    assert!(page.contains("Quota set."), "{page}");
    assert!(
        page.contains("<p id=\"quota-status\">0 B of 1.0 KiB; 0 of 2 objects.</p>"),
        "{page}"
    );
    let limits = quota().await.unwrap();
    assert_eq!((limits.max_bytes, limits.max_objects), (Some(1024), Some(2)));
    // The gateway enforces it.
    let refused = stack
        .root
        .put_object()
        .bucket("limited")
        .key("big")
        .body(ByteStream::from(vec![7; 2048]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("XMinioAdminBucketQuotaExceeded"));

    // Bad input changes nothing, and says why.
    for (field, value, reason) in [
        ("max_size", "12 parsecs", "the unit is B, KiB, MiB, GiB or TiB"),
        ("max_size", "99999999999 TiB", "is not a size"),
        ("max_objects", "-3", "is not a number of objects"),
    ] {
        let page = set(vec![(field, value)]).await;
        assert!(page.contains("flash error") && page.contains(reason), "{value}: {page}");
    }
    let limits = quota().await.unwrap();
    assert_eq!((limits.max_bytes, limits.max_objects), (Some(1024), Some(2)));

    // Another key (which may write the bucket's objects under a policy or not) cannot touch it.
    let tenant = stack.sign_in_new_key("TENANT", false).await;
    let page = tenant.get("/bucket?bucket=limited").await.body;
    assert!(!page.contains("id=\"set-quota\""), "{page}");
    for pairs in [
        vec![("bucket", "limited"), ("remove", "on")],
        vec![("bucket", "limited"), ("max_size", "1 TiB")],
    ] {
        let page = tenant.change("/bucket/quota", &pairs).await;
        assert!(page.contains("flash error"), "{page}");
    }
    let limits = quota().await.unwrap();
    assert_eq!((limits.max_bytes, limits.max_objects), (Some(1024), Some(2)));

    // Removed: writes go through again.
    let page = set(vec![("remove", "on"), ("max_size", "5 MiB")]).await;
    assert!(
        page.contains("Quota removed.") && page.contains("<p id=\"quota-status\">No quota.</p>"),
        "{page}"
    );
    assert!(quota().await.is_none());
    put(&stack, "limited", "big", vec![7; 2048]).await;
}

/// The text of `<code id="{id}">…</code>` in a page.
fn code(page: &str, id: &str) -> String {
    let marker = format!("<code id=\"{id}\">");
    let rest = &page[page.find(&marker).unwrap_or_else(|| panic!("no {id} in {page}")) + marker.len()..];
    rest[..rest.find("</code>").unwrap()].to_owned()
}

#[tokio::test]
async fn the_root_key_creates_lists_and_deletes_access_keys_and_a_secret_shows_once() {
    let stack = Stack::start().await;
    stack.add_key("OWNER", false).await;
    support::s3_client(stack.gateway.s3_addr, "OWNER", "OWNER-secret")
        .create_bucket()
        .bucket("owned-by-owner")
        .send()
        .await
        .unwrap();
    let root = stack.sign_in_root().await;
    let page = root.get("/access-keys").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains(&format!("<tr class=\"access-key active\" data-key=\"{ROOT_ACCESS_KEY}\"><td><code>{ROOT_ACCESS_KEY}</code></td><td>root</td>")),
        "{}",
        page.body
    );
    assert!(page.body.contains("<td>owned-by-owner</td>"), "{}", page.body);
    assert!(!page.body.contains(ROOT_SECRET_KEY) && !page.body.contains("OWNER-secret"));

    // Created read-only, its secret shown in the answer itself and nowhere after.
    let answer = root
        .post(
            "/access-keys/create",
            &[
                ("access_key", "CIREADER01"),
                ("description", "<b>ci</b>"),
                ("read_only", "on"),
            ],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(code(&answer.body, "new-access-key"), "CIREADER01");
    let secret = code(&answer.body, "new-secret");
    assert_eq!(secret.len(), 43);
    assert!(
        answer
            .body
            .contains("<td>read-only</td><td class=\"state\">active</td><td>&lt;b&gt;ci&lt;/b&gt;</td>"),
        "{}",
        answer.body
    );
    assert!(!root.get("/access-keys").await.body.contains(&secret), "shown once");
    let reader = support::s3_client(stack.gateway.s3_addr, "CIREADER01", &secret);
    reader.list_buckets().send().await.unwrap();
    assert!(
        reader.create_bucket().bucket("by-reader").send().await.is_err(),
        "read-only"
    );
    // An existing key — the root key included — is never overwritten.
    for taken in ["CIREADER01", ROOT_ACCESS_KEY] {
        let page = root.change("/access-keys/create", &[("access_key", taken)]).await;
        assert!(page.contains("exists already"), "{page}");
    }
    reader.list_buckets().send().await.unwrap();
    stack.root.list_buckets().send().await.unwrap();
    // An empty id is generated; a bad one is refused.
    let answer = root.post("/access-keys/create", &[("access_key", "")]).await;
    let generated = code(&answer.body, "new-access-key");
    assert!(generated.len() == 20 && generated.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
    let page = root.change("/access-keys/create", &[("access_key", "<bad id>")]).await;
    assert!(page.contains("flash error") && page.contains("is not valid"), "{page}");

    // Deleting a key ends its console sessions; the root key cannot be deleted.
    let owner = Visitor::sign_in(stack.console, "OWNER", "OWNER-secret").await;
    let page = root.change("/access-keys/delete", &[("access_key", "OWNER")]).await;
    assert!(page.contains("Key OWNER deleted"), "{page}");
    assert!(!page.contains("data-key=\"OWNER\""), "{page}");
    assert_eq!(owner.get("/buckets").await.status, 303, "its session ended");
    assert!(
        support::s3_client(stack.gateway.s3_addr, "OWNER", "OWNER-secret")
            .list_buckets()
            .send()
            .await
            .is_err()
    );
    let page = root
        .change("/access-keys/delete", &[("access_key", ROOT_ACCESS_KEY)])
        .await;
    assert!(page.contains("flash error"), "{page}");
    stack.root.list_buckets().send().await.unwrap();

    // Other keys: no page, no menu, no change.
    let other = Visitor::sign_in(stack.console, "CIREADER01", &secret).await;
    let page = other.get("/access-keys").await;
    assert_eq!(page.status, 403);
    assert!(!page.body.contains("CIREADER01</code></td>") && !page.body.contains("href=\"/access-keys\""));
    let page = other.change("/access-keys/create", &[("access_key", "SNEAKY01")]).await;
    assert!(page.contains("flash error"), "{page}");
    assert!(!root.get("/access-keys").await.body.contains("SNEAKY01"));
}

/// The first line of the RESP listener's answer to `AUTH key secret`.
#[tokio::test]
async fn the_root_key_edits_a_keys_own_policy_and_the_gateway_enforces_it() {
    let stack = Stack::start().await;
    stack.add_key("POLICIED", false).await;
    let key = support::s3_client(stack.gateway.s3_addr, "POLICIED", "POLICIED-secret");
    key.create_bucket().bucket("mine").send().await.unwrap();
    key.put_object()
        .bucket("mine")
        .key("a.txt")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"readable"))
        .send()
        .await
        .unwrap();
    let reads = || async { key.get_object().bucket("mine").key("a.txt").send().await.is_ok() };
    assert!(reads().await);
    let root = stack.sign_in_root().await;
    let page = root.get("/access-keys").await.body;
    assert!(
        page.contains("<a class=\"key-policy\" href=\"/access-key?access_key=POLICIED\">Attach</a>"),
        "{page}"
    );
    let page = root.get("/access-key?access_key=POLICIED").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<textarea name=\"policy\" id=\"policy\""),
        "{}",
        page.body
    );
    let save = async |policy: &str| {
        root.post("/access-keys/policy", &[("access_key", "POLICIED"), ("policy", policy)])
            .await
    };

    // Checked before the gateway is asked: not JSON, a Principal; nothing attached.
    for (policy, problem) in [
        ("{", "<li>not JSON"),
        (
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"*"}]}"#,
            "<li>Statement 1: a key&#39;s own policy names no Principal (the key is the principal)</li>",
        ),
    ] {
        let page = save(policy).await;
        assert_eq!(page.status, 400, "{}", page.body);
        assert!(page.body.contains(problem), "{problem}: {}", page.body);
        assert!(reads().await);
    }
    // A policy denying its reads: saved, and the gateway enforces it at once.
    let deny = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"s3:GetObject","Resource":"arn:aws:s3:::mine/*"}]}"#;
    let page = root.follow(&save(deny).await).await.body;
    assert!(page.contains("Policy of key POLICIED saved."), "{page}");
    assert!(page.contains("yes · <a class=\"key-policy\""), "{page}");
    assert!(!reads().await, "the key's own policy denies the read");
    let page = root.get("/access-key?access_key=POLICIED").await.body;
    assert!(page.contains("s3:GetObject"), "the saved document is shown: {page}");

    // The root key has no policy of its own to edit; another key may not edit any.
    let page = root
        .change(
            "/access-keys/policy",
            &[("access_key", ROOT_ACCESS_KEY), ("policy", deny)],
        )
        .await;
    assert!(
        page.contains("flash error") && page.contains("the root key may do everything"),
        "{page}"
    );
    assert!(stack.root.get_object().bucket("mine").key("a.txt").send().await.is_ok());
    let other = Visitor::sign_in(stack.console, "POLICIED", "POLICIED-secret").await;
    assert_eq!(other.get("/access-key?access_key=POLICIED").await.status, 403);
    let page = other
        .change("/access-keys/policy", &[("access_key", "POLICIED"), ("policy", "")])
        .await;
    assert!(page.contains("flash error"), "{page}");
    assert!(!reads().await, "still denied");

    // Detached (an empty document): the key reads again.
    let page = root.follow(&save("").await).await.body;
    assert!(page.contains("Key POLICIED has no policy of its own now."), "{page}");
    assert!(reads().await);
}

async fn resp_auth(addr: std::net::SocketAddr, key: &str, secret: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::io::BufReader::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    let command = format!(
        "*3\r\n$4\r\nAUTH\r\n${}\r\n{key}\r\n${}\r\n{secret}\r\n",
        key.len(),
        secret.len()
    );
    stream.get_mut().write_all(command.as_bytes()).await.unwrap();
    let mut line = String::new();
    stream.read_line(&mut line).await.unwrap();
    line.trim_end().to_owned()
}

/// The S3 error code of a ListBuckets with `key`, or "" when it succeeds.
async fn list_buckets_error(addr: std::net::SocketAddr, key: &str, secret: &str) -> String {
    use aws_sdk_s3::error::ProvideErrorMetadata;
    match support::s3_client(addr, key, secret).list_buckets().send().await {
        Ok(_) => String::new(),
        Err(err) => err.code().unwrap_or("no code").to_owned(),
    }
}

#[tokio::test]
async fn the_root_key_disables_a_key_on_every_gateway_at_once_and_enables_it_again() {
    let stack = Stack::start().await;
    let second = stack.second_gateway().await;
    let (first_s3, second_s3) = (stack.gateway.s3_addr, second.s3_addr);
    let (first_resp, second_resp) = (stack.gateway.resp_addr.unwrap(), second.resp_addr.unwrap());
    stack.add_key("PAUSED01", false).await;
    support::s3_client(first_s3, "PAUSED01", "PAUSED01-secret")
        .create_bucket()
        .bucket("paused-bucket")
        .send()
        .await
        .unwrap();
    for addr in [first_s3, second_s3] {
        assert_eq!(list_buckets_error(addr, "PAUSED01", "PAUSED01-secret").await, "");
    }
    assert_eq!(resp_auth(second_resp, "PAUSED01", "PAUSED01-secret").await, "+OK");
    let its_session = Visitor::sign_in(stack.console, "PAUSED01", "PAUSED01-secret").await;
    let root = stack.sign_in_root().await;

    let page = root.change("/access-keys/disable", &[("access_key", "PAUSED01")]).await;
    assert!(page.contains("Key PAUSED01 disabled."), "{page}");
    assert!(
        page.contains("<tr class=\"access-key disabled\" data-key=\"PAUSED01\">"),
        "{page}"
    );
    assert!(page.contains("<td>paused-bucket</td>"), "it keeps its bucket: {page}");
    assert!(page.contains("action=\"/access-keys/enable\""), "{page}");
    // This gateway refuses it at once, as S3 refuses an unknown key; the other one as soon as
    // the catalog's notification reaches it.
    assert_eq!(
        list_buckets_error(first_s3, "PAUSED01", "PAUSED01-secret").await,
        "InvalidAccessKeyId"
    );
    assert!(
        resp_auth(first_resp, "PAUSED01", "PAUSED01-secret")
            .await
            .starts_with("-WRONGPASS")
    );
    eventually("the other gateway refuses it", || async {
        list_buckets_error(second_s3, "PAUSED01", "PAUSED01-secret").await == "InvalidAccessKeyId"
    })
    .await;
    assert!(
        resp_auth(second_resp, "PAUSED01", "PAUSED01-secret")
            .await
            .starts_with("-WRONGPASS")
    );
    // Its console session ended and it cannot sign in again.
    assert_eq!(its_session.get("/buckets").await.status, 303, "its session ended");
    let answer = sign_in_answer(stack.console, "PAUSED01", "PAUSED01-secret", None).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    // Creating a key of its id does not replace it (its secret stays).
    let page = root.change("/access-keys/create", &[("access_key", "PAUSED01")]).await;
    assert!(page.contains("exists already"), "{page}");

    // The root key cannot be disabled, nor a key that does not exist; a hostile id is text.
    for key in [ROOT_ACCESS_KEY, "NOSUCHKEY", "<i>x</i>"] {
        let page = root.change("/access-keys/disable", &[("access_key", key)]).await;
        assert!(
            page.contains("flash error") && page.contains("the root key may not"),
            "{page}"
        );
        assert!(!page.contains("<i>x</i>"), "{page}");
    }
    assert_eq!(list_buckets_error(first_s3, ROOT_ACCESS_KEY, ROOT_SECRET_KEY).await, "");

    // Another key may neither disable nor enable.
    let plain = stack.sign_in_new_key("PLAINKEY", false).await;
    for (path, key) in [
        ("/access-keys/enable", "PAUSED01"),
        ("/access-keys/disable", "PLAINKEY"),
    ] {
        let page = plain.change(path, &[("access_key", key)]).await;
        assert!(page.contains("flash error"), "{page}");
    }
    assert_eq!(
        list_buckets_error(first_s3, "PAUSED01", "PAUSED01-secret").await,
        "InvalidAccessKeyId"
    );

    // Enabled again: its old secret works on both gateways, and in the console.
    let page = root.change("/access-keys/enable", &[("access_key", "PAUSED01")]).await;
    assert!(page.contains("Key PAUSED01 enabled."), "{page}");
    assert!(
        page.contains("<tr class=\"access-key active\" data-key=\"PAUSED01\">"),
        "{page}"
    );
    assert_eq!(list_buckets_error(first_s3, "PAUSED01", "PAUSED01-secret").await, "");
    eventually("the other gateway takes it again", || async {
        list_buckets_error(second_s3, "PAUSED01", "PAUSED01-secret")
            .await
            .is_empty()
    })
    .await;
    assert_eq!(resp_auth(second_resp, "PAUSED01", "PAUSED01-secret").await, "+OK");
    let answer = sign_in_answer(stack.console, "PAUSED01", "PAUSED01-secret", None).await;
    assert_eq!(answer.status, 303);
}

/// A Parquet file as pyarrow 26 writes it (columns: plain, string, a `<script>` name, a struct,
/// a list, a timestamp, a decimal), and a 2×1 PNG.
const PARQUET: &[u8] = include_bytes!("fixtures/columns.parquet");
const PNG: &[u8] = include_bytes!("fixtures/dot.png");

/// A file ending in `footer`, its length and `magic`, as Parquet files end.
fn parquet_tail(footer: &[u8], length: u32, magic: &[u8; 4]) -> Vec<u8> {
    let mut file = b"PAR1".to_vec();
    file.extend_from_slice(footer);
    file.extend_from_slice(&length.to_le_bytes());
    file.extend_from_slice(magic);
    file
}

#[tokio::test]
async fn objects_are_previewed_as_text_images_and_parquet_schemas_each_bounded() {
    let stack = Stack::start().await;
    stack.root.create_bucket().bucket("files").send().await.unwrap();
    let long = format!("{}TAIL-MARKER", "a line of text\n".repeat(70_000 / 15));
    let nested = vec![0x1c_u8; 100];
    // Field 1, a list of 2^32 - 1 structs.
    let long_list = [0x19_u8, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
    let objects: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "notes/hostile.txt",
            "<script>alert(1)</script>\r\nsecond line evil\u{202E}gpj.exe\n".into(),
            "text/plain",
        ),
        ("notes/long.log", long.into_bytes(), ""),
        ("pic.png", PNG.to_vec(), "image/png"),
        ("drawing.svg", b"<svg onload=alert(1)></svg>".to_vec(), "image/svg+xml"),
        ("data/columns.parquet", PARQUET.to_vec(), "application/octet-stream"),
        ("bad/huge.parquet", parquet_tail(b"x", 0x7fff_ffff, b"PAR1"), ""),
        ("bad/nested.parquet", parquet_tail(&nested, 100, b"PAR1"), ""),
        ("bad/list.parquet", parquet_tail(&long_list, 8, b"PAR1"), ""),
        ("bad/truncated.parquet", parquet_tail(&[0x15], 1, b"PAR1"), ""),
        ("bad/not.parquet", b"hello, not parquet at all".to_vec(), ""),
        ("bad/encrypted.parquet", parquet_tail(b"xxxx", 4, b"PARE"), ""),
        ("archive.bin", vec![0, 1, 2], "application/octet-stream"),
    ];
    for (key, body, content_type) in objects {
        let mut put = stack
            .root
            .put_object()
            .bucket("files")
            .key(key)
            .body(ByteStream::from(body));
        if !content_type.is_empty() {
            put = put.content_type(content_type);
        }
        put.send().await.unwrap();
    }
    let root = stack.sign_in_root().await;
    let preview = |key: &'static str| {
        let root = &root;
        async move {
            let page = root.get(&format!("/object?bucket=files&key={key}")).await;
            assert_eq!(page.status, 200, "{key}: {}", page.body);
            let start = page
                .body
                .find("<section id=\"preview\">")
                .unwrap_or_else(|| panic!("{key}: {}", page.body));
            let section = &page.body[start..];
            (section[..section.find("</section>").unwrap()].to_owned(), page)
        }
    };

    // Text, as text: markup escaped, a bidi override shown as its code point; 64 KiB of it.
    let (text, _) = preview("notes/hostile.txt").await;
    assert!(
        text.contains("<pre id=\"preview-text\">&lt;script&gt;alert(1)&lt;/script&gt;\nsecond line evil<span class=\"cp\">⟨U+202E⟩</span>gpj.exe\n</pre>"),
        "{text}"
    );
    let (text, _) = preview("notes/long.log").await;
    assert!(text.contains("The first 64.0 KiB of "), "{text}");
    assert!(text.contains("a line of text") && !text.contains("TAIL-MARKER"));
    // An SVG is text, never an image.
    let (text, _) = preview("drawing.svg").await;
    assert!(
        text.contains("&lt;svg onload=alert(1)&gt;") && !text.contains("<img"),
        "{text}"
    );

    // An image: a presigned URL of the S3 origin, which the CSP names for images and nothing else.
    let (image, page) = preview("pic.png").await;
    let s3 = format!("http://{}", stack.gateway.s3_addr);
    let prefix = format!("<img id=\"preview-image\" src=\"{s3}/files/pic.png?");
    assert!(image.contains(&prefix), "{image}");
    let csp = page.header("content-security-policy");
    assert!(csp.contains(&format!("img-src 'self' data: {s3};")), "{csp}");
    assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe"), "{csp}");
    let src = image
        .split("src=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let url = src.strip_prefix(&s3).unwrap();
    let fetched = http(stack.gateway.s3_addr, "GET", url, &[], "").await;
    assert_eq!(fetched.status, 200, "{url}");
    assert_eq!(fetched.header("content-type"), "image/png");

    // A Parquet schema from the footer, names as text, nesting shown.
    let (schema, _) = preview("data/columns.parquet").await;
    for row in [
        "<p id=\"preview-rows\">3 rows, written by parquet-cpp-arrow version 26.0.1</p>",
        "<tr class=\"column depth-0\"><td>id</td><td>INT64</td><td>optional</td><td></td></tr>",
        "<tr class=\"column depth-0\"><td>name</td><td>BYTE_ARRAY</td><td>optional</td><td>STRING</td></tr>",
        "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td><td>DOUBLE</td>",
        "<tr class=\"column depth-0\"><td>point</td><td>group</td><td>optional</td><td></td></tr>",
        "<tr class=\"column depth-1\"><td>· x</td><td>INT32</td><td>optional</td><td></td></tr>",
        "<tr class=\"column depth-0\"><td>tags</td><td>group</td><td>optional</td><td>LIST</td></tr>",
        "<tr class=\"column depth-2\"><td>· · element</td><td>BYTE_ARRAY</td><td>optional</td><td>STRING</td></tr>",
        "<td>when</td><td>INT64</td><td>optional</td><td>TIMESTAMP</td>",
        "<td>price</td><td>FIXED_LEN_BYTE_ARRAY</td><td>optional</td><td>DECIMAL(10, 2)</td>",
    ] {
        assert!(schema.contains(row), "{row} in {schema}");
    }
    assert!(!schema.contains("<script>"));
    // Hostile footers: each refused with its reason, the page served.
    for (key, reason) in [
        (
            "bad/huge.parquet",
            "its footer is 2147483647 bytes, more than the 4194304 this preview reads",
        ),
        ("bad/nested.parquet", "its footer nests deeper than a schema needs"),
        ("bad/list.parquet", "its footer has a list longer than the footer"),
        ("bad/truncated.parquet", "its footer ends in the middle of a value"),
        (
            "bad/not.parquet",
            "it does not end in PAR1, so it is not a Parquet file",
        ),
        ("bad/encrypted.parquet", "its footer is encrypted"),
    ] {
        let (error, _) = preview(key).await;
        assert!(error.contains(&format!("Not previewed: {reason}.")), "{key}: {error}");
    }
    let (none, _) = preview("archive.bin").await;
    assert!(none.contains("No preview for this type"), "{none}");

    // A key that may not read the bucket previews nothing of it.
    let other = stack.sign_in_new_key("NOREADER", false).await;
    let page = other.get("/object?bucket=files&key=notes/hostile.txt").await;
    assert!(
        !page.body.contains("preview-text") && !page.body.contains("alert(1)"),
        "{}",
        page.body
    );
    assert!(page.body.contains("AccessDenied"), "{}", page.body);
}

/// Drops a file on the upload zone, as a drag from the desktop does: `file` is a JavaScript
/// expression making a `File` from `arguments`.
async fn drop_on_zone(browser: &webdriver::Browser, file: &str, args: Vec<serde_json::Value>) {
    let script = format!(
        "const transfer = new DataTransfer();
         transfer.items.add({file});
         const zone = document.getElementById('upload');
         for (const type of ['dragenter', 'dragover', 'drop']) {{
           zone.dispatchEvent(new DragEvent(type, {{ dataTransfer: transfer, bubbles: true, cancelable: true }}));
         }}"
    );
    browser.run(&script, args).await;
}

/// Drops a file made of `text`.
async fn drop_file(browser: &webdriver::Browser, name: &str, text: &str) {
    drop_on_zone(
        browser,
        "new File([arguments[1]], arguments[0], { type: 'text/plain' })",
        vec![json!(name), json!(text)],
    )
    .await;
}

/// The console's multipart part size.
const PART: usize = 16 << 20;

/// The bytes of a big dropped file: byte i is i % 251, made alike in the page.
fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// Drops a file of `size` [`pattern`] bytes, always with the same modification time, so a drop
/// after a reload is the same file to the console's resume memo.
async fn drop_big_file(browser: &webdriver::Browser, name: &str, size: usize) {
    drop_on_zone(
        browser,
        "new File([(() => {
           const bytes = new Uint8Array(arguments[1]);
           for (let i = 0; i < bytes.length; i++) bytes[i] = i % 251;
           return bytes;
         })()], arguments[0], { type: 'application/octet-stream', lastModified: 1700000000000 })",
        vec![json!(name), json!(size)],
    )
    .await;
}

/// Polls `check` until it holds. The bound only turns a hang into a failure: CI runs the test
/// binaries side by side on two cores, where a browser's 20 MiB upload took over 30 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} within 120 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `walk` with a browser, unless the browser tier does not run here.
fn in_browser<F, Fut>(walk: F)
where
    F: FnOnce(webdriver::Browser) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    // The gateway and console run on this thread's runtime too; unoptimised, their request
    // futures need more than a test thread's 2 MiB of stack.
    std::thread::Builder::new()
        .stack_size(32 << 20)
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Some(browser) = webdriver::launch().await {
                    walk(browser).await;
                }
            });
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_browser_signs_in_uploads_by_drag_and_drop_restores_a_version_and_edits_a_policy() {
    in_browser(walk_through);
}

#[test]
fn a_browser_uploads_a_big_file_in_parts_retries_a_dropped_part_and_resumes_after_a_reload() {
    in_browser(multipart_walk);
}

async fn sign_in_browser(browser: &webdriver::Browser, stack: &Stack) {
    browser.goto(&stack.url("/")).await;
    browser.type_into("#access_key", ROOT_ACCESS_KEY).await;
    browser.type_into("#secret_key", ROOT_SECRET_KEY).await;
    browser.click("#sign-in").await;
    browser.find("#create-bucket").await;
}

/// The object's bytes and ETag.
async fn object_of(stack: &Stack, bucket: &str, key: &str) -> (Vec<u8>, String) {
    let object = stack.root.get_object().bucket(bucket).key(key).send().await.unwrap();
    let etag = object.e_tag().unwrap_or_default().to_owned();
    (object.body.collect().await.unwrap().to_vec(), etag)
}

async fn multipart_walk(browser: webdriver::Browser) {
    let stack = Stack::start_with_s3_front().await;
    let front = stack.s3_front.as_ref().unwrap();
    let (b, s) = (&browser, &stack);
    // Two parts: 16 MiB and 4 MiB.
    let size = PART + (4 << 20);
    sign_in_browser(&browser, &stack).await;
    stack.root.create_bucket().bucket("big").send().await.unwrap();
    let objects = stack.url("/objects?bucket=big");
    browser.goto(&objects).await;
    browser.click("#allow-uploads").await;
    eventually("uploads allowed", move || async move {
        b.source().await.contains("This console may now upload to the bucket.")
    })
    .await;
    let uploaded =
        |key: &'static str| move || async move { s.root.head_object().bucket("big").key(key).send().await.is_ok() };

    // The second part's first PUT meets a network error; the page retries it.
    front.fail(2, Fault::Drop);
    drop_big_file(&browser, "big.bin", size).await;
    eventually("the upload with a part retried", uploaded("big.bin")).await;
    assert_eq!(front.take_parts(), [1, 2, 2]);
    let (bytes, etag) = object_of(&stack, "big", "big.bin").await;
    assert!(bytes == pattern(size), "the object is the file, {} bytes", bytes.len());
    assert!(etag.ends_with("-2\""), "{etag}");

    // The second part is held unanswered; the page shows the first part's progress.
    browser.goto(&objects).await;
    front.fail(2, Fault::Hold);
    drop_big_file(&browser, "resumed.bin", size).await;
    eventually("the second part sent", move || async move { front.parts() == [1, 2] }).await;
    let bar = browser
        .run(
            "const bar = document.querySelector('#uploads progress');
             return [bar.value, bar.max, bar.closest('li').dataset.state ?? null];",
            vec![],
        )
        .await;
    assert!(bar[0].as_u64().unwrap() >= PART as u64, "{bar}");
    assert_eq!(bar[1], json!(size));
    assert_eq!(bar[2], json!(null), "the upload is not over: {bar}");
    let uploads = stack.root.list_multipart_uploads().bucket("big").send().await.unwrap();
    assert_eq!(uploads.uploads().len(), 1);
    let upload_id = uploads.uploads()[0].upload_id().unwrap().to_owned();
    let parts = stack
        .root
        .list_parts()
        .bucket("big")
        .key("resumed.bin")
        .upload_id(&upload_id)
        .send()
        .await
        .unwrap();
    let held: Vec<_> = parts.parts().iter().map(|p| (p.part_number(), p.size())).collect();
    assert_eq!(held, [(Some(1), Some(PART as i64))]);
    let memo = "return Object.keys(localStorage).filter((k) => k.startsWith('pgvs3-upload')).map((k) => localStorage.getItem(k));";
    assert_eq!(browser.run(memo, vec![]).await, json!([upload_id]));

    // A reload abandons the held part; the same file dropped again sends only what is missing.
    browser.goto(&objects).await;
    front.take_parts();
    drop_big_file(&browser, "resumed.bin", size).await;
    eventually("the resumed upload", uploaded("resumed.bin")).await;
    assert_eq!(front.take_parts(), [2], "only the missing part is sent again");
    let (bytes, etag) = object_of(&stack, "big", "resumed.bin").await;
    assert!(bytes == pattern(size), "the object is the file, {} bytes", bytes.len());
    assert!(etag.ends_with("-2\""), "{etag}");
    let uploads = stack.root.list_multipart_uploads().bucket("big").send().await.unwrap();
    assert!(uploads.uploads().is_empty());
    eventually("the memo forgotten", move || async move {
        b.run(memo, vec![]).await == json!([])
    })
    .await;
    browser.quit().await;
}

async fn walk_through(browser: webdriver::Browser) {
    let stack = Stack::start().await;
    let console = |path: &str| stack.url(path);
    // Shared references, copied into each poll of `eventually`.
    let (b, s) = (&browser, &stack);

    browser.goto(&console("/")).await;
    browser.find("#access_key").await;
    browser.screenshot("login").await;
    sign_in_browser(&browser, &stack).await;
    let cookies = browser.cookies().await;
    let session = cookies
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "pgvs3_session")
        .expect("a session cookie");
    assert_eq!(session["httpOnly"], json!(true));
    assert_eq!(session["sameSite"], json!("Strict"));
    // The secret is nowhere the page's scripts can reach.
    let stored = browser
        .run(
            "return document.documentElement.outerHTML + document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage);",
            vec![],
        )
        .await;
    assert!(!stored.as_str().unwrap().contains(ROOT_SECRET_KEY));

    // A bucket, with versioning.
    browser.type_into("#new-bucket", "photos").await;
    browser.click("#create-bucket").await;
    // The RESP listener's own bucket is listed too: wait for this one.
    browser.find("a.bucket[href='/objects?bucket=photos']").await;
    assert!(bucket_exists(&stack, "photos").await);
    browser.screenshot("buckets").await;
    browser.goto(&console("/bucket?bucket=photos")).await;
    browser.click("#versioning-toggle").await;
    eventually("versioning on", move || async move {
        b.source().await.contains("id=\"versioning-status\">Enabled<")
    })
    .await;

    // The policy editor: refused with its reasons, then saved.
    browser.clear("#policy").await;
    browser
        .type_into(
            "#policy",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Permit"}]}"#,
        )
        .await;
    browser.click("#save-policy").await;
    eventually("the policy refused with its reason", move || async move {
        b.source()
            .await
            .contains("<li>Statement 1: Effect must be \"Allow\" or \"Deny\"</li>")
    })
    .await;
    assert!(stack.root.get_bucket_policy().bucket("photos").send().await.is_err());
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::photos/public/*"}]}"#;
    browser.clear("#policy").await;
    browser.type_into("#policy", policy).await;
    browser.click("#save-policy").await;
    eventually("the policy saved", move || async move {
        b.source().await.contains("Bucket policy saved.")
    })
    .await;
    let saved = stack.root.get_bucket_policy().bucket("photos").send().await.unwrap();
    let saved: serde_json::Value = serde_json::from_str(saved.policy().unwrap()).unwrap();
    assert_eq!(saved["Statement"][0]["Resource"], json!("arn:aws:s3:::photos/public/*"));

    // A lifecycle rule, from the bucket page's form.
    browser.type_into("#lifecycle-id", "tmp").await;
    browser.type_into("#lifecycle-prefix", "tmp/").await;
    browser.type_into("#lifecycle-expire", "3").await;
    browser.click("#add-lifecycle-rule").await;
    eventually("the lifecycle rule saved", move || async move {
        b.source().await.contains("Lifecycle rule tmp saved.")
    })
    .await;
    let lifecycle = stack
        .root
        .get_bucket_lifecycle_configuration()
        .bucket("photos")
        .send()
        .await
        .unwrap();
    assert_eq!(lifecycle.rules()[0].expiration().and_then(|e| e.days()), Some(3));
    browser.screenshot("bucket").await;

    // Uploads by drag and drop, straight to the gateway (the console first adds a CORS rule).
    browser.goto(&console("/objects?bucket=photos")).await;
    browser.click("#allow-uploads").await;
    eventually("uploads allowed", move || async move {
        b.source().await.contains("This console may now upload to the bucket.")
    })
    .await;
    drop_file(&browser, "notes.txt", "first version").await;
    eventually("the first upload", move || async move {
        s.root
            .head_object()
            .bucket("photos")
            .key("notes.txt")
            .send()
            .await
            .is_ok()
    })
    .await;
    browser.find("a.object").await;
    drop_file(&browser, "notes.txt", "second version").await;
    eventually("the second upload", move || async move {
        body_of(s, "photos", "notes.txt").await == "second version"
    })
    .await;
    put(&stack, "photos", "<img src=x onerror=alert(1)>.txt", "hostile").await;
    browser.goto(&console("/objects?bucket=photos")).await;
    browser.find("a.object").await;
    // The hostile name is text: no element was made of it (an alert would also stop WebDriver).
    let images = browser
        .run("return document.querySelectorAll('main img').length;", vec![])
        .await;
    assert_eq!(images, json!(0));
    assert!(
        browser
            .text("#objects")
            .await
            .contains("<img src=x onerror=alert(1)>.txt")
    );
    browser.screenshot("objects").await;

    // Versions: restore the first, then delete one permanently.
    browser.goto(&console("/object?bucket=photos&key=notes.txt")).await;
    let count = move || async move {
        b.run("return document.querySelectorAll('tr.version').length;", vec![])
            .await
    };
    assert_eq!(count().await, json!(2));
    browser.screenshot("object").await;
    browser.click("tr.version:not(.latest) button.restore").await;
    eventually("the restore", move || async move {
        b.source().await.contains("That version is now the current one.")
    })
    .await;
    assert_eq!(body_of(&stack, "photos", "notes.txt").await, "first version");
    assert_eq!(count().await, json!(3));
    browser.click("tr.version:not(.latest) button.danger").await;
    browser.accept_dialog().await;
    eventually("the permanent delete", move || async move {
        b.source().await.contains("Version deleted permanently.")
    })
    .await;
    assert_eq!(count().await, json!(2));
    let versions = stack
        .root
        .list_object_versions()
        .bucket("photos")
        .prefix("notes.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(versions.versions().len(), 2);

    // Previews: an image loads from its presigned URL under the CSP; a Parquet schema.
    stack
        .root
        .put_object()
        .bucket("photos")
        .key("dot.png")
        .content_type("image/png")
        .body(ByteStream::from_static(PNG))
        .send()
        .await
        .unwrap();
    put(&stack, "photos", "tables/columns.parquet", PARQUET).await;
    browser.goto(&console("/object?bucket=photos&key=dot.png")).await;
    eventually("the image preview loaded", move || async move {
        b.run("return document.getElementById('preview-image').naturalWidth;", vec![])
            .await
            == json!(2)
    })
    .await;
    browser
        .goto(&console("/object?bucket=photos&key=tables/columns.parquet"))
        .await;
    assert!(
        browser
            .text("#parquet-schema")
            .await
            .contains("<script>alert(1)</script>")
    );
    browser.screenshot("preview").await;

    // The keyspace: found by pattern, a hash shown and a field added.
    stack
        .redis(&["HSET", "session:42", "user", "ada", "<b>role</b>", "admin"])
        .await;
    stack.redis(&["XADD", "audit", "*", "event", "login"]).await;
    browser.goto(&console("/keys")).await;
    browser.clear("#pattern").await;
    browser.type_into("#pattern", "session:*").await;
    browser.click("#find-keys").await;
    // The page before the search lists every key (`*`, the stream among them) with the same
    // links: wait for the page the search loaded, which carries its pattern.
    eventually("the key found", move || async move {
        let source = b.source().await;
        source.contains("value=\"session:*\"") && source.contains("class=\"key\"")
    })
    .await;
    browser.screenshot("keys").await;
    browser.click("a.key").await;
    browser.find("#key-type").await;
    assert_eq!(browser.text("#key-type").await, "hash");
    browser.type_into("#field", "theme").await;
    browser.type_into("#field-value", "dark").await;
    browser.click("#add-element").await;
    eventually("the field saved", move || async move {
        b.source().await.contains("Field saved.")
    })
    .await;
    assert_eq!(stack.redis(&["HGET", "session:42", "theme"]).await, "dark");
    assert!(browser.text("#elements").await.contains("<b>role</b>"));
    browser.screenshot("key").await;

    // A stream: a group created in the page, an entry delivered to it, acknowledged in the page.
    browser.goto(&console("/key?key=audit")).await;
    browser.type_into("#new-group", "mailers").await;
    browser.type_into("#new-group-id", "0").await;
    browser.click("#create-group").await;
    eventually("the group created", move || async move {
        b.source().await.contains("Group created.")
    })
    .await;
    stack
        .redis(&["XREADGROUP", "GROUP", "mailers", "mailer-1", "STREAMS", "audit", ">"])
        .await;
    browser.goto(&console("/key?key=audit")).await;
    browser.find("tr.pending-entry").await;
    browser.screenshot("stream").await;
    browser.click("tr.pending-entry button.xack").await;
    eventually("the entry acknowledged", move || async move {
        b.source().await.contains("Entry acknowledged.")
    })
    .await;
    assert!(
        stack.redis(&["XPENDING", "audit", "mailers"]).await.starts_with('0'),
        "nothing pending"
    );

    // Jobs: a dead job retried from the dead letter.
    let dead = dead_job(&stack, "mail", "SMTP", "mailbox full").await;
    browser.goto(&console("/jobs")).await;
    browser.find("tr.dead").await;
    browser.screenshot("jobs").await;
    browser.click("tr.dead button.retry").await;
    eventually("the retry", move || async move {
        b.source().await.contains("is queued again.")
    })
    .await;
    let (_, job) = stack.ojs("GET", &format!("/ojs/v1/jobs/{dead}"), json!(null)).await;
    assert_eq!(
        job["job"]["state"].as_str().or(job["state"].as_str()),
        Some("available"),
        "{job}"
    );
    // The mail queue's available jobs, the retried one among them, and its history.
    browser.click("#queues a[href^='/jobs/queue?name=mail&']").await;
    browser.click("#states a[href$='state=available']").await;
    browser.find(&format!("tr.job[data-job='{dead}']")).await;
    browser.screenshot("jobs-state").await;
    browser.click(&format!("tr.job[data-job='{dead}'] a")).await;
    browser.find("#history li").await;
    assert!(browser.text("#history").await.contains("attempt 1 failed: SMTP"));

    // A workflow as a graph: a chain whose middle step is a group.
    let step = |kind: &str| json!({ "type": kind, "args": [], "options": { "queue": "etl" } });
    let (_, created) = stack
        .ojs(
            "POST",
            "/ojs/v1/workflows",
            json!({ "type": "chain", "name": "nightly", "steps": [
                step("etl.extract"),
                { "type": "group", "name": "transforms", "jobs": [step("etl.clean"), step("etl.enrich"), step("etl.index")] },
                step("etl.load") ] }),
        )
        .await;
    let created = if created["workflow"].is_object() {
        created["workflow"].clone()
    } else {
        created
    };
    browser.goto(&console("/jobs")).await;
    browser.type_into("#workflow-id", created["id"].as_str().unwrap()).await;
    browser.click("#find-workflow").await;
    browser.find("#workflow-graph g.node").await;
    let drawn = browser
        .run(
            "return document.querySelectorAll('#workflow-graph g.node').length;",
            vec![],
        )
        .await;
    assert_eq!(drawn, json!(3));
    browser.screenshot("workflow").await;

    // Object lock: a retention typed in and a legal hold placed on a version.
    stack
        .root
        .create_bucket()
        .bucket("vault")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    put(&stack, "vault", "deed.txt", "signed").await;
    browser.goto(&console("/object?bucket=vault&key=deed.txt")).await;
    browser.type_into("#retention-until", "2099-12-31").await;
    browser.click("#save-retention").await;
    eventually("the retention set", move || async move {
        b.source()
            .await
            .contains("<strong id=\"retention\">GOVERNANCE until 2099-12-31T00:00:00Z</strong>")
    })
    .await;
    browser.click("#toggle-legal-hold").await;
    eventually("the legal hold placed", move || async move {
        b.source().await.contains("<strong id=\"legal-hold\">ON</strong>")
    })
    .await;
    let hold = stack
        .root
        .get_object_legal_hold()
        .bucket("vault")
        .key("deed.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        hold.legal_hold().and_then(|hold| hold.status()).map(|s| s.as_str()),
        Some("ON")
    );
    browser.goto(&console("/object?bucket=vault&key=deed.txt#lock")).await;
    browser.find("#lock").await;
    browser.screenshot("lock").await;

    // Fleet and health: this gateway by its heartbeat row, and as its admin listener reports it.
    browser.goto(&console("/health")).await;
    assert_eq!(browser.text("#role").await, "primary");
    let fleet = browser.text("#gateway-list tr.gateway").await;
    assert!(fleet.contains(&format!("s3 {}", stack.gateway.s3_addr)), "{fleet}");
    assert!(browser.text("#wal-lsn").await.contains('/'));
    browser.find("#chart-gateway-rates").await;
    browser.screenshot("health").await;

    // Access keys: one created, its secret shown once.
    browser.goto(&console("/access-keys")).await;
    browser.type_into("#key-id", "BROWSERKEY01").await;
    browser.type_into("#key-description", "made in the browser").await;
    browser.click("#create-key-button").await;
    browser.find("#new-secret").await;
    let secret = browser.text("#new-secret").await;
    support::s3_client(stack.gateway.s3_addr, "BROWSERKEY01", &secret)
        .list_buckets()
        .send()
        .await
        .unwrap();
    browser.screenshot("access-keys").await;
    // Its own policy, edited: a Principal refused with its reason, then a document saved.
    browser.goto(&console("/access-key?access_key=BROWSERKEY01")).await;
    browser
        .type_into(
            "#policy",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:DeleteObject","Resource":"*"}]}"#,
        )
        .await;
    browser.click("#save-policy").await;
    eventually("the key policy refused with its reason", move || async move {
        b.source().await.contains("names no Principal")
    })
    .await;
    browser.screenshot("key-policy").await;
    browser.clear("#policy").await;
    browser
        .type_into(
            "#policy",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"s3:DeleteObject","Resource":"*"}]}"#,
        )
        .await;
    browser.click("#save-policy").await;
    eventually("the key policy saved", move || async move {
        b.source().await.contains("Policy of key BROWSERKEY01 saved.")
    })
    .await;

    // Sign out: the session is gone, in the browser and on the server.
    browser.click("#logout").await;
    browser.find("#access_key").await;
    browser.goto(&console("/buckets")).await;
    assert!(browser.url().await.ends_with("/login"));
    browser.quit().await;
}
