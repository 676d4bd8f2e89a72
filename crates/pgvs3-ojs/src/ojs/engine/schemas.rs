//! The schema registry (ext-schema-registry): JSON Schemas for job types' `args`, by version,
//! in `ojs.schemas` (fleet-wide), and their enforcement on enqueue. A registration is compiled
//! first ([`super::json_schema`]), so only schemas the server can enforce in full are stored;
//! a new version with the major of an older one must not break it (§8).
//!
//! Enqueue validates each job's `args` against the version the job names (`version`), else the
//! type's latest; a type with no schema is not validated. Each gateway keeps the compiled
//! schemas of the types it enqueues for [`CACHE_TTL`]: a registration or deletion takes effect
//! at once on the gateway that served it, and within that time on the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::GenericClient;
use serde_json::{Map, Value, json};

use super::envelope::{self, NewJob};
use super::json_schema::{self, Compiled};
use super::{EngineError, ErrorKind, Queue};

/// A schema document's largest serialized size.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// Versions one job type may have.
pub const MAX_VERSIONS_PER_TYPE: i64 = 100;
/// Schemas in the registry, all types together.
pub const MAX_SCHEMAS: i64 = 10_000;
/// How long a gateway trusts what it read of a type's schemas.
pub const CACHE_TTL: Duration = Duration::from_secs(1);
/// Job types whose schemas a gateway keeps at once (cleared when full).
const CACHE_TYPES: usize = 4_096;

/// A version's precedence: SemVer's numbers (`N` is `N.0.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: i32,
    pub minor: i32,
    pub patch: i32,
    /// Written as a plain integer (`2`), and answered as a JSON number.
    pub integer: bool,
}

impl Version {
    /// `MAJOR.MINOR.PATCH` or `N`, decimal without leading zeros (pre-release and build
    /// suffixes are refused: they would need SemVer's string ordering).
    pub fn parse(text: &str) -> Result<Version, EngineError> {
        let number = |part: &str| -> Option<i32> {
            let valid = !part.is_empty()
                && part.len() <= 9
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part == "0" || !part.starts_with('0'));
            valid.then(|| part.parse().ok()).flatten()
        };
        let parts: Vec<&str> = text.split('.').collect();
        let parsed = match parts.as_slice() {
            [n] => number(n).map(|major| Version {
                major,
                minor: 0,
                patch: 0,
                integer: true,
            }),
            [major, minor, patch] => match (number(major), number(minor), number(patch)) {
                (Some(major), Some(minor), Some(patch)) => Some(Version {
                    major,
                    minor,
                    patch,
                    integer: false,
                }),
                _ => None,
            },
            _ => None,
        };
        parsed.ok_or_else(|| {
            EngineError::invalid(format!(
                "invalid schema version {text:?}: use SemVer MAJOR.MINOR.PATCH (such as \"1.2.0\") or an integer"
            ))
        })
    }

    /// A job's or request's `version`: a string, or a non-negative integer.
    pub fn of_value(value: &Value) -> Result<Version, EngineError> {
        match value {
            Value::String(text) => Version::parse(text),
            Value::Number(n) if n.is_u64() => Version::parse(&n.to_string()),
            _ => Err(EngineError::invalid("\"version\" must be a string or an integer")),
        }
    }

    fn same_precedence(&self, other: &Version) -> bool {
        (self.major, self.minor, self.patch) == (other.major, other.minor, other.patch)
    }
}

/// A registration: the type, its version and the JSON Schema for its jobs' `args`.
pub struct NewSchema {
    pub job_type: String,
    pub version: Version,
    pub spelled: String,
    pub schema: Value,
}

