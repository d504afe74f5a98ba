//! The fault suite: faults injected between two network namespaces this suite creates and
//! deletes (unique names, 10.x addresses), each count checked against the injector's own
//! counter (nft named counters, `/proc/net/snmp` of the namespace, the NFQUEUE program's
//! counts, tc statistics). Every case also checks that ringblast survived and that its metrics
//! endpoint still answers with the same counts. Needs root; under root a missing tool fails.
//!
//! Cases: nft drops (periodic, random), dup and a rate policer (`nft.rs`); NFQUEUE delay,
//! reorder, corrupt and truncate (`nfq.rs`, `support/nfq_fault.c`); kernel drops on a receive
//! buffer shrunk from outside, with and without GRO and with inline receives (`kernel.rs`);
//! link down and up, blackhole
//! and prohibit routes (`routes.rs`); SIGKILL and SIGSTOP/SIGCONT of either side
//! (`signals.rs`); foreign, zero-length, truncated, oversized and 1 M random datagrams
//! (`invalid.rs`); a metrics endpoint under abuse (`abuse.rs`); control-less runs booked as one
//! sender each and forged floods beside an authenticated sender (`admission.rs`). Sends refused by a full tbf
//! qdisc (ENOBUFS through IP_RECVERR) are covered in `tests/pairing.rs`
//! (`sends_refused_by_a_full_qdisc_are_failed_sends_not_loss`).

#[path = "faults/abuse.rs"]
mod abuse;
#[path = "faults/admission.rs"]
mod admission;
mod common;
#[path = "faults/invalid.rs"]
mod invalid;
#[path = "faults/kernel.rs"]
mod kernel;
#[path = "faults/kit.rs"]
mod kit;
#[path = "faults/nfq.rs"]
mod nfq;
#[path = "faults/nft.rs"]
mod nft;
#[path = "faults/routes.rs"]
mod routes;
#[path = "faults/signals.rs"]
mod signals;
