//! The `ringblast` binary: parse arguments, run, map errors to exit codes.

use clap::Parser;

fn main() {
    let cli = ringblast::cli::Cli::parse();
    if let Err(err) = ringblast::run::execute(cli) {
        eprintln!("ringblast: error: {err}");
        std::process::exit(err.exit_code());
    }
}