/// Checks a registration: a valid type and version, a schema this server can enforce in full
/// and within [`MAX_SCHEMA_BYTES`].
pub fn parse_schema(job_type: &str, version: &Value, schema: Option<Value>) -> Result<NewSchema, EngineError> {
    if !envelope::is_valid_type(job_type) {
        return Err(EngineError::invalid(format!(
            "invalid job type {job_type:?}: use dot-separated lower-case segments such as \"email.send\""
        )));
    }
    let parsed = Version::of_value(version)?;
    let Some(schema) = schema else {
        return Err(EngineError::invalid(
            "missing required field \"schema\" (a JSON Schema document)",
        ));
    };
    let size = serde_json::to_vec(&schema).map_or(0, |bytes| bytes.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(EngineError::invalid(format!(
            "the schema is {size} bytes, over this server's limit of {MAX_SCHEMA_BYTES}"
        )));
    }
    json_schema::compile(&schema).map_err(|error| {
        EngineError::invalid(format!(
            "\"schema\" is not a JSON Schema this server can enforce: {error}"
        ))
    })?;
    let spelled = match version {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    Ok(NewSchema {
        job_type: job_type.to_string(),
        version: parsed,
        spelled,
        schema,
    })
}

/// A stored schema as the routes answer it.
fn record(row: &tokio_postgres::Row) -> Value {
    let version: String = row.get("version");
    let version_value = match version.parse::<u64>() {
        Ok(n) if !version.contains('.') => json!(n),
        _ => json!(version),
    };
    let job_type: String = row.get("job_type");
    json!({ "job_type": job_type, "type": job_type, "version": version_value,
            "schema": row.get::<_, Value>("schema"), "created_at": row.get::<_, String>("created_at") })
}

const COLUMNS: &str = "job_type, version, major, minor, patch, schema,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at";

/// What changes between two versions of a schema break jobs valid under the older (§8.2):
/// a property added to `required`, a property removed, a type changed or narrowed, a bound
/// narrowed or added, `additionalProperties: false` set, an `enum` value removed. Properties
/// and `items`/`prefixItems` are compared all the way down.
pub fn breaking_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut changes = Vec::new();
    compare(old, new, "", &mut changes);
    changes
}

/// Compares one level (`old` and `new` are the same place's subschemas) and recurses into
/// properties and items.
fn compare(old: &Value, new: &Value, at: &str, changes: &mut Vec<String>) {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return;
    };
    let place = |field: &str| {
        if at.is_empty() {
            field.to_string()
        } else {
            format!("{at}.{field}")
        }
    };
    for name in names(new.get("required")) {
        if !names(old.get("required")).contains(&name) {
            changes.push(format!(
                "required field {} was added{}",
                name.trim_matches('"'),
                in_place(at)
            ));
        }
    }
    if let (Some(Value::Object(old_props)), new_props) = (old.get("properties"), new.get("properties")) {
        for (name, old_schema) in old_props {
            match new_props.and_then(|p| p.get(name)) {
                None => changes.push(format!("field '{}' was removed", place(name))),
                Some(new_schema) => compare(old_schema, new_schema, &place(name), changes),
            }
        }
    }
    compare_types(old, new, at, changes);
    compare_bounds(old, new, at, changes);
    compare_allowed(old, new, at, changes);
    for keyword in ["items", "prefixItems"] {
        match (old.get(keyword), new.get(keyword)) {
            (Some(old_items @ Value::Object(_)), Some(new_items)) => {
                compare(old_items, new_items, &place("[]"), changes)
            }
            (Some(Value::Array(old_items)), Some(Value::Array(new_items))) => {
                for (index, (old_item, new_item)) in old_items.iter().zip(new_items).enumerate() {
                    compare(old_item, new_item, &place(&format!("[{index}]")), changes);
                }
            }
            _ => {}
        }
    }
}

/// A keyword's value as a list of JSON texts (`type: "string"` and `type: ["string"]` alike).
fn names(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(names)) => names.iter().map(|n| n.to_string()).collect(),
        Some(one) => vec![one.to_string()],
        None => Vec::new(),
    }
}

/// Any type the old schema allowed must stay allowed (an integer is a number).
fn compare_types(old: &Map<String, Value>, new: &Map<String, Value>, at: &str, changes: &mut Vec<String>) {
    let (old_types, new_types) = (names(old.get("type")), names(new.get("type")));
    let kept =
        |t: &String| new_types.contains(t) || (t == "\"integer\"" && new_types.iter().any(|n| n == "\"number\""));
    if !new_types.is_empty() && (old_types.is_empty() || !old_types.iter().all(kept)) {
        let was = if old_types.is_empty() {
            "any".to_string()
        } else {
            old_types.join("|")
        };
        changes.push(format!(
            "the type{} changed from {was} to {}",
            in_place(at),
            new_types.join("|")
        ));
    }
}

