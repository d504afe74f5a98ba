//! Shell completions and man pages, generated from the clap definitions in `cli`, the way
//! ripgrep and hyperfine ship them, the Wireshark dissector, built into the binary from
//! `deploy/wireshark/ringblast.lua`, and the JSON Schema of the `--json` records, built in from
//! `docs/schema/`. `ringblast generate KIND` writes one artifact to stdout;
//! with `--dir DIR` it writes files instead (for `man`: one page per subcommand as well,
//! `ringblast-send.1` and so on, as git does). The subcommand is hidden; `scripts/build-assets.sh`
//! calls it to fill `target/assets/` for the Debian package.

use std::{
    io::{self, Write},
    path::Path,
};

use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;

use crate::{cli::Cli, error::Error};

/// What `ringblast generate` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Artifact {
    /// Completions for bash (`/usr/share/bash-completion/completions/ringblast`).
    CompleteBash,
    /// Completions for zsh (`/usr/share/zsh/vendor-completions/_ringblast`).
    CompleteZsh,
    /// Completions for fish (`/usr/share/fish/vendor_completions.d/ringblast.fish`).
    CompleteFish,
    /// The man page in roff (`ringblast.1`; with `--dir`, also `ringblast-SUBCOMMAND.1`).
    Man,
    /// The Wireshark/tshark Lua dissector (`ringblast.lua`, for a Lua plugin folder or
    /// `tshark -X lua_script:ringblast.lua`).
    WiresharkDissector,
    /// The JSON Schema (draft 2020-12) of the `--json` records (`ringblast-1.schema.json`).
    JsonSchema,
}

/// The dissector's source, as `deploy/wireshark/ringblast.lua` holds it.
const DISSECTOR: &str = include_str!("../../deploy/wireshark/ringblast.lua");
/// The file name the dissector is written under with `--dir`.
const DISSECTOR_FILE: &str = "ringblast.lua";
/// The file name the JSON Schema is written under with `--dir`.
const SCHEMA_FILE: &str = "ringblast-1.schema.json";

impl Artifact {
    /// A file built into the binary, and its name with `--dir`.
    fn built_in(self) -> Option<(&'static str, &'static str)> {
        match self {
            Artifact::WiresharkDissector => Some((DISSECTOR, DISSECTOR_FILE)),
            Artifact::JsonSchema => Some((crate::output::JSON_SCHEMA, SCHEMA_FILE)),
            _ => None,
        }
    }

    fn shell(self) -> Option<Shell> {
        match self {
            Artifact::CompleteBash => Some(Shell::Bash),
            Artifact::CompleteZsh => Some(Shell::Zsh),
            Artifact::CompleteFish => Some(Shell::Fish),
            Artifact::Man | Artifact::WiresharkDissector | Artifact::JsonSchema => None,
        }
    }
}

/// The clap command as the artifacts describe it: built, without the `help` subcommand and
/// without hidden subcommands and options (clap_complete would offer them).
fn command() -> clap::Command {
    let cli = Cli::command();
    let mut cmd = visible(&cli)
        .version(cli.get_version().unwrap_or_default().to_string())
        .propagate_version(true)
        .subcommand_required(true)
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// A copy of `cmd` (not yet built) with only its visible options and subcommands. Argument
/// groups are left out: the derived ones only gather a struct's fields and may name hidden ones.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string());
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(about) = cmd.get_long_about() {
        out = out.long_about(about.clone());
    }
    out = out.args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out = out.subcommand(visible(sub));
    }
    out
}

/// Renders `artifact` (for `man`, the top-level page) into bytes.
pub(crate) fn render(artifact: Artifact) -> Result<Vec<u8>, Error> {
    if let Some((text, _)) = artifact.built_in() {
        return Ok(text.as_bytes().to_vec());
    }
    let mut cmd = command();
    let mut out = Vec::new();
    match artifact.shell() {
        Some(shell) => clap_complete::generate(shell, &mut cmd, "ringblast", &mut out),
        None => man(cmd)
            .render(&mut out)
            .map_err(|e| Error::io("rendering the man page", e))?,
    }
    Ok(out)
}

/// Writes `artifact` into `dir` and returns the paths written.
pub(crate) fn write_to(artifact: Artifact, dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    let context = || format!("writing into {}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| Error::io(context(), e))?;
    if let Some((text, file)) = artifact.built_in() {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|e| Error::io(context(), e))?;
        return Ok(vec![path]);
    }
    let mut cmd = command();
    match artifact.shell() {
        Some(shell) => clap_complete::generate_to(shell, &mut cmd, "ringblast", dir)
            .map(|p| vec![p])
            .map_err(|e| Error::io(context(), e)),
        None => {
            let mut pages = vec![
                man(cmd.clone())
                    .generate_to(dir)
                    .map_err(|e| Error::io(context(), e))?,
            ];
            for sub in cmd.get_subcommands() {
                pages.push(
                    man(sub.clone())
                        .generate_to(dir)
                        .map_err(|e| Error::io(context(), e))?,
                );
            }
            Ok(pages)
        }
    }
}

/// One man page; the footer names ringblast and its version on every page.
fn man(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(format!("ringblast {}", env!("CARGO_PKG_VERSION")))
        .manual("ringblast manual")
}

/// `ringblast generate`: to stdout, or into `dir` (printing each path written). A closed pipe
/// (`| head`) ends quietly.
pub(crate) fn run(artifact: Artifact, dir: Option<&Path>) -> Result<(), Error> {
    let bytes = match dir {
        Some(dir) => write_to(artifact, dir)?
            .iter()
            .map(|p| format!("{}\n", p.display()))
            .collect::<String>()
            .into_bytes(),
        None => render(artifact)?,
    };
    let mut stdout = io::stdout().lock();
    match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Error::io("writing to stdout", e)),
        _ => Ok(()),
    }
}
