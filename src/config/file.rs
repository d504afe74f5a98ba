//! `--config FILE`: a TOML file whose keys are the long options of `send`, `sink` and `pair`
//! (dashes may be written as underscores), for long-running daemons.
//!
//! Precedence is defaults < file < environment (`RINGBLAST_*`) < command line. The file is
//! applied before clap parses: every key becomes `--key=value` unless the same option is already
//! on the command line or set in its environment variable. Each value goes through the option's
//! own parser first, so an unknown key, a bad unit or a wrong type is reported with the file,
//! line and key, and exits 2.

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
    let cmd = root_command()
        .find_subcommand(sub)
        .ok_or_else(|| Error::Usage(format!("unknown subcommand {sub}")))?;
    let mut out = Vec::new();
    for (key, value) in table.get_ref().iter() {
        let line = line_of(text, key.span().start);
        let name = key.get_ref().replace('_', "-");
        let fail =
            |msg: String| Error::Usage(format!("{file}:{line}: key `{}`: {msg}", key.get_ref()));
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()) && name != "config" && name != "help")
            .ok_or_else(|| {
                let known: Vec<String> = cmd
                    .get_arguments()
                    .filter_map(Arg::get_long)
                    .filter(|l| !matches!(*l, "config" | "help" | "version"))
                    .map(|l| l.replace('-', "_"))
                    .collect();
                fail(format!(
                    "unknown key for `ringblast {sub}`; known keys: {}",
                    known.join(", ")
                ))
            })?;
        if on_command_line(cli_args, &name)
            || arg
                .get_env()
                .is_some_and(|env| std::env::var_os(env).is_some())
        {
            continue;
        }
        let is_flag = matches!(arg.get_action(), ArgAction::SetTrue);
        match (is_flag, value.get_ref()) {
            (true, DeValue::Boolean(true)) => out.push(OsString::from(format!("--{name}"))),
            (true, DeValue::Boolean(false)) => {}
            (true, other) => {
                return Err(fail(format!(
                    "expected true or false, found a {}",
                    other.type_str()
                )));
            }
            (false, v) => {
                let text = scalar(v).map_err(fail)?;
                check_value(sub, arg, &format!("--{name}={text}")).map_err(fail)?;
                out.push(OsString::from(format!("--{name}={text}")));
            }
        }
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