/// A bound added, or moved so that it allows less.
fn compare_bounds(old: &Map<String, Value>, new: &Map<String, Value>, at: &str, changes: &mut Vec<String>) {
    for (keyword, upper) in [
        ("maxLength", true),
        ("maximum", true),
        ("exclusiveMaximum", true),
        ("maxItems", true),
        ("minLength", false),
        ("minimum", false),
        ("exclusiveMinimum", false),
        ("minItems", false),
    ] {
        let Some(now) = new.get(keyword).and_then(Value::as_f64) else {
            continue;
        };
        let narrowed = match old.get(keyword).and_then(Value::as_f64) {
            None => true,
            Some(before) => (upper && now < before) || (!upper && now > before),
        };
        if narrowed {
            changes.push(format!("{keyword}{} was narrowed to {now}", in_place(at)));
        }
    }
}

/// `additionalProperties: false` set, an `enum` added or a value of it removed.
fn compare_allowed(old: &Map<String, Value>, new: &Map<String, Value>, at: &str, changes: &mut Vec<String>) {
    if new.get("additionalProperties") == Some(&Value::Bool(false))
        && old.get("additionalProperties") != Some(&Value::Bool(false))
    {
        changes.push(format!("additionalProperties{} was set to false", in_place(at)));
    }
    if let Some(Value::Array(now)) = new.get("enum") {
        match old.get("enum") {
            Some(Value::Array(before)) => {
                for value in before.iter().filter(|v| !now.contains(v)) {
                    changes.push(format!("enum value {value}{} was removed", in_place(at)));
                }
            }
            _ => changes.push(format!("an enum{} was added", in_place(at))),
        }
    }
}

fn in_place(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!(" at '{at}'")
    }
}

/// A job type's compiled schemas by version, newest first.
type Versions = Arc<Vec<(Version, Arc<Compiled>)>>;

/// A job type's schemas as one gateway read them.
struct Known {
    read: Instant,
    versions: Versions,
}

/// The compiled schemas of the job types this gateway enqueues, each trusted for [`CACHE_TTL`].
#[derive(Default)]
pub struct Cache {
    types: Mutex<HashMap<String, Known>>,
}

impl Cache {
    fn fresh(&self, job_type: &str) -> Option<Versions> {
        let types = self.types.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        types
            .get(job_type)
            .filter(|known| known.read.elapsed() < CACHE_TTL)
            .map(|known| known.versions.clone())
    }

    fn keep(&self, job_type: String, versions: Versions) {
        let mut types = self.types.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if types.len() >= CACHE_TYPES {
            types.clear();
        }
        types.insert(
            job_type,
            Known {
                read: Instant::now(),
                versions,
            },
        );
    }

    pub(super) fn forget(&self, job_type: Option<&str>) {
        let mut types = self.types.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match job_type {
            Some(job_type) => drop(types.remove(job_type)),
            None => types.clear(),
        }
    }
}

