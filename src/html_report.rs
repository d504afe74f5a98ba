//! `ringblast report`: turns the JSON Lines of a `send`, `sink`, `pair`, `search` or stepped run
//! into one self-contained HTML page (inline CSS and SVG, no scripts, no network fetches) that
//! shows the achieved rate against the target, loss, reorder and duplicates per interval and
//! per step, the latency and jitter distribution, the per-sender table and a search's trial
//! ladder with its NDR and PDR. `model` reads the records, `svg` draws the charts, `page`
//! lays them out. Input that is not ringblast JSON Lines is one line naming the fix (exit 4).

mod model;
mod page;
mod svg;

use std::{
    io::{self, Read},
    path::Path,
};

use crate::error::Error;

/// Reads the input, renders the page and writes it.
pub(crate) fn command(
    input: &Path,
    output: Option<&Path>,
    title: Option<&str>,
) -> Result<(), Error> {
    let stdin = input.as_os_str() == "-";
    let output = match output {
        Some(output) => output.to_path_buf(),
        None if stdin => {
            return Err(Error::Usage(
                "reading standard input, the page needs a name: give -o OUT.html (or -o - for standard output)".into(),
            ));
        }
        None => input.with_extension("html"),
    };
    if !stdin && output == input {
        return Err(Error::Usage(format!(
            "the page would overwrite its input {}: give -o OUT.html",
            input.display()
        )));
    }
    let output = output.as_path();
    let name = if stdin {
        "standard input".to_string()
    } else {
        input.display().to_string()
    };
    let text = read_input(input, stdin, &name)?;
    let run = model::parse(&text, &name)?;
    let title = title.map(str::to_string).unwrap_or_else(|| {
        let file = if stdin {
            "stdin".to_string()
        } else {
            input
                .file_name()
                .map_or_else(|| name.clone(), |f| f.to_string_lossy().into_owned())
        };
        match run.started() {
            Some(started) => format!("ringblast {started}"),
            None => format!("ringblast {}: {file}", run.kind()),
        }
    });
    let html = page::render(&run, &title, &name);
    if output.as_os_str() == "-" {
        crate::output::document(&html);
    } else {
        std::fs::write(output, html.as_bytes()).map_err(|e| {
            Error::io(
                format!(
                    "report: writing {} (give -o a writable path)",
                    output.display()
                ),
                e,
            )
        })?;
        crate::output::error_line(format_args!(
            "report: wrote {} ({} intervals, {} steps, {} trials)",
            output.display(),
            run.send_intervals.len() + run.sink_intervals.len(),
            run.steps.len(),
            run.trials.len()
        ));
    }
    Ok(())
}

fn read_input(path: &Path, stdin: bool, name: &str) -> Result<String, Error> {
    let mut bytes = Vec::new();
    let read = if stdin {
        io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes).map(|_| ()))
    };
    read.map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::IsADirectory => {
            Error::BadInput(format!(
                "cannot read {name}: {e}; give the JSON Lines file a --json run wrote, or - for \
                 standard input"
            ))
        }
        _ => Error::io(format!("report: reading {name}"), e),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        Error::BadInput(format!(
            "{name} is not UTF-8 text (byte {}); give it the stdout of a ringblast run with --json",
            e.utf8_error().valid_up_to()
        ))
    })
}
