//! `--config FILE`: a TOML file whose keys are the long options of `send`, `sink` and `pair`
//! (dashes may be written as underscores), for long-running daemons.
//!
//! Precedence is defaults < file < environment (`RINGBLAST_*`) < command line. The file is
//! applied before clap parses: every key becomes `--key=value` unless the same option is already
//! on the command line or set in its environment variable. Each value goes through the option's
//! own parser first, so an unknown key, a bad unit or a wrong type is reported with the file,
//! line and key, and exits 2. So are two keys clap refuses together (`duration` and `count`);
//! an option on the command line or in the environment also overrides the file's keys it clashes
//! with. A `[send]`, `[sink]` or `[pair]` table holds keys for that subcommand alone, which win
//! over top-level keys; any other table is refused with that hint. Hidden options are accepted
//! but never listed among the known keys.

use std::{
    ffi::{OsStr, OsString},
    path::Path,
};

use clap::{Arg, ArgAction, CommandFactory};
use toml::de::{DeTable, DeValue};

use crate::{cli::Cli, error::Error};

const SUBCOMMANDS: [&str; 3] = ["send", "sink", "pair"];

/// Returns `argv` with the config file's settings inserted (unchanged without `--config`).
pub fn apply(argv: Vec<OsString>) -> Result<Vec<OsString>, Error> {
    let Some(sub_at) = argv
        .iter()
        .position(|a| SUBCOMMANDS.iter().any(|s| a == *s))
    else {
        return Ok(argv);
    };
    let path = config_path(&argv[sub_at + 1..]).or_else(|| std::env::var_os("RINGBLAST_CONFIG"));
    let Some(path) = path else { return Ok(argv) };
    let sub = argv[sub_at].to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Usage(format!(
            "cannot read config file {}: {e}",
            Path::new(&path).display()
        ))
    })?;
    let inserted = settings(
        &sub,
        &text,
        &Path::new(&path).display().to_string(),
        &argv[sub_at + 1..],
    )?;
    let mut out = argv;
    for (i, arg) in inserted.into_iter().enumerate() {
        out.insert(sub_at + 1 + i, arg);
    }
    Ok(out)
}

fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut iter = args.iter();
    while let Some(a) = iter.next() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return iter.next().cloned();
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    None
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn on_command_line(args: &[OsString], long: &str) -> bool {
    let flag = format!("--{long}");
    let with_value = format!("--{long}=");
    args.iter().any(|a| {
        let s = a.to_string_lossy();
        s == flag || s.starts_with(&with_value)
    })
}

/// One key of the file that applies to the subcommand being run.
struct Entry<'a> {
    /// The key as written (`max_series`), for messages.
    key: &'a str,
    /// The long option (`max-series`).
    name: String,
    line: usize,
    value: &'a DeValue<'a>,
}

/// The top-level keys, then the keys of the `[sub]` table, which win over top-level ones.
/// Tables for the other subcommands are checked against their own options (so a typo shows
/// whichever role starts first) and otherwise left alone.
fn entries<'a>(
    table: &'a DeTable<'a>,
    text: &str,
    file: &str,
    root: &clap::Command,
    sub: &str,
) -> Result<Vec<Entry<'a>>, Error> {
    let mut top = Vec::new();
    let mut own = Vec::new();
    for (key, value) in table.iter() {
        let line = line_of(text, key.span().start);
        let section = key.get_ref().as_ref();
        match value.get_ref() {
            DeValue::Table(inner) if SUBCOMMANDS.contains(&section) => {
                let keys = inner.iter().map(|(k, v)| Entry {
                    key: k.get_ref().as_ref(),
                    name: k.get_ref().replace('_', "-"),
                    line: line_of(text, k.span().start),
                    value: v.get_ref(),
                });
                if section == sub {
                    own.extend(keys);
                } else {
                    let cmd = subcommand(root, section)?;
                    for entry in keys {
                        to_arg(&cmd, section, &entry, file, &[])?;
                    }
                }
            }
            DeValue::Table(_) if option(&subcommand(root, sub)?, section).is_none() => {
                return Err(Error::Usage(format!(
                    "{file}:{line}: table `[{section}]` is not a subcommand; put keys for one \
                     subcommand under [send], [sink] or [pair], and shared keys at the top"
                )));
            }
            _ => top.push(Entry {
                key: section,
                name: section.replace('_', "-"),
                line,
                value: value.get_ref(),
            }),
        }
    }
    top.retain(|t| !own.iter().any(|o| o.name == t.name));
    top.extend(own);
    Ok(top)
}

