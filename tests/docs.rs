//! The documentation against the program: every `--flag` that README.md and docs/*.md mention
//! exists in some subcommand's `--help`, every `ringblast ...` command line in their code blocks
//! parses (with clap alone, `Cli::try_parse_from`: nothing runs), every relative link leads to a
//! file and heading that exist, and the README still shows the command CI runs.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use clap::{CommandFactory, Parser};
use ringblast::cli::Cli;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One documentation page: its path relative to the repository and its text.
struct Page {
    path: String,
    text: String,
}

fn page(rel: &str) -> Page {
    let text = std::fs::read_to_string(Path::new(ROOT).join(rel))
        .unwrap_or_else(|e| panic!("reading {rel}: {e}"));
    Page {
        path: rel.to_string(),
        text,
    }
}

/// README.md and every docs/*.md, in a fixed order.
fn pages() -> Vec<Page> {
    let mut names: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    let mut pages = vec![page("README.md")];
    pages.extend(names.iter().map(|n| page(&format!("docs/{n}"))));
    pages
}

/// A page split into its fenced code blocks' lines (with their line numbers) and its prose
/// paragraphs (joined, so an inline code span may run over a line break).
struct Parts {
    code: Vec<(usize, String)>,
    paragraphs: Vec<(usize, String)>,
}

fn split(text: &str) -> Parts {
    let mut parts = Parts {
        code: Vec::new(),
        paragraphs: Vec::new(),
    };
    let mut in_code = false;
    let mut paragraph: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            parts.paragraphs.extend(paragraph.take());
            continue;
        }
        if in_code {
            parts.code.push((number, line.to_string()));
        } else if line.trim().is_empty() {
            parts.paragraphs.extend(paragraph.take());
        } else {
            let p = paragraph.get_or_insert((number, String::new()));
            p.1.push_str(line);
            p.1.push('\n');
        }
    }
    parts.paragraphs.extend(paragraph);
    parts
}

/// The inline code spans of a paragraph (single backticks, as every page uses).
fn code_spans(paragraph: &str) -> Vec<String> {
    paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.replace('\n', " "))
        .collect()
}

/// The `--long-flag` tokens in `s`.
fn long_flags(s: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find("--") {
        let before = rest[..at].chars().last();
        let tail = &rest[at + 2..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tail.len());
        let name = tail[..len].trim_end_matches('-');
        if before.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-')
            && name.starts_with(|c: char| c.is_ascii_lowercase())
        {
            flags.push(format!("--{name}"));
        }
        rest = &tail[len..];
    }
    flags
}

/// The prefixes that make a line or a code span a ringblast command line.
const COMMAND_PREFIXES: [&str; 2] = ["ringblast ", "cargo run --release -- "];

fn command_args(s: &str) -> Option<&str> {
    COMMAND_PREFIXES.iter().find_map(|p| s.strip_prefix(p))
}

/// Where each documented `--flag` is mentioned: in an inline code span that starts with the flag
/// (`--gso N`) or with a ringblast command line, or on a command line in a code block. Other
/// tools' flags (`cargo test --release`, `docker compose up -d --build`) are never in either.
fn documented_flags(pages: &[Page]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for page in pages {
        let parts = split(&page.text);
        for (number, paragraph) in &parts.paragraphs {
            for span in code_spans(paragraph) {
                let span = span.trim();
                let text = if span.starts_with("--") {
                    span
                } else if let Some(args) = command_args(span) {
                    args
                } else {
                    continue;
                };
                for flag in long_flags(text) {
                    found.push((flag, format!("{}:{number} `{span}`", page.path)));
                }
            }
        }
        for (number, line, command) in command_lines(&parts.code) {
            for flag in long_flags(&command) {
                found.push((flag, format!("{}:{number} {}", page.path, line.trim())));
            }
        }
    }
    found
}

