//! Where a worker's packet memory really is, measured once its arena is set up: the node it was
//! bound to, its resident pages per node (from `move_pages`), the pages not resident yet, the
//! page size, and whether hugepages were asked for and used. Renders the start-up line a person
//! (or a lab script) reads and the `memory` object of the JSON summary's placement entries.

use std::{collections::BTreeMap, fmt::Write as _};

use serde_json::{Value, json};

/// Whether hugepages were asked for, and if so whether they back the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HugePages {
    /// Normal pages, as asked (`--hugepages` not given).
    NotRequested,
    /// 2 MiB pages back the arena.
    Used,
    /// `--hugepages` was given but none were available: normal pages.
    FellBack,
}

impl HugePages {
    /// The JSON value: `not_requested`, `used` or `fell_back`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HugePages::NotRequested => "not_requested",
            HugePages::Used => "used",
            HugePages::FellBack => "fell_back",
        }
    }
}

/// An arena's pages by where they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PageCounts {
    /// Resident pages per node (nodes without any are left out).
    pub(crate) by_node: BTreeMap<u32, u64>,
    /// Pages not faulted in (yet).
    pub(crate) not_resident: u64,
}

/// Where one worker's arena is, measured at set-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemoryPlacement {
    /// The node the arena is bound to (`mbind(MPOL_BIND)`).
    pub(crate) bound_node: u32,
    /// Bytes per page.
    pub(crate) page_size: usize,
    /// Hugepages asked for and used, or not.
    pub(crate) hugepages: HugePages,
    /// The pages by node, or why they could not be counted.
    pub(crate) pages: Result<PageCounts, String>,
}

impl MemoryPlacement {
    /// Whether every resident page is on the bound node (`None`: the pages are unknown).
    pub(crate) fn all_on_node(&self) -> Option<bool> {
        let pages = self.pages.as_ref().ok()?;
        Some(pages.by_node.keys().all(|&n| n == self.bound_node))
    }

    /// Resident pages per node, the bound node first (listed even with none), then the others.
    fn nodes_bound_first(pages: &PageCounts, bound: u32) -> Vec<(u32, u64)> {
        let on_bound = pages.by_node.get(&bound).copied().unwrap_or(0);
        let others = pages.by_node.iter().filter(|(n, _)| **n != bound);
        std::iter::once((bound, on_bound))
            .chain(others.map(|(n, c)| (*n, *c)))
            .collect()
    }

    /// `8000 pages on node 1, 704 on node 0`.
    fn counts_text(pages: &PageCounts, bound: u32) -> String {
        let mut text = String::new();
        for (i, (node, count)) in Self::nodes_bound_first(pages, bound).iter().enumerate() {
            let unit = if i == 0 { " pages" } else { "" };
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(text, "{sep}{count}{unit} on node {node}");
        }
        text
    }

    /// `4 KiB pages`, `2 MiB hugepages` or `4 KiB pages (hugepages unavailable: fell back)`.
    fn page_text(&self) -> String {
        let size = if self.page_size.is_multiple_of(1 << 20) {
            format!("{} MiB", self.page_size >> 20)
        } else {
            format!("{} KiB", self.page_size >> 10)
        };
        match self.hugepages {
            HugePages::NotRequested => format!("{size} pages"),
            HugePages::Used => format!("{size} hugepages"),
            HugePages::FellBack => format!("{size} pages (hugepages unavailable: fell back)"),
        }
    }

    /// The start-up line of queue `queue` of `role` (`send`, `sink`), and a warning line after
    /// it when resident pages are off the bound node:
    /// ```text
    /// memory (send): q0 bound to node 1: 8000 pages on node 1, 704 on node 0, 0 not resident; 4 KiB pages
    /// warning: q0's packet memory is not all on its node 1: 8000 pages on node 1, 704 on node 0
    /// ```
    pub(crate) fn lines(&self, role: &str, queue: usize) -> String {
        let bound = self.bound_node;
        let mut text = format!("memory ({role}): q{queue} bound to node {bound}: ");
        match &self.pages {
            Ok(pages) => {
                let counts = Self::counts_text(pages, bound);
                let _ = writeln!(
                    text,
                    "{counts}, {} not resident; {}",
                    pages.not_resident,
                    self.page_text()
                );
                if self.all_on_node() == Some(false) {
                    let _ = writeln!(
                        text,
                        "warning: q{queue}'s packet memory is not all on its node {bound}: {counts}"
                    );
                }
            }
            Err(why) => {
                let _ = writeln!(text, "pages unknown ({why}); {}", self.page_text());
            }
        }
        text
    }

