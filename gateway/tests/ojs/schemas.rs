//! The schema registry (ext-schema-registry) over HTTP against a real PostgreSQL: schemas are
//! registered by type and version (409 on a version that exists, 422 on a minor version that
//! breaks the one before it), listed, read and deleted, on the spec's routes and the admin
//! ones; enqueues (single, batch, workflow, cron template) whose `args` do not match are refused
//! with the spec's `validation_error` and store nothing; schemas the validator cannot enforce
//! are refused at registration, and so are validation modes other than `strict`; a
//! registration on one gateway binds the others.

use pgvs3_testkit as common;

use std::time::Duration;

use common::ojs::Ojs;
use common::{TestGateway, eventually, fresh_database};
use serde_json::{Value, json};

fn invoice_v1() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array",
        "prefixItems": [
            { "type": "string", "pattern": "^cust_[0-9]+$" },
            { "type": "object", "required": ["amount"],
              "properties": { "amount": { "type": "integer", "minimum": 0 }, "note": { "type": "string", "maxLength": 100 } } }
        ],
        "minItems": 2
    })
}

async fn register(ojs: &Ojs, job_type: &str, version: &str, schema: Value) -> (u16, Value) {
    ojs.post(
        "/ojs/v1/schemas",
        json!({ "job_type": job_type, "version": version, "schema": schema }),
    )
    .await
}

async fn jobs_of_type(gateway: &TestGateway, job_type: &str) -> i64 {
    gateway
        .sql()
        .await
        .query_one("SELECT count(*) AS jobs FROM ojs.jobs WHERE type = $1", &[&job_type])
        .await
        .unwrap()
        .get("jobs")
}

fn assert_refused((status, body): (u16, Value), code: &str, status_wanted: u16) -> Value {
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (status_wanted, Some(code)),
        "{body}"
    );
    body["error"].clone()
}

