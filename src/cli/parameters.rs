//! A run's parameters as the parser resolved them, for its start record: every option of the
//! subcommand that has a value (given on the command line, in the config file or the
//! environment, or its default), by its long name, and which of them the user set. Values are
//! the text the parser read (flags are booleans); secrets come only from files
//! (`--secret-file`), so the path is kept and the secret is never read here.

use clap::{ArgAction, ArgMatches, Command, parser::ValueSource};
use serde_json::{Map, Value};

/// The parameters of subcommand `sub` of `root` as `matches` (its own matches) resolved them,
/// and the long names the user set.
pub(crate) fn resolved(
    root: &Command,
    sub: &str,
    matches: &ArgMatches,
) -> (Map<String, Value>, Vec<String>) {
    let mut parameters = Map::new();
    let mut set = Vec::new();
    let Some(command) = root.find_subcommand(sub) else {
        return (parameters, set);
    };
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        let (Some(source), Some(name)) = (matches.value_source(id), arg.get_long()) else {
            continue;
        };
        let Some(raw) = matches.get_raw(id) else {
            continue;
        };
        let texts: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        let value = match (arg.get_action(), texts.as_slice()) {
            (ArgAction::SetTrue | ArgAction::SetFalse, [one]) => one
                .parse::<bool>()
                .map_or_else(|_| Value::from(one.clone()), Value::Bool),
            (_, [one]) => Value::from(one.clone()),
            _ => Value::from(texts),
        };
        parameters.insert(name.to_string(), value);
        if source != ValueSource::DefaultValue {
            set.push(name.to_string());
        }
    }
    (parameters, set)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_option_with_a_value_is_named_and_the_ones_given_are_set() {
        let root = crate::cli::Cli::command();
        let matches = root.clone().get_matches_from([
            "ringblast",
            "send",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "10kpps",
            "--json",
        ]);
        let (_, sub) = matches.subcommand().unwrap();
        let (parameters, set) = resolved(&root, "send", sub);
        assert_eq!(parameters["to"], "127.0.0.1:9");
        assert_eq!(parameters["rate"], "10kpps");
        assert_eq!(parameters["json"], true);
        assert_eq!(parameters["interval"], "1s", "a default is a parameter too");
        assert!(!parameters.contains_key("count"), "no value, no entry");
        let mut set = set;
        set.sort();
        assert_eq!(set, ["json", "rate", "to"].map(String::from));
    }
}
