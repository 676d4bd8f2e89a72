//! The JSON Schema subset the schema registry enforces on job `args` (ext-schema-registry §5):
//! `type`, `properties`, `required`, `additionalProperties`, `items` (one schema, or the older
//! drafts' array of schemas by position), `prefixItems`, `enum`, `const`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `minLength`, `maxLength`, `pattern`, `minItems`,
//! `maxItems`, `allOf`, `anyOf`, `oneOf`, `not`, and `$ref` to a subschema of the same document
//! (`#`, `#/$defs/…`, `#/properties/…`). Annotations (`title`, `description`, `format`, …) are
//! kept and not asserted, as draft 2020-12 has it for `format`. Any other keyword is refused at
//! registration ([`compile`]): a schema is never stored that the server would enforce only in
//! part.
//!
//! Compiling bounds a schema's nesting and size; validating bounds the work one job's `args`
//! may cost (node visits, pattern input, `$ref` recursion), so no schema or value can hold a
//! request for long.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Subschemas nested deeper than this are refused at registration.
pub const MAX_NESTING: usize = 32;
/// Subschemas in one document.
pub const MAX_NODES: usize = 2_000;
/// A `pattern`'s length: the regex engine's work is linear in pattern times input.
const MAX_PATTERN_BYTES: usize = 256;
/// The work one validation may do: a unit per subschema applied to a value, and one per 16
/// bytes a pattern reads. Beyond it the job is refused rather than validated without end.
pub const MAX_WORK: usize = 200_000;
/// How deep validation may recurse (values inside values, and `$ref`s, which need not descend).
const MAX_VALIDATION_DEPTH: usize = 128;
/// Errors reported for one job: enough to fix it, no more.
const MAX_ERRORS: usize = 20;

/// Keywords that describe and never constrain, accepted anywhere. `$defs`/`definitions` hold
/// subschemas that `$ref` reaches (compiled with the rest).
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "contentMediaType",
    "contentEncoding",
];