#[tokio::test]
async fn schemas_are_registered_by_version_listed_read_and_deleted() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);

    let (status, body) = register(&ojs, "invoice.generate", "1.0.0", invoice_v1()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["schema"]["job_type"], "invoice.generate");
    assert_eq!(body["schema"]["version"], "1.0.0");
    assert_eq!(body["schema"]["schema"], invoice_v1());
    assert!(
        body["schema"]["created_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{body}"
    );
    assert_refused(
        register(&ojs, "invoice.generate", "1.0.0", invoice_v1()).await,
        "duplicate",
        409,
    );

    // A minor version may add an optional field; one that adds a required field breaks the
    // versions before it and is refused (§8.4), a major version may.
    let mut widened = invoice_v1();
    widened["prefixItems"][1]["properties"]["currency"] = json!({ "type": "string" });
    widened["prefixItems"][1]["properties"]["note"]["maxLength"] = json!(200);
    assert_eq!(
        register(&ojs, "invoice.generate", "1.1.0", widened.clone()).await.0,
        201
    );
    let mut narrowed = widened.clone();
    narrowed["prefixItems"][1]["required"] = json!(["amount", "currency"]);
    let error = assert_refused(
        register(&ojs, "invoice.generate", "1.2.0", narrowed.clone()).await,
        "validation_error",
        422,
    );
    assert_eq!(
        error["details"]["breaking_changes"],
        json!(["required field currency was added at '[1]'"]),
        "{error}"
    );
    assert!(error["message"].as_str().unwrap().contains("2.0.0"), "{error}");
    assert_eq!(register(&ojs, "invoice.generate", "2.0.0", narrowed).await.0, 201);

    let (status, body) = ojs.get("/ojs/v1/schemas/invoice.generate").await;
    assert_eq!((status, &body["schema"]["version"]), (200, &json!("2.0.0")), "{body}");
    let (status, body) = ojs.get("/ojs/v1/schemas/invoice.generate/versions").await;
    assert_eq!(status, 200, "{body}");
    let versions: Vec<(&str, bool)> = body["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_str().unwrap(), v["is_latest"].as_bool().unwrap()))
        .collect();
    assert_eq!(versions, [("2.0.0", true), ("1.1.0", false), ("1.0.0", false)]);
    let (status, body) = ojs.get("/ojs/v1/schemas/invoice.generate/1.1.0").await;
    assert_eq!((status, &body["schema"]["schema"]), (200, &widened), "{body}");
    let (status, body) = ojs.get("/ojs/v1/schemas").await;
    assert_eq!(
        (status, body["schemas"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{body}"
    );

    let (status, body) = ojs.call("DELETE", "/ojs/v1/schemas/invoice.generate/2.0.0", None).await;
    assert_eq!((status, &body["schema"]["deleted"]), (200, &json!(true)), "{body}");
    let (_, body) = ojs.get("/ojs/v1/schemas/invoice.generate").await;
    assert_eq!(body["schema"]["version"], "1.1.0", "{body}");
    assert_refused(
        ojs.call("DELETE", "/ojs/v1/schemas/invoice.generate/2.0.0", None).await,
        "not_found",
        404,
    );
    assert_refused(ojs.get("/ojs/v1/schemas/no.such.type").await, "not_found", 404);
    assert_refused(
        register(&ojs, "invoice.generate", "1.2", invoice_v1()).await,
        "invalid_request",
        400,
    );

    // The admin routes: integer versions from the path, the stored schema at the top.
    let schema = json!({ "type": "array", "items": [{ "type": "string" }], "minItems": 1 });
    let (status, body) = ojs
        .call(
            "PUT",
            "/ojs/v1/admin/schemas/user.signup/1",
            Some(json!({ "schema": schema })),
        )
        .await;
    assert_eq!(
        (status, &body["type"], &body["version"]),
        (201, &json!("user.signup"), &json!(1)),
        "{body}"
    );
    let (status, body) = ojs.get("/ojs/v1/admin/schemas/user.signup/1").await;
    assert_eq!((status, &body["schema"]), (200, &schema), "{body}");
    assert_refused(
        ojs.call(
            "PUT",
            "/ojs/v1/admin/schemas/user.signup/1",
            Some(json!({ "schema": schema })),
        )
        .await,
        "duplicate",
        409,
    );
    assert_refused(
        ojs.call("PUT", "/ojs/v1/admin/schemas/user.signup/2", Some(json!({})))
            .await,
        "invalid_request",
        400,
    );
}

#[tokio::test]
async fn enqueues_whose_args_do_not_match_are_refused_and_store_nothing() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    assert_eq!(register(&ojs, "invoice.generate", "1.0.0", invoice_v1()).await.0, 201);

    let job = |args: Value| json!({ "type": "invoice.generate", "args": args });
    let (status, body) = ojs.post("/ojs/v1/jobs", job(json!(["cust_1", { "amount": 5 }]))).await;
    assert_eq!(status, 201, "{body}");
    let error = assert_refused(
        ojs.post("/ojs/v1/jobs", job(json!(["acme", { "amount": -1, "note": 7 }])))
            .await,
        "validation_error",
        422,
    );
    assert_eq!(
        error["details"]["validation_errors"],
        json!([
            "$[0]: does not match pattern \"^cust_[0-9]+$\"",
            "$[1].amount: must be at least 0",
            "$[1].note: must be string, got integer"
        ]),
        "{error}"
    );
    assert!(
        error["message"].as_str().unwrap().contains("invoice.generate@1.0.0"),
        "{error}"
    );
    assert_refused(
        ojs.post("/ojs/v1/jobs", job(json!(["cust_1"]))).await,
        "validation_error",
        422,
    );

    // A batch is refused whole, naming the job.
    let error = assert_refused(
        ojs.post(
            "/ojs/v1/jobs/batch",
            json!({ "jobs": [job(json!(["cust_2", { "amount": 1 }])), job(json!(["cust_3", {}]))] }),
        )
        .await,
        "validation_error",
        422,
    );
    assert!(error["message"].as_str().unwrap().starts_with("jobs[1]: "), "{error}");
    assert_eq!(error["details"]["index"], 1, "{error}");
    // So is a workflow with one such job, and a cron schedule whose template is one.
    assert_refused(
        ojs.post(
            "/ojs/v1/workflows",
            json!({ "type": "chain", "steps": [job(json!(["cust_4", { "amount": 1 }])), job(json!([]))] }),
        )
        .await,
        "validation_error",
        422,
    );
    assert_refused(
        ojs.post(
            "/ojs/v1/cron",
            json!({ "name": "invoices", "cron": "0 * * * *", "type": "invoice.generate", "args": [] }),
        )
        .await,
        "validation_error",
        422,
    );
    assert_eq!(jobs_of_type(&gateway, "invoice.generate").await, 1);

    // A job that names its version is checked against that version; one naming a version
    // that is not registered is refused. Types without schemas are not checked.
    let v2 = json!({ "type": "array", "items": { "type": "integer" } });
    assert_eq!(register(&ojs, "invoice.generate", "2.0.0", v2).await.0, 201);
    let versioned =
        |version: &str, args: Value| json!({ "type": "invoice.generate", "version": version, "args": args });
    assert_eq!(
        ojs.post("/ojs/v1/jobs", versioned("1.0.0", json!(["cust_1", { "amount": 5 }])))
            .await
            .0,
        201
    );
    assert_eq!(ojs.post("/ojs/v1/jobs", job(json!([1, 2, 3]))).await.0, 201);
    assert_refused(
        ojs.post("/ojs/v1/jobs", job(json!(["cust_1", { "amount": 5 }]))).await,
        "validation_error",
        422,
    );
    let error = assert_refused(
        ojs.post("/ojs/v1/jobs", versioned("3.0.0", json!([1]))).await,
        "validation_error",
        422,
    );
    assert!(error["message"].as_str().unwrap().contains("3.0.0"), "{error}");
    assert_eq!(
        ojs.post("/ojs/v1/jobs", json!({ "type": "other.task", "args": ["anything"] }))
            .await
            .0,
        201
    );
    assert_eq!(jobs_of_type(&gateway, "invoice.generate").await, 3);
}

#[tokio::test]
async fn schemas_the_validator_cannot_enforce_are_refused() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let mut deep = json!({ "type": "string" });
    for _ in 0..40 {
        deep = json!({ "type": "array", "items": deep });
    }
    let huge = json!({ "enum": vec!["x".repeat(1000); 100] });
    for (schema, said) in [
        (json!({ "type": "array", "uniqueItems": true }), "uniqueItems"),
        (json!({ "$ref": "https://example.com/args.json" }), "$ref"),
        (json!({ "type": "array", "items": { "pattern": "(" } }), "pattern"),
        (json!("string"), "object or a boolean"),
        (deep, "nest more than"),
        (huge, "over this server's limit"),
    ] {
        let error = assert_refused(
            register(&ojs, "bad.schema", "1.0.0", schema.clone()).await,
            "invalid_request",
            400,
        );
        assert!(error["message"].as_str().unwrap().contains(said), "{schema}: {error}");
    }
    assert_refused(ojs.get("/ojs/v1/schemas/bad.schema").await, "not_found", 404);
    // `format` is an annotation in draft 2020-12: kept, not asserted.
    let (status, body) = register(
        &ojs,
        "email.send",
        "1.0.0",
        json!({ "type": "array", "items": { "type": "string", "format": "email" } }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// Only the strict validation mode is offered (§7): a registration asking for `warn` or `off`
/// would have its type's jobs refused all the same, so it is refused itself and stores nothing.
#[tokio::test]
async fn validation_modes_other_than_strict_are_refused() {
    let gateway = TestGateway::start().await;
    let ojs = Ojs::of(&gateway);
    let schema = json!({ "type": "array", "items": { "type": "string" } });
    for (path, body) in [
        (
            "/ojs/v1/schemas",
            json!({ "job_type": "lenient.job", "version": "1.0.0", "schema": schema, "validation": { "mode": "warn" } }),
        ),
        (
            "/ojs/v1/schemas",
            json!({ "job_type": "lenient.job", "version": "1.0.0", "schema": schema, "validation": { "default_mode": "off" } }),
        ),
        (
            "/ojs/v1/admin/schemas/lenient.job/1",
            json!({ "schema": schema, "mode": "off" }),
        ),
    ] {
        let method = if path.starts_with("/ojs/v1/admin") {
            "PUT"
        } else {
            "POST"
        };
        let error = assert_refused(
            ojs.call(method, path, Some(body.clone())).await,
            "unsupported_feature",
            422,
        );
        assert!(error["message"].as_str().unwrap().contains("strict"), "{body}: {error}");
    }
    assert_refused(ojs.get("/ojs/v1/schemas/lenient.job").await, "not_found", 404);
    let (status, body) = ojs
        .post(
            "/ojs/v1/schemas",
            json!({ "job_type": "lenient.job", "version": "1.0.0", "schema": schema, "validation": { "mode": "strict" } }),
        )
        .await;
    assert_eq!(status, 201, "the mode offered is taken: {body}");
}

#[tokio::test]
async fn a_registration_on_one_gateway_binds_the_others() {
    let url = fresh_database().await;
    let (first, second) = (TestGateway::on(url.clone()).await, TestGateway::on(url).await);
    let (a, b) = (Ojs::of(&first), Ojs::of(&second));
    let bad = json!({ "type": "report.build", "args": ["not a number"] });
    // The second gateway has read (and keeps for a while) that the type has no schema.
    assert_eq!(b.post("/ojs/v1/jobs", bad.clone()).await.0, 201);
    let (status, body) = register(
        &a,
        "report.build",
        "1.0.0",
        json!({ "type": "array", "items": { "type": "number" } }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_refused(a.post("/ojs/v1/jobs", bad.clone()).await, "validation_error", 422);
    eventually(Duration::from_secs(5), "the second gateway enforces the schema", || {
        let (b, bad) = (b.clone(), bad.clone());
        async move { (b.post("/ojs/v1/jobs", bad).await.0 == 422).then_some(()) }
    })
    .await;
    // Deleting it releases the type on the gateway that served the deletion at once.
    let (status, _) = a.call("DELETE", "/ojs/v1/schemas/report.build/1.0.0", None).await;
    assert_eq!(status, 200);
    assert_eq!(a.post("/ojs/v1/jobs", bad).await.0, 201);
}