impl Queue {
    /// Stores a schema version; 409 when the type has that version, 422 when it breaks the
    /// version before it within one major.
    pub async fn register_schema(&self, new: &NewSchema) -> Result<Value, EngineError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(EngineError::sql)?;
        // One registration of a type at a time: the compatibility check reads what it inserts
        // against.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('ojs.schemas'), hashtext($1))",
            &[&new.job_type],
        )
        .await
        .map_err(EngineError::sql)?;
        let v = &new.version;
        let counts = tx
            .query_one(
                "SELECT (SELECT count(*) FROM ojs.schemas WHERE job_type = $1) AS of_type,
                        (SELECT count(*) FROM ojs.schemas) AS total,
                        EXISTS (SELECT 1 FROM ojs.schemas WHERE job_type = $1 AND (major, minor, patch) = ($2, $3, $4))
                            AS taken",
                &[&new.job_type, &v.major, &v.minor, &v.patch],
            )
            .await
            .map_err(EngineError::sql)?;
        if counts.get::<_, bool>("taken") {
            return Err(EngineError::duplicate(format!(
                "job type {:?} already has schema version {}",
                new.job_type, new.spelled
            )));
        }
        if counts.get::<_, i64>("of_type") >= MAX_VERSIONS_PER_TYPE {
            return Err(EngineError::conflict(format!(
                "job type {:?} has {MAX_VERSIONS_PER_TYPE} schema versions, this server's limit; delete old ones first",
                new.job_type
            )));
        }
        if counts.get::<_, i64>("total") >= MAX_SCHEMAS {
            return Err(EngineError::conflict(format!(
                "the registry holds {MAX_SCHEMAS} schemas, this server's limit; delete unused ones first"
            )));
        }
        let previous = tx
            .query_opt(
                "SELECT version, major, schema FROM ojs.schemas WHERE job_type = $1 AND (major, minor, patch) < ($2, $3, $4)
                 ORDER BY major DESC, minor DESC, patch DESC LIMIT 1",
                &[&new.job_type, &v.major, &v.minor, &v.patch],
            )
            .await
            .map_err(EngineError::sql)?;
        if let Some(previous) = previous
            && previous.get::<_, i32>("major") == v.major
        {
            let breaking = breaking_changes(&previous.get::<_, Value>("schema"), &new.schema);
            if !breaking.is_empty() {
                let before: String = previous.get("version");
                return Err(EngineError::new(
                    ErrorKind::SchemaMismatch,
                    format!(
                        "schema version {} introduces breaking changes compared to {before}; use a major version bump ({}.0.0)",
                        new.spelled,
                        v.major + 1
                    ),
                )
                .with_details(json!({ "breaking_changes": breaking })));
            }
        }
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO ojs.schemas (job_type, major, minor, patch, version, schema)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLUMNS}"
                ),
                &[&new.job_type, &v.major, &v.minor, &v.patch, &new.spelled, &new.schema],
            )
            .await
            .map_err(EngineError::sql)?;
        tx.commit().await.map_err(EngineError::sql)?;
        self.schemas.forget(Some(&new.job_type));
        Ok(record(&row))
    }

    /// One version of a type's schema, or its latest (`None`).
    pub async fn schema(&self, job_type: &str, version: Option<&Version>) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let (major, minor, patch) =
            version.map_or((None, None, None), |v| (Some(v.major), Some(v.minor), Some(v.patch)));
        let row = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM ojs.schemas WHERE job_type = $1
                       AND ($2::int IS NULL OR (major, minor, patch) = ($2, $3, $4))
                     ORDER BY major DESC, minor DESC, patch DESC LIMIT 1"
                ),
                &[&job_type, &major, &minor, &patch],
            )
            .await
            .map_err(EngineError::sql)?;
        row.map(|row| record(&row)).ok_or_else(|| match version {
            Some(_) => EngineError::not_found(format!("job type {job_type:?} has no such schema version")),
            None => EngineError::not_found(format!("no schema is registered for job type {job_type:?}")),
        })
    }

    /// A type's versions, newest first, the latest marked.
    pub async fn schema_versions(&self, job_type: &str) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM ojs.schemas WHERE job_type = $1 ORDER BY major DESC, minor DESC, patch DESC"
                ),
                &[&job_type],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(index, row)| {
                let stored = record(row);
                json!({ "version": stored["version"], "created_at": stored["created_at"], "is_latest": index == 0 })
            })
            .collect())
    }

    /// Every type's latest schema, by type.
    pub async fn list_schemas(&self) -> Result<Vec<Value>, EngineError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT DISTINCT ON (job_type) {COLUMNS} FROM ojs.schemas
                     ORDER BY job_type, major DESC, minor DESC, patch DESC"
                ),
                &[],
            )
            .await
            .map_err(EngineError::sql)?;
        Ok(rows.iter().map(record).collect())
    }

    pub async fn delete_schema(&self, job_type: &str, version: &Version) -> Result<Value, EngineError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "DELETE FROM ojs.schemas WHERE job_type = $1 AND (major, minor, patch) = ($2, $3, $4) RETURNING {COLUMNS}"
                ),
                &[&job_type, &version.major, &version.minor, &version.patch],
            )
            .await
            .map_err(EngineError::sql)?;
        self.schemas.forget(Some(job_type));
        row.map(|row| record(&row))
            .ok_or_else(|| EngineError::not_found(format!("job type {job_type:?} has no such schema version")))
    }

    /// Refuses jobs whose `args` do not match their type's schema (the version the job names,
    /// else the latest); in a `batch`, the message names the job by its index.
    pub async fn check_args<'a>(
        &self,
        jobs: impl Iterator<Item = &'a NewJob> + Clone,
        batch: bool,
    ) -> Result<(), EngineError> {
        let schemas = self.schemas_of(jobs.clone().map(|job| job.job_type.as_str())).await?;
        for (index, job) in jobs.enumerate() {
            let Some(versions) = schemas.get(job.job_type.as_str()).filter(|v| !v.is_empty()) else {
                continue;
            };
            let named = match job.envelope.get("version") {
                None | Some(Value::Null) => None,
                Some(version) => Some(Version::of_value(version)?),
            };
            let which = |version: &Version| {
                if version.integer {
                    format!("{}@{}", job.job_type, version.major)
                } else {
                    format!("{}@{}.{}.{}", job.job_type, version.major, version.minor, version.patch)
                }
            };
            let prefix = if batch {
                format!("jobs[{index}]: ")
            } else {
                String::new()
            };
            let found = match &named {
                None => versions.first(),
                Some(named) => versions.iter().find(|(v, _)| v.same_precedence(named)),
            };
            let Some((version, schema)) = found else {
                let named = named.as_ref().map(which).unwrap_or_default();
                return Err(EngineError::new(
                    ErrorKind::SchemaMismatch,
                    format!("{prefix}no schema is registered for {named}"),
                )
                .with_details(json!({ "validation_errors": [format!("schema version {named} is not registered")] })));
            };
            let errors = schema.validate(&job.envelope["args"]);
            if !errors.is_empty() {
                let mut details = json!({ "validation_errors": errors, "job_type": job.job_type });
                if batch {
                    details["index"] = json!(index);
                }
                return Err(EngineError::new(
                    ErrorKind::SchemaMismatch,
                    format!("{prefix}job arguments do not match schema for {}", which(version)),
                )
                .with_details(details));
            }
        }
        Ok(())
    }

    /// The schemas of these types, from this gateway's cache or (for those it has not read
    /// within [`CACHE_TTL`]) from the registry in one query.
    async fn schemas_of<'a>(
        &self,
        types: impl Iterator<Item = &'a str>,
    ) -> Result<HashMap<&'a str, Versions>, EngineError> {
        let mut known = HashMap::new();
        let mut missing: Vec<&str> = Vec::new();
        for job_type in types {
            if known.contains_key(job_type) || missing.contains(&job_type) {
                continue;
            }
            match self.schemas.fresh(job_type) {
                Some(versions) => drop(known.insert(job_type, versions)),
                None => missing.push(job_type),
            }
        }
        if missing.is_empty() {
            return Ok(known);
        }
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT job_type, version, major, minor, patch, schema FROM ojs.schemas WHERE job_type = ANY($1)
                 ORDER BY job_type, major DESC, minor DESC, patch DESC",
                &[&missing],
            )
            .await
            .map_err(EngineError::sql)?;
        let mut read: HashMap<String, Vec<(Version, Arc<Compiled>)>> = HashMap::new();
        for row in rows {
            let version = Version {
                major: row.get("major"),
                minor: row.get("minor"),
                patch: row.get("patch"),
                integer: !row.get::<_, String>("version").contains('.'),
            };
            // Stored schemas were compiled at registration; one that no longer compiles (a
            // validator change) is a fault of the server, not of the job.
            let compiled = json_schema::compile(&row.get::<_, Value>("schema")).map_err(EngineError::backend)?;
            read.entry(row.get("job_type"))
                .or_default()
                .push((version, Arc::new(compiled)));
        }
        for job_type in missing {
            let versions = Arc::new(read.remove(job_type).unwrap_or_default());
            self.schemas.keep(job_type.to_string(), versions.clone());
            known.insert(job_type, versions);
        }
        Ok(known)
    }
}

