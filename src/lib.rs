//! ringblast: an io_uring UDP traffic generator and sink with one ring per queue, workers
//! pinned and grouped by NUMA node, node-local registered packet memory, exact sequence
//! accounting at the sink and a Prometheus exporter.
//!
//! The binary is a thin shell over [`run::execute`]; everything is reachable from tests.

pub mod cli;
pub mod cli_tcp;
pub mod clock;
pub mod config {
    //! Units and configuration files.
    pub mod file;
    #[cfg(test)]
    mod fuzz;
    pub mod units;
}
pub mod control;
pub mod counters;
pub mod error;
#[cfg(test)]
mod fuzzing;
pub mod generate;
pub mod latency_clock;
pub mod mem;
pub mod metrics;
pub mod net;
pub mod output;
pub mod pacing;
pub mod proto {
    //! The wire format and the sink's sequence accounting.
    #[cfg(test)]
    mod fuzz;
    pub mod header;
    pub mod record;
    pub mod seq;
}
pub mod report;
pub mod ring;
pub mod run;
pub mod schedule;
pub mod sender;
pub mod sink;
pub mod stamp;
pub mod stats;
pub mod topology;
pub mod worker;