/// Every long flag (and visible alias) that `ringblast --help` and each subcommand's `--help`
/// list, from the built binary: only the option lines, not flags named in descriptions.
fn help_flags() -> BTreeSet<String> {
    let mut invocations = vec![vec!["--help".to_string()]];
    for sub in Cli::command().get_subcommands() {
        invocations.push(vec![sub.get_name().to_string(), "--help".to_string()]);
    }
    let mut flags = BTreeSet::new();
    for args in invocations {
        let out = Command::new(env!("CARGO_BIN_EXE_ringblast"))
            .args(&args)
            .env_remove("RINGBLAST_CONFIG")
            .output()
            .expect("running ringblast --help");
        assert!(out.status.success(), "ringblast {args:?} failed");
        let help = String::from_utf8(out.stdout).expect("help is UTF-8");
        for line in help.lines() {
            let line = line.trim();
            if line.starts_with('-') {
                for token in line.split_whitespace() {
                    if token.starts_with("--") {
                        flags.insert(token.trim_end_matches(',').to_string());
                    } else if !token.starts_with('-') && !token.starts_with('<') {
                        break;
                    }
                }
            }
            for marker in ["[alias: ", "[aliases: "] {
                if let Some(at) = line.find(marker) {
                    let list = &line[at + marker.len()..];
                    let list = &list[..list.find(']').unwrap_or(list.len())];
                    flags.extend(list.split(", ").map(|a| a.trim().to_string()));
                }
            }
        }
    }
    flags
}

/// The ringblast command lines of code blocks: `(line number, line, arguments)`, a line that
/// ends in `\` or is followed by an indented `[--...` or `--...` line joined with the next.
fn command_lines(code: &[(usize, String)]) -> Vec<(usize, String, String)> {
    let mut commands = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let (number, line) = &code[i];
        i += 1;
        let Some(args) = command_args(line.trim_start()) else {
            continue;
        };
        let mut args = args.trim_end().trim_end_matches('\\').to_string();
        let mut continued = line.trim_end().ends_with('\\');
        while let Some((_, next)) = code.get(i) {
            let starts_indented = next.starts_with(' ')
                && (next.trim_start().starts_with("[--") || next.trim_start().starts_with("--"));
            if !(continued || starts_indented) {
                break;
            }
            continued = next.trim_end().ends_with('\\');
            args.push(' ');
            args.push_str(next.trim().trim_end_matches('\\'));
            i += 1;
        }
        commands.push((*number, line.clone(), args));
    }
    commands
}

/// Sample values for the placeholders the pages' synopses use (`--queues N`).
const PLACEHOLDERS: [(&str, &str); 7] = [
    ("N", "2"),
    ("D", "10s"),
    ("R", "100kpps"),
    ("S", "64"),
    ("B", "32"),
    ("ADDR:PORT", "127.0.0.1:9977"),
    ("A:P", "127.0.0.1:7000"),
];

/// Host names in the examples, replaced by an address: `--to` resolves a HOST:PORT while it
/// parses, and this test must not depend on a name service.
const HOSTS: [(&str, &str); 1] = [("sink-host:", "127.0.0.1:")];

