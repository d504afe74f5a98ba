//! ringblast: an io_uring UDP traffic generator and sink with one ring per queue, workers
//! pinned and grouped by NUMA node, node-local registered packet memory, exact sequence
//! accounting at the sink and a Prometheus exporter.
//!
//! The binary is a thin shell over [`cli::execute`]; everything is reachable from tests.

pub mod cli;
pub mod clock;
pub(crate) mod config {
    //! Units of the command line and the configuration file.
    pub(crate) mod units;
}
pub(crate) mod control;
pub mod error;
pub(crate) mod figures;
#[cfg(test)]
mod fuzzing;
pub(crate) mod host_time;
pub(crate) mod html_report;
pub(crate) mod latency_clock;
pub(crate) mod mem;
pub(crate) mod metrics;
pub(crate) mod net;
pub mod output;
pub mod pacing;
pub mod proto {
    //! The wire format and the sink's sequence accounting.
    pub(crate) mod exchange;
    #[cfg(test)]
    mod fuzz;
    pub mod header;
    pub mod proof;
    pub mod reach;
    pub(crate) mod record;
    pub mod seq;
}
pub(crate) mod report;
pub(crate) mod ring;
pub(crate) mod run;
pub(crate) mod schedule;
pub(crate) mod sender;
pub mod sink;
pub(crate) mod stamp;
pub(crate) mod start_record;
pub(crate) mod stats;
pub(crate) mod timestamps;
pub(crate) mod topology;
pub(crate) mod worker;