fn subcommand(root: &clap::Command, sub: &str) -> Result<clap::Command, Error> {
    root.find_subcommand(sub)
        .cloned()
        .ok_or_else(|| Error::Usage(format!("unknown subcommand {sub}")))
}

/// The option `--name` of `cmd`, if the file may set it.
fn option<'c>(cmd: &'c clap::Command, name: &str) -> Option<&'c Arg> {
    let name = name.replace('_', "-");
    cmd.get_arguments().find(|a| {
        a.get_long() == Some(name.as_str()) && !matches!(name.as_str(), "config" | "help")
    })
}

/// Whether the command line or the option's environment variable sets `arg` already.
fn set_outside_the_file(arg: &Arg, cli_args: &[OsString]) -> bool {
    arg.get_long()
        .is_some_and(|long| on_command_line(cli_args, long))
        || arg
            .get_env()
            .is_some_and(|env| std::env::var_os(env).is_some())
}

/// Two options that clap refuses together, in either direction.
fn clash(cmd: &clap::Command, a: &Arg, b: &Arg) -> bool {
    cmd.get_arg_conflicts_with(a)
        .iter()
        .any(|c| c.get_id() == b.get_id())
        || cmd
            .get_arg_conflicts_with(b)
            .iter()
            .any(|c| c.get_id() == a.get_id())
}

/// The `--key=value` arguments the file contributes to subcommand `sub`.
pub(crate) fn settings(
    sub: &str,
    text: &str,
    file: &str,
    cli_args: &[OsString],
) -> Result<Vec<OsString>, Error> {
    let table = DeTable::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        Error::Usage(format!(
            "{file}:{line}: invalid TOML: {}",
            e.message().trim()
        ))
    })?;
    let root = root_command();
    let cmd = subcommand(root, sub)?;
    let entries = entries(table.get_ref(), text, file, root, sub)?;
    let mut out = Vec::new();
    let mut used: Vec<(&Entry<'_>, &Arg)> = Vec::new();
    for entry in &entries {
        let Some(arg) = to_arg(&cmd, sub, entry, file, cli_args)? else {
            continue;
        };
        let opt = option(&cmd, &entry.name).expect("to_arg found it");
        // An option given on the command line or in the environment also overrides the file's
        // options it clashes with (`--count` there drops the file's `duration`).
        let overridden = cmd
            .get_arguments()
            .any(|other| set_outside_the_file(other, cli_args) && clash(&cmd, opt, other));
        if overridden {
            continue;
        }
        if let Some((other, _)) = used.iter().find(|(_, a)| clash(&cmd, a, opt)) {
            let (first, second) = if other.line <= entry.line {
                (*other, entry)
            } else {
                (entry, *other)
            };
            return Err(Error::Usage(format!(
                "{file}:{}: key `{}` cannot be used with key `{}` (line {}); keep one of them",
                second.line, second.key, first.key, first.line
            )));
        }
        used.push((entry, opt));
        out.extend(arg);
    }
    Ok(out)
}