#[cfg(test)]
mod tests {
    use super::{Version, breaking_changes};
    use serde_json::json;

    #[test]
    fn versions_are_semver_or_integers() {
        assert!(Version::parse("1.2.3").unwrap() < Version::parse("1.10.0").unwrap());
        assert!(Version::parse("2").unwrap() > Version::parse("1.9.9").unwrap());
        for bad in ["", "1.2", "01", "1.2.3-rc.1", "a", "1..2", "1234567890"] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn breaking_changes_follow_section_8() {
        let v1 = json!({ "type": "object", "required": ["to"],
                         "properties": { "to": { "type": "string", "maxLength": 100 }, "cc": { "type": "string" } } });
        let widened = json!({ "type": "object", "required": ["to"],
                              "properties": { "to": { "type": "string", "maxLength": 200 }, "cc": { "type": "string" },
                                              "bcc": { "type": "string" } } });
        assert_eq!(breaking_changes(&v1, &widened), Vec::<String>::new());
        let narrowed = json!({ "type": "object", "required": ["to", "subject"], "additionalProperties": false,
                               "properties": { "to": { "type": "integer", "maxLength": 50 }, "subject": {} } });
        assert_eq!(
            breaking_changes(&v1, &narrowed),
            [
                "required field subject was added",
                "field 'cc' was removed",
                "the type at 'to' changed from \"string\" to \"integer\"",
                "maxLength at 'to' was narrowed to 50",
                "additionalProperties was set to false"
            ]
        );
    }
}
