//! `ringblast generate`: the shell completions and man pages are generated from the real clap
//! definitions, offer every flag `--help` lists, and never offer hidden ones; the Wireshark
//! dissector is the one in `deploy/wireshark/` (tests/dissector.rs runs it in tshark).

mod common;

use std::process::{Command, Stdio};

use common::*;

const SUBCOMMANDS: [&str; 5] = ["send", "sink", "pair", "search", "topo"];
/// `report` has too few flags for `help_flags`'s sanity floor; it is checked on its own.
const REPORT_FLAGS: [&str; 2] = ["--output", "--title"];

/// The long flags `ringblast SUB --help` lists (the source of truth for what users can type).
fn help_flags(sub: &str) -> Vec<String> {
    let out = ringblast(&[sub, "--help"]);
    assert_ok(&out);
    let flags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-h, ")
                .or(l.strip_prefix("-V, "))
                .unwrap_or(l);
            let flag = l.strip_prefix("--")?.split([' ', '=', '<']).next()?;
            Some(format!("--{flag}"))
        })
        .collect();
    assert!(
        flags.len() > 5,
        "{sub} --help lists too few flags: {flags:?}"
    );
    flags
}

fn generated(kind: &str) -> String {
    let out = ringblast(&["generate", kind]);
    assert_ok(&out);
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn completions_offer_every_flag_and_no_hidden_one() {
    let every: Vec<String> = SUBCOMMANDS.iter().flat_map(|s| help_flags(s)).collect();
    assert!(every.iter().any(|f| f == "--rate") && every.iter().any(|f| f == "--listen"));
    for kind in ["complete-bash", "complete-zsh", "complete-fish"] {
        let text = generated(kind);
        // fish names long flags without their dashes (`-l rate`).
        let has = |flag: &str| text.contains(flag) || text.contains(&format!("-l {}", &flag[2..]));
        let missing: Vec<_> = every.iter().filter(|f| !has(f)).collect();
        assert!(missing.is_empty(), "{kind} lacks {missing:?}");
        for sub in SUBCOMMANDS.iter().chain(&["report", "generate"]) {
            assert!(text.contains(sub), "{kind} lacks the subcommand {sub}");
        }
        for flag in REPORT_FLAGS {
            assert!(has(flag), "{kind} lacks report's {flag}");
        }
        assert!(!has("--first-seq"), "{kind} offers the hidden --first-seq");
    }
}

/// Sources the bash completion and asks it what follows `ringblast send --allow` and `ringblast `.
#[test]
fn bash_completion_completes_in_a_real_shell() {
    let script = generated("complete-bash");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ringblast.bash");
    std::fs::write(&path, script).unwrap();
    let probe = r#"set -e
source "$1"
COMP_WORDS=(ringblast send --allow); COMP_CWORD=2; _ringblast ringblast --allow send
echo "flag: ${COMPREPLY[*]}"
COMP_WORDS=(ringblast ""); COMP_CWORD=1; _ringblast ringblast "" ringblast
echo "sub: ${COMPREPLY[*]}""#;
    let out = Command::new("bash")
        .args(["-c", probe, "probe"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("flag: --allow-fragments\n"), "{stdout}");
    assert!(
        stdout.contains(" send sink pair search topo report generate\n"),
        "{stdout}"
    );
}

#[test]
fn man_pages_document_every_flag_of_their_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = ringblast(&["generate", "man", "--dir", dir.path().to_str().unwrap()]);
    assert_ok(&out);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let top = std::fs::read_to_string(dir.path().join("ringblast.1")).unwrap();
    assert!(
        top.starts_with(".ie") || top.contains(".TH ringblast 1"),
        "{top}"
    );
    assert_eq!(
        top,
        generated("man"),
        "stdout and --dir give the same top page"
    );
    for sub in SUBCOMMANDS {
        let name = format!("ringblast-{sub}.1");
        assert!(listed.contains(&name), "{listed}");
        assert!(
            top.contains(&format!("ringblast\\-{sub}(1)")),
            "top page lacks {sub}"
        );
        let page = std::fs::read_to_string(dir.path().join(&name)).unwrap();
        assert!(page.contains(&format!(".TH ringblast-{sub} 1 ")), "{page}");
        let footer = format!("\"ringblast {}\"", env!("CARGO_PKG_VERSION"));
        assert!(page.contains(&footer), "{page}");
        // roff escapes every hyphen.
        let page = page.replace("\\-", "-");
        let missing: Vec<_> = help_flags(sub)
            .into_iter()
            .filter(|f| !page.contains(&format!("\\fB{f}\\fR")))
            .collect();
        assert!(missing.is_empty(), "{name} lacks {missing:?}");
        assert!(
            !page.contains("--first-seq"),
            "{name} shows the hidden --first-seq"
        );
    }
    assert!(listed.contains("ringblast-report.1"), "{listed}");
    assert!(
        top.contains("ringblast\\-report(1)"),
        "top page lacks report"
    );
    let report = std::fs::read_to_string(dir.path().join("ringblast-report.1"))
        .unwrap()
        .replace("\\-", "-");
    for flag in REPORT_FLAGS {
        assert!(
            report.contains(&format!("\\fB{flag}\\fR")),
            "ringblast-report.1 lacks {flag}"
        );
    }
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        files,
        3 + SUBCOMMANDS.len(),
        "pages for the top, each subcommand, report and generate: {listed}"
    );
}

#[test]
fn wireshark_dissector_is_the_deployed_file() {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/wireshark/ringblast.lua"
    ))
    .unwrap();
    assert_eq!(generated("wireshark-dissector"), shipped);
    let dir = tempfile::tempdir().unwrap();
    let out = ringblast(&[
        "generate",
        "wireshark-dissector",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_ok(&out);
    let path = dir.path().join("ringblast.lua");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", path.display())
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), shipped);
}

/// stdout is a pipe whose reader is gone before the first write: EPIPE, quietly, exit 0.
#[test]
fn generate_into_a_closed_pipe_ends_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(bin())
        .args(["generate", "man"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run ringblast");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn unknown_kind_is_a_usage_error() {
    let out = ringblast(&["generate", "complete-tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("complete-bash"), "{stderr}");
}

#[test]
fn json_schema_is_the_published_file() {
    let shipped = std::fs::read_to_string(common::schema::SCHEMA_FILE).unwrap();
    assert_eq!(generated("json-schema"), shipped);
    let dir = tempfile::tempdir().unwrap();
    let out = ringblast(&[
        "generate",
        "json-schema",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_ok(&out);
    let path = dir.path().join("ringblast-1.schema.json");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), shipped);
}