/// Runs the option's own parser on `flag` (`--name=value`), alone, so the error is about it.
/// The one-option commands are built once per thread and reused.
fn check_value(sub: &str, arg: &Arg, flag: &str) -> Result<(), String> {
    thread_local! {
        static CHECKERS: std::cell::RefCell<std::collections::HashMap<String, clap::Command>> =
            Default::default();
    }
    CHECKERS.with_borrow_mut(|checkers| {
        let key = format!("{sub} {}", arg.get_id());
        let cmd = checkers.entry(key).or_insert_with(|| {
            // Alone, the option's relations name options that are not there: clear them (a
            // debug build of clap asserts that every named option exists).
            clap::Command::new("ringblast").arg(
                arg.clone()
                    .required(false)
                    .conflicts_with(clap::builder::Resettable::Reset)
                    .requires(clap::builder::Resettable::Reset)
                    .env(OsStr::new("RINGBLAST_CONFIG_CHECK_UNUSED")),
            )
        });
        cmd.try_get_matches_from_mut(["ringblast", flag])
            .map(drop)
            .map_err(|e| clap_message(&e))
    })
}

/// The whole command tree, built once (building it costs more than parsing a small file).
fn root_command() -> &'static clap::Command {
    static ROOT: std::sync::OnceLock<clap::Command> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let mut root = Cli::command();
        root.build();
        root
    })
}

/// Checks one key against `cmd` (known, the right type, a value its parser takes) and returns
/// its `--key=value` argument: none for `false` flags and for options set outside the file.
fn to_arg(
    cmd: &clap::Command,
    sub: &str,
    entry: &Entry<'_>,
    file: &str,
    cli_args: &[OsString],
) -> Result<Option<Option<OsString>>, Error> {
    let name = &entry.name;
    let fail =
        |msg: String| Error::Usage(format!("{file}:{}: key `{}`: {msg}", entry.line, entry.key));
    let arg = option(cmd, name).ok_or_else(|| {
        let known: Vec<String> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(Arg::get_long)
            .filter(|l| !matches!(*l, "config" | "help" | "version"))
            .map(|l| l.replace('-', "_"))
            .collect();
        fail(format!(
            "unknown key for `ringblast {sub}`; known keys: {}",
            known.join(", ")
        ))
    })?;
    if set_outside_the_file(arg, cli_args) {
        return Ok(None);
    }
    let is_flag = matches!(arg.get_action(), ArgAction::SetTrue);
    match (is_flag, entry.value) {
        (true, DeValue::Boolean(true)) => Ok(Some(Some(OsString::from(format!("--{name}"))))),
        (true, DeValue::Boolean(false)) => Ok(Some(None)),
        (true, other) => Err(fail(format!(
            "expected true or false, found a {}",
            other.type_str()
        ))),
        (false, v) => {
            let text = scalar(v).map_err(fail)?;
            check_value(sub, arg, &format!("--{name}={text}")).map_err(fail)?;
            Ok(Some(Some(OsString::from(format!("--{name}={text}")))))
        }
    }
}

