//! The `ringblast` binary: apply the config file, parse arguments, run, map errors to exit codes.

use clap::{CommandFactory, FromArgMatches};

use ringblast::output;

fn fail(err: ringblast::error::Error) -> ! {
    if output::closed() {
        std::process::exit(output::EXIT_BROKEN_PIPE);
    }
    output::error_line(format_args!("ringblast: error: {err}"));
    std::process::exit(err.exit_code());
}

fn main() {
    ringblast::clock::launch_ns();
    ringblast::clock::init_test_skew().unwrap_or_else(|e| fail(e));
    let argv =
        ringblast::cli::file::apply(std::env::args_os().collect()).unwrap_or_else(|e| fail(e));
    let matches = ringblast::cli::Cli::command().get_matches_from(argv);
    let cli = ringblast::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(err) = ringblast::cli::execute(cli, &matches) {
        fail(err);
    }
    if output::closed() {
        std::process::exit(output::EXIT_BROKEN_PIPE);
    }
}