/// A schema ready to validate values with.
#[derive(Debug)]
pub struct Compiled {
    /// Every subschema of the document; the root is the first.
    nodes: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    /// `true` (anything) or `false` (nothing).
    Always(bool),
    Rules(Box<Rules>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Null,
    Boolean,
    Object,
    Array,
    Number,
    Integer,
    String,
}

impl Type {
    fn parse(name: &str) -> Option<Type> {
        Some(match name {
            "null" => Type::Null,
            "boolean" => Type::Boolean,
            "object" => Type::Object,
            "array" => Type::Array,
            "number" => Type::Number,
            "integer" => Type::Integer,
            "string" => Type::String,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Type::Null => "null",
            Type::Boolean => "boolean",
            Type::Object => "object",
            Type::Array => "array",
            Type::Number => "number",
            Type::Integer => "integer",
            Type::String => "string",
        }
    }

    fn matches(self, value: &Value) -> bool {
        match (self, value) {
            (Type::Null, Value::Null)
            | (Type::Boolean, Value::Bool(_))
            | (Type::Object, Value::Object(_))
            | (Type::Array, Value::Array(_))
            | (Type::Number, Value::Number(_))
            | (Type::String, Value::String(_)) => true,
            // 2020-12: a number with a zero fractional part is an integer (1.0 is).
            (Type::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        }
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::Number(n) if Type::Integer.matches(&Value::Number(n.clone())) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
    }
}

#[derive(Debug, Default)]
struct Rules {
    types: Option<Vec<Type>>,
    properties: Vec<(String, usize)>,
    required: Vec<String>,
    additional: Option<usize>,
    prefix: Vec<usize>,
    items: Option<usize>,
    enumerated: Option<Vec<Value>>,
    constant: Option<Value>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    pattern: Option<(String, regex_lite::Regex)>,
    /// `$ref`: the pointer as written until [`compile`] resolves it to a node.
    reference: Option<Reference>,
    all_of: Vec<usize>,
    any_of: Vec<usize>,
    one_of: Vec<usize>,
    not: Option<usize>,
}

#[derive(Debug)]
enum Reference {
    Pointer(String),
    Node(usize),
}

/// Builds the node tree, noting each subschema's JSON pointer so `$ref`s can find it.
struct Compiler {
    nodes: Vec<Node>,
    at: HashMap<String, usize>,
}

/// Checks a schema and compiles it; the error says which keyword, where, is not enforceable
/// or not valid.
pub fn compile(schema: &Value) -> Result<Compiled, String> {
    let mut compiler = Compiler {
        nodes: Vec::new(),
        at: HashMap::new(),
    };
    compiler.node(schema, "", 0)?;
    let Compiler { mut nodes, at } = compiler;
    for node in &mut nodes {
        if let Node::Rules(rules) = node
            && let Some(Reference::Pointer(pointer)) = &rules.reference
        {
            let target = at
                .get(pointer)
                .ok_or_else(|| format!("$ref \"#{pointer}\" does not name a subschema of this document"))?;
            rules.reference = Some(Reference::Node(*target));
        }
    }
    Ok(Compiled { nodes })
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn place(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root".into()
    } else {
        format!("#{pointer}")
    }
}

impl Compiler {
    fn node(&mut self, schema: &Value, pointer: &str, depth: usize) -> Result<usize, String> {
        if depth > MAX_NESTING {
            return Err(format!(
                "subschemas nest more than {MAX_NESTING} deep at {}",
                place(pointer)
            ));
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(format!("a schema holds at most {MAX_NODES} subschemas"));
        }
        let index = self.nodes.len();
        self.at.insert(pointer.to_string(), index);
        let fields = match schema {
            Value::Bool(always) => {
                self.nodes.push(Node::Always(*always));
                return Ok(index);
            }
            Value::Object(fields) => fields,
            _ => return Err(format!("a schema is an object or a boolean, not at {}", place(pointer))),
        };
        self.nodes.push(Node::Always(true));
        let rules = self.rules(fields, pointer, depth)?;
        self.nodes[index] = Node::Rules(Box::new(rules));
        Ok(index)
    }

    fn child(&mut self, schema: &Value, pointer: &str, key: &str, depth: usize) -> Result<usize, String> {
        self.node(schema, &format!("{pointer}/{}", escape_pointer(key)), depth + 1)
    }

    /// An object of subschemas by name (`properties`, `$defs`), each compiled.
    fn named(
        &mut self,
        value: &Value,
        pointer: &str,
        keyword: &str,
        depth: usize,
    ) -> Result<Vec<(String, usize)>, String> {
        let Value::Object(schemas) = value else {
            return Err(format!("{keyword} must be an object at {}", place(pointer)));
        };
        let here = format!("{pointer}/{keyword}");
        schemas
            .iter()
            .map(|(name, schema)| Ok((name.clone(), self.child(schema, &here, name, depth)?)))
            .collect()
    }

    fn list(&mut self, value: &Value, pointer: &str, keyword: &str, depth: usize) -> Result<Vec<usize>, String> {
        let Value::Array(schemas) = value else {
            return Err(format!("{keyword} must be an array of schemas at {}", place(pointer)));
        };
        let here = format!("{pointer}/{keyword}");
        schemas
            .iter()
            .enumerate()
            .map(|(i, schema)| self.child(schema, &here, &i.to_string(), depth))
            .collect()
    }

    fn rules(&mut self, fields: &Map<String, Value>, pointer: &str, depth: usize) -> Result<Rules, String> {
        let mut rules = Rules::default();
        let at = || place(pointer);
        for (keyword, value) in fields {
            let number = || {
                value
                    .as_f64()
                    .ok_or_else(|| format!("{keyword} must be a number at {}", at()))
            };
            let count = || {
                value
                    .as_u64()
                    .ok_or_else(|| format!("{keyword} must be a non-negative integer at {}", at()))
            };
            match keyword.as_str() {
                "type" => rules.types = Some(types_of(value, &at())?),
                "properties" => rules.properties = self.named(value, pointer, keyword, depth)?,
                "required" => {
                    rules.required = value
                        .as_array()
                        .and_then(|names| names.iter().map(|n| n.as_str().map(String::from)).collect())
                        .ok_or_else(|| format!("required must be an array of property names at {}", at()))?;
                }
                "additionalProperties" => rules.additional = Some(self.child(value, pointer, keyword, depth)?),
                "items" if value.is_array() => rules.prefix = self.list(value, pointer, keyword, depth)?,
                "items" => rules.items = Some(self.child(value, pointer, keyword, depth)?),
                "prefixItems" => rules.prefix = self.list(value, pointer, keyword, depth)?,
                "enum" => {
                    rules.enumerated = Some(
                        value
                            .as_array()
                            .cloned()
                            .ok_or_else(|| format!("enum must be an array at {}", at()))?,
                    )
                }
                "const" => rules.constant = Some(value.clone()),
                "minimum" => rules.minimum = Some(number()?),
                "maximum" => rules.maximum = Some(number()?),
                "exclusiveMinimum" => rules.exclusive_minimum = Some(number()?),
                "exclusiveMaximum" => rules.exclusive_maximum = Some(number()?),
                "minLength" => rules.min_length = Some(count()?),
                "maxLength" => rules.max_length = Some(count()?),
                "minItems" => rules.min_items = Some(count()?),
                "maxItems" => rules.max_items = Some(count()?),
                "pattern" => rules.pattern = Some(pattern_of(value, &at())?),
                "$ref" => rules.reference = Some(reference_of(value, &at())?),
                "allOf" => rules.all_of = self.list(value, pointer, keyword, depth)?,
                "anyOf" => rules.any_of = self.list(value, pointer, keyword, depth)?,
                "oneOf" => rules.one_of = self.list(value, pointer, keyword, depth)?,
                "not" => rules.not = Some(self.child(value, pointer, keyword, depth)?),
                // Compiled so `$ref`s can find them; they apply only where referred to.
                "$defs" | "definitions" => drop(self.named(value, pointer, keyword, depth)?),
                // A base URI changes what `$ref`s mean; only the document's own is harmless.
                "$id" if pointer.is_empty() => {}
                other if ANNOTATIONS.contains(&other) => {}
                other => {
                    return Err(format!(
                        "keyword {other:?} at {} is not supported by this server's validator",
                        at()
                    ));
                }
            }
        }
        Ok(rules)
    }
}

/// `type`: a JSON type's name or a list of them.
fn types_of(value: &Value, at: &str) -> Result<Vec<Type>, String> {
    let names: Vec<&Value> = match value {
        Value::Array(names) => names.iter().collect(),
        one => vec![one],
    };
    names
        .into_iter()
        .map(|name| name.as_str().and_then(Type::parse))
        .collect::<Option<Vec<Type>>>()
        .ok_or_else(|| format!("type must name JSON types (or a list of them) at {at}"))
}

/// `pattern`: a regular expression of at most [`MAX_PATTERN_BYTES`], compiled.
fn pattern_of(value: &Value, at: &str) -> Result<(String, regex_lite::Regex), String> {
    let text = value
        .as_str()
        .ok_or_else(|| format!("pattern must be a string at {at}"))?;
    if text.len() > MAX_PATTERN_BYTES {
        return Err(format!("pattern is over {MAX_PATTERN_BYTES} bytes at {at}"));
    }
    let regex = regex_lite::Regex::new(text)
        .map_err(|error| format!("pattern {text:?} at {at} is not a regular expression: {error}"))?;
    Ok((text.to_string(), regex))
}

/// `$ref`: only a pointer into the same document (`#`, `#/…`), resolved once all is compiled.
fn reference_of(value: &Value, at: &str) -> Result<Reference, String> {
    let target = value.as_str().unwrap_or_default();
    let pointer = target
        .strip_prefix('#')
        .filter(|p| (p.is_empty() || p.starts_with('/')) && !p.contains('%'))
        .ok_or_else(|| {
            format!("$ref {value} at {at} is not supported: only \"#\" and \"#/…\" pointers into this document")
        })?;
    Ok(Reference::Pointer(pointer.to_string()))
}

/// JSON equality, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// One validation's budget and findings.
struct Run {
    work: usize,
    exhausted: bool,
    errors: Vec<String>,
}

impl Run {
    fn spend(&mut self, units: usize) -> bool {
        self.work += units;
        if self.work > MAX_WORK {
            self.exhausted = true;
        }
        !self.exhausted
    }
}

impl Compiled {
    /// The ways `value` breaks the schema (empty when it conforms), each naming where.
    pub fn validate(&self, value: &Value) -> Vec<String> {
        let mut run = Run {
            work: 0,
            exhausted: false,
            errors: Vec::new(),
        };
        self.check(0, value, "$", 0, &mut run, true);
        if run.exhausted {
            return vec![format!(
                "validating the arguments took more than this server's limit of {MAX_WORK} steps (or {MAX_VALIDATION_DEPTH} levels)"
            )];
        }
        run.errors
    }

    /// Whether `value` conforms to `node`; `report` says whether to record why not (a
    /// branch of `anyOf`, `oneOf` or `not` is only tried). Every finding is recorded, not just
    /// the first, so each check below runs even after one failed.
    fn check(&self, node: usize, value: &Value, path: &str, depth: usize, run: &mut Run, report: bool) -> bool {
        if depth > MAX_VALIDATION_DEPTH {
            run.exhausted = true;
        }
        if !run.spend(1) {
            return false;
        }
        let rules = match &self.nodes[node] {
            Node::Always(true) => return true,
            Node::Always(false) => {
                return fail(run, report, format!("{path}: no value is allowed here"));
            }
            Node::Rules(rules) => rules,
        };
        let at = At { path, depth, report };
        let mut ok = check_kind(rules, value, &at, run);
        ok &= match value {
            Value::Number(number) => check_bounds(rules, number.as_f64().unwrap_or(f64::NAN), &at, run),
            Value::String(text) => check_text(rules, text, &at, run),
            Value::Array(items) => self.check_items(rules, items, &at, run),
            Value::Object(fields) => self.check_fields(rules, fields, &at, run),
            _ => true,
        };
        if run.exhausted {
            return false;
        }
        ok &= self.check_subschemas(rules, value, &at, run);
        ok && !run.exhausted
    }

    /// `minItems`, `maxItems`, and each item against `prefixItems` (by position) or `items`.
    fn check_items(&self, rules: &Rules, items: &[Value], at: &At, run: &mut Run) -> bool {
        let (path, mut ok) = (at.path, true);
        let count = items.len() as u64;
        if let Some(min) = rules.min_items.filter(|min| count < *min) {
            ok = fail(run, at.report, format!("{path}: must hold at least {min} items"));
        }
        if let Some(max) = rules.max_items.filter(|max| count > *max) {
            ok = fail(run, at.report, format!("{path}: must hold at most {max} items"));
        }
        for (index, item) in items.iter().enumerate() {
            let node = rules.prefix.get(index).copied().or(rules.items);
            if let Some(node) = node
                && !self.check(node, item, &format!("{path}[{index}]"), at.depth + 1, run, at.report)
            {
                ok = false;
            }
            if run.exhausted {
                return false;
            }
        }
        ok
    }

    /// `required`, and each field against its `properties` entry or `additionalProperties`.
    fn check_fields(&self, rules: &Rules, fields: &serde_json::Map<String, Value>, at: &At, run: &mut Run) -> bool {
        let (path, mut ok) = (at.path, true);
        for name in &rules.required {
            if !fields.contains_key(name) {
                ok = fail(run, at.report, format!("{path}: required property '{name}' is missing"));
            }
        }
        for (name, item) in fields {
            let declared = rules.properties.iter().find(|(n, _)| n == name).map(|(_, node)| *node);
            let Some(node) = declared.or(rules.additional) else {
                continue;
            };
            if declared.is_none() && matches!(self.nodes[node], Node::Always(false)) {
                ok = fail(run, at.report, format!("{path}: property '{name}' is not allowed"));
                continue;
            }
            if !self.check(node, item, &format!("{path}.{name}"), at.depth + 1, run, at.report) {
                ok = false;
            }
            if run.exhausted {
                return false;
            }
        }
        ok
    }

    /// `$ref`, `allOf`, `anyOf`, `oneOf` and `not`: the value against other nodes as a whole.
    fn check_subschemas(&self, rules: &Rules, value: &Value, at: &At, run: &mut Run) -> bool {
        let (path, depth, mut ok) = (at.path, at.depth + 1, true);
        if let Some(Reference::Node(target)) = rules.reference
            && !self.check(target, value, path, depth, run, at.report)
        {
            ok = false;
        }
        for &node in &rules.all_of {
            if !self.check(node, value, path, depth, run, at.report) {
                ok = false;
            }
        }
        if !rules.any_of.is_empty() {
            let matched = rules
                .any_of
                .iter()
                .any(|&node| self.check(node, value, path, depth, run, false));
            if !matched {
                ok = fail(run, at.report, format!("{path}: matches none of the schemas of anyOf"));
            }
        }
        if !rules.one_of.is_empty() {
            let matched = rules
                .one_of
                .iter()
                .filter(|&&node| self.check(node, value, path, depth, run, false))
                .count();
            if matched != 1 {
                ok = fail(
                    run,
                    at.report,
                    format!("{path}: matches {matched} of the schemas of oneOf, not exactly one"),
                );
            }
        }
        if let Some(node) = rules.not
            && self.check(node, value, path, depth, run, false)
        {
            ok = fail(run, at.report, format!("{path}: must not match the schema of not"));
        }
        ok
    }
}

/// Where a check is: the value's path (`$[1].amount`), its depth, and whether findings are
/// recorded.
struct At<'a> {
    path: &'a str,
    depth: usize,
    report: bool,
}

/// `type`, `enum` and `const`, which apply to a value of any kind.
fn check_kind(rules: &Rules, value: &Value, at: &At, run: &mut Run) -> bool {
    let (path, mut ok) = (at.path, true);
    if let Some(types) = &rules.types
        && !types.iter().any(|t| t.matches(value))
    {
        let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
        ok = fail(
            run,
            at.report,
            format!("{path}: must be {}, got {}", names.join(" or "), type_of(value)),
        );
    }
    if let Some(allowed) = &rules.enumerated
        && !allowed.iter().any(|a| same(a, value))
    {
        ok = fail(
            run,
            at.report,
            format!("{path}: must be one of {}", Value::Array(allowed.clone())),
        );
    }
    if let Some(constant) = &rules.constant
        && !same(constant, value)
    {
        ok = fail(run, at.report, format!("{path}: must be {constant}"));
    }
    ok
}

/// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`.
fn check_bounds(rules: &Rules, n: f64, at: &At, run: &mut Run) -> bool {
    let bounds = [
        (
            rules.minimum,
            n >= rules.minimum.unwrap_or(f64::NEG_INFINITY),
            "at least",
        ),
        (rules.maximum, n <= rules.maximum.unwrap_or(f64::INFINITY), "at most"),
        (
            rules.exclusive_minimum,
            n > rules.exclusive_minimum.unwrap_or(f64::NEG_INFINITY),
            "more than",
        ),
        (
            rules.exclusive_maximum,
            n < rules.exclusive_maximum.unwrap_or(f64::INFINITY),
            "less than",
        ),
    ];
    let mut ok = true;
    for (bound, within, words) in bounds {
        if let Some(bound) = bound
            && !within
        {
            ok = fail(run, at.report, format!("{}: must be {words} {bound}", at.path));
        }
    }
    ok
}

/// `minLength`, `maxLength` (in characters) and `pattern` (whose work is counted by length).
fn check_text(rules: &Rules, text: &str, at: &At, run: &mut Run) -> bool {
    let (path, mut ok) = (at.path, true);
    if rules.min_length.is_some() || rules.max_length.is_some() {
        let length = text.chars().count() as u64;
        if let Some(min) = rules.min_length.filter(|min| length < *min) {
            ok = fail(
                run,
                at.report,
                format!("{path}: must be at least {min} characters long"),
            );
        }
        if let Some(max) = rules.max_length.filter(|max| length > *max) {
            ok = fail(run, at.report, format!("{path}: must be at most {max} characters long"));
        }
    }
    if let Some((source, regex)) = &rules.pattern {
        if !run.spend(text.len() / 16) {
            return false;
        }
        if !regex.is_match(text) {
            ok = fail(run, at.report, format!("{path}: does not match pattern {source:?}"));
        }
    }
    ok
}

/// Records a finding (when reporting, up to [`MAX_ERRORS`]); always answers `false`.
fn fail(run: &mut Run, report: bool, message: String) -> bool {
    if report && run.errors.len() < MAX_ERRORS {
        run.errors.push(message);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::compile;
    use serde_json::json;

    #[test]
    fn enforces_the_subset() {
        let schema = compile(&json!({
            "type": "array",
            "items": [{ "type": "string", "pattern": "^[a-z]+$" }, { "$ref": "#/$defs/opts" }],
            "minItems": 1,
            "$defs": { "opts": { "type": "object", "required": ["n"], "additionalProperties": false,
                                 "properties": { "n": { "type": "integer", "minimum": 1, "maximum": 5 } } } }
        }))
        .unwrap();
        assert!(schema.validate(&json!(["abc", { "n": 3 }])).is_empty());
        assert!(schema.validate(&json!(["abc", { "n": 3.0 }])).is_empty());
        assert_eq!(
            schema.validate(&json!(["ABC", { "n": 9, "x": 1 }])),
            [
                "$[0]: does not match pattern \"^[a-z]+$\"",
                "$[1].n: must be at most 5",
                "$[1]: property 'x' is not allowed"
            ]
        );
        assert_eq!(schema.validate(&json!([])), ["$: must hold at least 1 items"]);
        assert_eq!(
            schema.validate(&json!(["a", {}])),
            ["$[1]: required property 'n' is missing"]
        );
    }

    #[test]
    fn refuses_what_it_cannot_enforce() {
        for (schema, said) in [
            (json!({ "type": "array", "uniqueItems": true }), "\"uniqueItems\""),
            (json!({ "$ref": "https://example.com/s.json" }), "only \"#\""),
            (json!({ "$ref": "#/$defs/missing" }), "does not name a subschema"),
            (json!({ "type": "strin" }), "type must name JSON types"),
            (json!({ "pattern": "(" }), "not a regular expression"),
            (json!(3), "object or a boolean"),
            (json!({ "properties": { "a": { "$id": "x" } } }), "\"$id\""),
        ] {
            let error = compile(&schema).unwrap_err();
            assert!(error.contains(said), "{schema}: {error}");
        }
        let mut deep = json!({ "type": "string" });
        for _ in 0..40 {
            deep = json!({ "items": deep });
        }
        assert!(compile(&deep).unwrap_err().contains("nest more than"));
    }

    #[test]
    fn a_self_referring_schema_stops_at_its_budget() {
        let schema = compile(&json!({ "allOf": [{ "$ref": "#" }] })).unwrap();
        let errors = schema.validate(&json!([1]));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("limit"), "{errors:?}");
        let schema = compile(&json!({ "anyOf": [{ "$ref": "#" }, { "$ref": "#" }] })).unwrap();
        assert!(schema.validate(&json!([1]))[0].contains("limit"));
    }
}
