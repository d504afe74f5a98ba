//! The published JSON Schema (docs/schema/) as the tests hold ringblast to it: every JSON line
//! a test reads from ringblast goes through [`record`] (or [`records`], [`parsed`]), which parses
//! it and validates it, so a record that strays from the schema fails the test that made it.

use std::sync::OnceLock;

use serde_json::Value;

/// The schema file every record of this version follows.
pub const SCHEMA_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/docs/schema/ringblast-1.schema.json"
);

/// The schema as JSON.
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let text = std::fs::read_to_string(SCHEMA_FILE).expect("read the JSON Schema");
        serde_json::from_str(&text).expect("the JSON Schema is JSON")
    })
}

/// The version stamp every record carries in `"schema"` (the schema's own `const`).
pub fn version() -> &'static str {
    schema()["properties"]["schema"]["const"]
        .as_str()
        .expect("the schema names its version")
}

fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::draft202012::new(schema()).expect("the JSON Schema is a valid draft 2020-12")
    })
}

/// Every way `v` breaks the schema, one line each (`path: message`); empty when it follows it.
pub fn violations(v: &Value) -> Vec<String> {
    validator()
        .iter_errors(v)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Panics unless `v` follows the schema.
pub fn assert_valid(v: &Value) {
    let errors = violations(v);
    assert!(
        errors.is_empty(),
        "a JSON line breaks {SCHEMA_FILE}:\n  {}\nline: {v}",
        errors.join("\n  ")
    );
}

/// One JSON line of ringblast's output, parsed and validated (panics on either failing).
pub fn record(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
    assert_valid(&v);
    v
}

/// Every line of `stdout` (JSON Lines), parsed and validated.
pub fn records(stdout: &str) -> Vec<Value> {
    stdout.lines().map(record).collect()
}

/// A line that may not be JSON (mixed output): `None` when it is not, else validated.
pub fn parsed(line: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(line).ok()?;
    assert_valid(&v);
    Some(v)
}