    /// The `memory` object of a placement entry; unknown pages are null with the reason.
    pub(crate) fn json(&self) -> Value {
        let pages = self.pages.as_ref().ok();
        json!({
            "bound_node": self.bound_node,
            "pages_by_node": pages.map(|p| {
                Self::nodes_bound_first(p, self.bound_node)
                    .into_iter()
                    .map(|(n, c)| (n.to_string(), json!(c)))
                    .collect::<serde_json::Map<_, _>>()
            }),
            "not_resident_pages": pages.map(|p| p.not_resident),
            "page_size_bytes": self.page_size,
            "hugepages": self.hugepages.as_str(),
            "all_on_node": self.all_on_node(),
            "pages_unknown_reason": self.pages.as_ref().err(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(by_node: &[(u32, u64)], not_resident: u64, huge: HugePages) -> MemoryPlacement {
        MemoryPlacement {
            bound_node: 1,
            page_size: if huge == HugePages::Used {
                2 << 20
            } else {
                4096
            },
            hugepages: huge,
            pages: Ok(PageCounts {
                by_node: by_node.iter().copied().collect(),
                not_resident,
            }),
        }
    }

    #[test]
    fn all_pages_on_the_bound_node_is_one_line() {
        let p = placement(&[(1, 8704)], 0, HugePages::NotRequested);
        assert_eq!(
            p.lines("send", 0),
            "memory (send): q0 bound to node 1: 8704 pages on node 1, 0 not resident; 4 KiB pages\n"
        );
        assert_eq!(
            p.json(),
            json!({"bound_node": 1, "pages_by_node": {"1": 8704}, "not_resident_pages": 0,
                "page_size_bytes": 4096, "hugepages": "not_requested", "all_on_node": true,
                "pages_unknown_reason": null})
        );
    }

    #[test]
    fn pages_off_the_bound_node_are_listed_and_warned_about() {
        let p = placement(&[(0, 704), (1, 8000)], 12, HugePages::FellBack);
        assert_eq!(
            p.lines("sink", 2),
            "memory (sink): q2 bound to node 1: 8000 pages on node 1, 704 on node 0, 12 not resident; 4 KiB pages (hugepages unavailable: fell back)\n\
             warning: q2's packet memory is not all on its node 1: 8000 pages on node 1, 704 on node 0\n"
        );
        let json = p.json();
        assert_eq!(json["pages_by_node"], json!({"1": 8000, "0": 704}));
        assert_eq!(json["all_on_node"], json!(false));
        assert_eq!(json["hugepages"], json!("fell_back"));
    }

    #[test]
    fn no_page_on_the_bound_node_still_names_it() {
        let p = placement(&[(0, 3)], 0, HugePages::Used);
        assert!(
            p.lines("send", 0).starts_with(
                "memory (send): q0 bound to node 1: 0 pages on node 1, 3 on node 0, 0 not resident; 2 MiB hugepages\nwarning: "
            ),
            "{}",
            p.lines("send", 0)
        );
    }

    #[test]
    fn unknown_pages_are_said_never_shown_as_numbers() {
        let p = MemoryPlacement {
            pages: Err("move_pages: Operation not permitted (os error 1)".into()),
            ..placement(&[], 0, HugePages::NotRequested)
        };
        assert_eq!(
            p.lines("send", 0),
            "memory (send): q0 bound to node 1: pages unknown (move_pages: Operation not permitted (os error 1)); 4 KiB pages\n"
        );
        let json = p.json();
        for key in ["pages_by_node", "not_resident_pages", "all_on_node"] {
            assert!(json[key].is_null(), "{key}: {json}");
        }
        assert_eq!(
            json["pages_unknown_reason"],
            json!("move_pages: Operation not permitted (os error 1)")
        );
    }
}