fn scalar(v: &DeValue<'_>) -> Result<String, String> {
    Ok(match v {
        DeValue::String(s) => s.to_string(),
        DeValue::Integer(i) => i.as_str().to_string(),
        DeValue::Float(f) => f.as_str().to_string(),
        DeValue::Array(items) => items
            .iter()
            .map(|i| match i.get_ref() {
                DeValue::Integer(n) => Ok(n.as_str().to_string()),
                DeValue::String(s) => Ok(s.to_string()),
                other => Err(format!(
                    "list items must be numbers or strings, found a {}",
                    other.type_str()
                )),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        other => {
            return Err(format!(
                "expected a string or a number, found a {}",
                other.type_str()
            ));
        }
    })
}

fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn file_values_fill_in_what_the_command_line_did_not_set() {
        let text = "to = \"127.0.0.1:9\"\nrate = \"250kpps\"\nsize = 1200\njson = true\nhugepages = false\ncpus = [0, 1]\n";
        let got = settings("send", text, "f.toml", &args(&["--rate", "1kpps"])).unwrap();
        let got: Vec<String> = got
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            ["--cpus=0,1", "--json", "--size=1200", "--to=127.0.0.1:9"]
        );
    }

    #[test]
    fn unknown_keys_bad_units_and_wrong_types_name_file_line_and_key() {
        let cases = [
            (
                "to = \"127.0.0.1:9\"\n\nfrobs = 3\n",
                "f.toml:3: key `frobs`: unknown key",
            ),
            (
                "rate = \"10furlongs\"\n",
                "f.toml:1: key `rate`: invalid value '10furlongs'",
            ),
            (
                "size = true\n",
                "f.toml:1: key `size`: expected a string or a number, found a boolean",
            ),
            ("size = 8.5\n", "f.toml:1: key `size`: invalid value '8.5'"),
            (
                "json = \"yes\"\n",
                "f.toml:1: key `json`: expected true or false, found a string",
            ),
            (
                "size = { a = 1 }\n",
                "f.toml:1: key `size`: expected a string or a number, found a table",
            ),
            ("x = = 1\n", "f.toml:1: invalid TOML"),
        ];
        for (text, want) in cases {
            let err = settings("send", text, "f.toml", &[]).unwrap_err();
            assert!(err.to_string().starts_with(want), "{text:?}: {err}");
            assert_eq!(err.exit_code(), 2);
        }
    }

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_clash_inside_the_file_names_both_keys_and_lines() {
        let text = "to = \"127.0.0.1:9\"\nduration = \"10s\"\n\ncount = 100\n";
        let err = settings("send", text, "f.toml", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "f.toml:4: key `count` cannot be used with key `duration` (line 2); keep one of them"
        );
        assert_eq!(err.exit_code(), 2);
        // Inside a table too, and across the table and the top level.
        let text = "duration = \"10s\"\n[send]\ncount = 100\n";
        let err = settings("send", text, "f.toml", &[]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("f.toml:3: key `count` cannot be used with key `duration` (line 1)"),
            "{err}"
        );
    }

    #[test]
    fn the_command_line_overrides_the_file_key_it_clashes_with() {
        let text = "to = \"127.0.0.1:9\"\nduration = \"10s\"\n";
        let got = settings("send", text, "f.toml", &args(&["--count", "5"])).unwrap();
        assert_eq!(strings(got), ["--to=127.0.0.1:9"]);
    }

    #[test]
    fn subcommand_tables_apply_to_their_subcommand_and_win_over_top_level_keys() {
        let text = "queues = 2\njson = true\n[send]\nto = \"127.0.0.1:9\"\nqueues = 4\n\
                    [sink]\nlisten = \"127.0.0.1:9\"\n";
        let send = strings(settings("send", text, "f.toml", &[]).unwrap());
        assert_eq!(send, ["--json", "--queues=4", "--to=127.0.0.1:9"]);
        let sink = strings(settings("sink", text, "f.toml", &[]).unwrap());
        assert_eq!(sink, ["--json", "--queues=2", "--listen=127.0.0.1:9"]);
        // A bad key in another subcommand's table is caught whichever role starts.
        let bad = "[send]\nrate = \"fast\"\n";
        let err = settings("sink", bad, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("f.toml:2: key `rate`: invalid value 'fast'"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_table_is_refused_with_the_tables_that_exist() {
        let err = settings("send", "[sned]\nrate = \"1kpps\"\n", "f.toml", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "f.toml:1: table `[sned]` is not a subcommand; put keys for one subcommand under \
             [send], [sink] or [pair], and shared keys at the top"
        );
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn hidden_options_are_not_listed_as_known_keys() {
        let err = settings("send", "frobs = 1\n", "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("known keys: to, size,"), "{err}");
        assert!(err.contains("rate") && !err.contains("first_seq"), "{err}");
    }

    #[test]
    fn config_path_is_found_in_either_spelling() {
        assert_eq!(
            config_path(&args(&["--config", "a.toml"])),
            Some("a.toml".into())
        );
        assert_eq!(
            config_path(&args(&["--json", "--config=b.toml"])),
            Some("b.toml".into())
        );
        assert_eq!(config_path(&args(&["--json"])), None);
    }
}
