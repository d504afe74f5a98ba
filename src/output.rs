//! Where a run's lines go, following iperf3 and ripgrep: human-readable lines on stdout, or on
//! stderr when `--json` gives stdout to JSON Lines; errors always on stderr. A closed pipe on
//! either stream never panics: it is remembered, the run stops as if interrupted, and the
//! process ends quietly with the status a shell shows for SIGPIPE ([`EXIT_BROKEN_PIPE`]).

use std::{
    fmt,
    io::{self, Write},
    sync::atomic::{AtomicBool, Ordering::Relaxed},
};

/// The version of the JSON Lines records, stamped into each as `"schema"`. Additions keep it;
/// a renamed, removed or retyped stable field makes a new one (and a new schema file).
pub(crate) const SCHEMA_VERSION: &str = "ringblast/1";

/// The JSON Schema (draft 2020-12) of every record of [`SCHEMA_VERSION`].
pub(crate) const JSON_SCHEMA: &str = include_str!("../docs/schema/ringblast-1.schema.json");

/// Exit status after a closed pipe: 128 + SIGPIPE, what a shell reports for `cmd | head`.
pub const EXIT_BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

static JSON_ON_STDOUT: AtomicBool = AtomicBool::new(false);
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Gives stdout to JSON Lines (`--json`): human lines move to stderr.
pub(crate) fn json_on_stdout(json: bool) {
    JSON_ON_STDOUT.store(json, Relaxed);
}

/// A write failed because the reader went away.
pub fn closed() -> bool {
    CLOSED.load(Relaxed)
}

fn write_to(mut out: impl Write, args: fmt::Arguments<'_>) {
    if closed() {
        return;
    }
    let result = out.write_fmt(args).and_then(|()| out.flush());
    if let Err(e) = result
        && e.kind() == io::ErrorKind::BrokenPipe
    {
        CLOSED.store(true, Relaxed);
    }
}

/// Writes one human-readable line (a newline is added).
pub(crate) fn human(args: fmt::Arguments<'_>) {
    if JSON_ON_STDOUT.load(Relaxed) {
        write_to(io::stderr().lock(), format_args!("{args}\n"));
    } else {
        write_to(io::stdout().lock(), format_args!("{args}\n"));
    }
}

/// Writes human-readable text as it is (it carries its own newlines).
pub(crate) fn human_text(text: &str) {
    if JSON_ON_STDOUT.load(Relaxed) {
        write_to(io::stderr().lock(), format_args!("{text}"));
    } else {
        write_to(io::stdout().lock(), format_args!("{text}"));
    }
}

/// Writes one JSON Line to stdout, stamped with the schema version it follows.
pub(crate) fn json_line(value: &serde_json::Value) {
    let mut record = value.clone();
    if let serde_json::Value::Object(fields) = &mut record {
        fields.insert("schema".into(), SCHEMA_VERSION.into());
    }
    write_to(io::stdout().lock(), format_args!("{record}\n"));
}

/// Writes a whole document to stdout as it is (`report -o -`); a closed pipe is remembered as
/// for any line.
pub(crate) fn document(text: &str) {
    write_to(io::stdout().lock(), format_args!("{text}"));
}

/// Writes one error line to stderr.
pub fn error_line(args: fmt::Arguments<'_>) {
    write_to(io::stderr().lock(), format_args!("{args}\n"));
}

/// `say!("...", args)`: one human-readable line, see [`human`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::output::human(format_args!($($arg)*)) };
}