/// Split a command line into the words a shell would pass: quotes removed, a trailing comment,
/// `&` and anything after a pipe, redirection, `&&` or `;` dropped. Synopsis groups: `[--a X]`
/// is taken as written, `[--a X | --b Y]` as its first choice, and a group that is no option
/// (`[send options]`, which stands for a list given elsewhere) is left out.
fn shell_words(args: &str) -> Vec<String> {
    let mut args = args.to_string();
    for (host, addr) in HOSTS {
        args = args.replace(host, addr);
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = args.chars().peekable();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '[' if !in_word => {
                let group: String = chars.by_ref().take_while(|&g| g != ']').collect();
                let choice = group.split(" | ").next().unwrap_or("").trim();
                if choice.starts_with("--") {
                    words.extend(choice.split_whitespace().map(String::from));
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if let Some(end) = words
        .iter()
        .position(|w| ["|", ">", ">>", "&&", ";", "&", "2>&1"].contains(&w.as_str()))
    {
        words.truncate(end);
    }
    words
        .into_iter()
        .map(|w| {
            PLACEHOLDERS
                .iter()
                .find(|(p, _)| *p == w)
                .map_or(w, |(_, v)| v.to_string())
        })
        .collect()
}

/// The documented flags that no `--help` lists, each with where it is mentioned.
fn unknown_flags(pages: &[Page], known: &BTreeSet<String>) -> Vec<String> {
    documented_flags(pages)
        .into_iter()
        .filter(|(flag, _)| !known.contains(flag))
        .map(|(flag, place)| format!("{flag} (in {place})"))
        .collect()
}

/// The command lines in code blocks that clap refuses, each with its error.
fn unparsable_commands(pages: &[Page]) -> Vec<String> {
    let mut failures = Vec::new();
    for page in pages {
        for (number, line, args) in command_lines(&split(&page.text).code) {
            let mut argv = vec!["ringblast".to_string()];
            argv.extend(shell_words(&args));
            if let Err(e) = Cli::try_parse_from(&argv) {
                failures.push(format!(
                    "{}:{number}: {}\n  parsed as {argv:?}\n  {}",
                    page.path,
                    line.trim(),
                    e.render().to_string().lines().next().unwrap_or("")
                ));
            }
        }
    }
    failures
}

#[test]
fn every_documented_flag_is_in_some_help() {
    let known = help_flags();
    for flag in [
        "--to",
        "--listen",
        "--secret-file",
        "--loss-ratios",
        "--hop-limit",
    ] {
        assert!(known.contains(flag), "help parsing lost {flag}: {known:?}");
    }
    let pages = pages();
    assert!(
        documented_flags(&pages).len() > 100,
        "found too few documented flags: the page parsing is broken"
    );
    let unknown = unknown_flags(&pages, &known);
    assert!(
        unknown.is_empty(),
        "flags the docs mention that no --help lists:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn every_documented_command_line_parses() {
    let pages = pages();
    let commands: usize = pages
        .iter()
        .map(|p| command_lines(&split(&p.text).code).len())
        .sum();
    assert!(commands >= 15, "found only {commands} command lines");
    let failures = unparsable_commands(&pages);
    assert!(
        failures.is_empty(),
        "documented command lines that do not parse:\n{}",
        failures.join("\n")
    );
}

/// The checks above catch a flag that is gone and an example with a typo.
#[test]
fn the_checks_catch_a_missing_flag_and_a_broken_example() {
    let known = help_flags();
    let bad = Page {
        path: "bad.md".to_string(),
        text: "Use `--rate R` or `--no-such-flag`.\n\n```sh\n\
               ringblast send --to 127.0.0.1:9 --rate 1kpps\n\
               ringblast send --to 127.0.0.1:9 --rtae 1kpps\n\
               ringblast sink --listen 127.0.0.1:9 \\\n  --queus 2\n\
               ringblast topo [--cpu N]\n```\n"
            .to_string(),
    };
    let pages = [bad];
    let unknown = unknown_flags(&pages, &known);
    for flag in ["--no-such-flag", "--rtae", "--queus", "--cpu"] {
        assert!(
            unknown.iter().any(|u| u.starts_with(&format!("{flag} "))),
            "{flag} not reported: {unknown:?}"
        );
    }
    assert!(!unknown.iter().any(|u| u.starts_with("--rate ")));
    let failures = unparsable_commands(&pages);
    assert_eq!(failures.len(), 3, "{failures:#?}");
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces turned into `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every relative link of README.md, docs/*.md and the deploy pages leads to a file that exists
/// and, with a `#fragment` into a Markdown page, to a heading of that page.
#[test]
fn relative_links_lead_somewhere() {
    let mut pages = pages();
    pages.push(page("deploy/README.md"));
    pages.push(page("deploy/systemd/README.md"));
    let mut broken = Vec::new();
    for page in &pages {
        let dir = Path::new(&page.path).parent().unwrap_or(Path::new(""));
        let parts = split(&page.text);
        for (number, paragraph) in &parts.paragraphs {
            for (i, _) in paragraph.match_indices("](") {
                let rest = &paragraph[i + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = &rest[..end];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let path: PathBuf = if file.is_empty() {
                    PathBuf::from(&page.path)
                } else {
                    dir.join(file)
                };
                let full = Path::new(ROOT).join(&path);
                if !full.exists() {
                    broken.push(format!(
                        "{}:{number}: {target} (no {})",
                        page.path,
                        path.display()
                    ));
                } else if !fragment.is_empty()
                    && full.extension().is_some_and(|e| e == "md")
                    && !anchors(&std::fs::read_to_string(&full).unwrap()).contains(fragment)
                {
                    broken.push(format!(
                        "{}:{number}: {target} (no such heading)",
                        page.path
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// CI (.ci/run) runs the README's test command: the README must still show it, as a command
/// line of its own, next to the `pair` command.
#[test]
fn the_readme_shows_the_command_ci_runs() {
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).expect(".ci/run");
    let command = ci
        .lines()
        .find_map(|l| l.strip_prefix("exec "))
        .expect(".ci/run execs the test command")
        .trim();
    let readme = page("README.md");
    let code = split(&readme.text).code;
    let shows = |c: &str| code.iter().any(|(_, l)| l.trim_start().starts_with(c));
    assert!(shows(command), "README.md lacks `{command}`");
    assert!(
        shows("cargo run --release -- pair"),
        "README.md lacks the pair command"
    );
}
