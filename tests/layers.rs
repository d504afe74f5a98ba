//! The shape of `src/`: no import cycle between modules, and the top-level modules form layers
//! (no cycle between them either, so none imports from a layer above it).
//!
//! The graph is read from the source text, as `cargo modules` would: a module is a file, and an
//! edge runs from a module to every module a `crate::`, `super::` or `self::` path in it names
//! (in `use` lines, grouped `use` trees included, and in expressions). A module's edges to its
//! own ancestors and descendants are not counted: a parent and its child are one room. Test
//! modules (`#[cfg(test)] mod tests`) and comments are left out. The observer here is the
//! source itself, not anything ringblast reports.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

type ModPath = Vec<String>;

/// Every module file under `src/`, by its module path.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<ModPath, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut parts: ModPath = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                match parts.last().map(String::as_str) {
                    Some("lib") | Some("main") if parts.len() == 1 => parts.clear(),
                    Some("mod") => {
                        parts.pop();
                    }
                    _ => {}
                }
                out.insert(parts, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The source without comments and without its unit-test module.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path (as segments) that starts with `crate`, `super` or `self` in `code`, with grouped
/// `use a::{b, c::d}` trees expanded.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let at_word = i == 0 || !is_ident(bytes[i - 1]);
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .any(|h| at_word && bytes[i..].starts_with(h.as_bytes()));
        if !starts {
            i += 1;
            continue;
        }
        let (tree, len) = take_tree(&code[i..]);
        out.extend(expand(&tree));
        i += len.max(1);
    }
    out
}

/// The use tree that starts `text` (`a::b::{c, d::e}`), and its length in bytes.
fn take_tree(text: &str) -> (String, usize) {
    let mut depth = 0usize;
    for (i, ch) in text.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                return (text[..i].to_string(), i);
            }
            _ => {}
        }
    }
    (text.to_string(), text.len())
}

/// The paths a use tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d` and `a::c::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![segments(&tree)];
    };
    let prefix = segments(&tree[..open]);
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let mut items = Vec::new();
    for (i, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        for rest in expand(item) {
            out.push(prefix.iter().cloned().chain(rest).collect());
        }
    }
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The module a path names from `module`: `crate::` from the root, `super::` from the parent
/// (repeatable), `self::` from `module` itself; the longest prefix that is a module.
fn target(module: &ModPath, path: &[String], mods: &BTreeMap<ModPath, PathBuf>) -> Option<ModPath> {
    let mut full: ModPath = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => module.clone(),
        Some("super") => module[..module.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().map(String::as_str) == Some("super") {
        full.pop();
        rest = &rest[1..];
    }
    full.extend(rest.iter().filter(|s| *s != "self").cloned());
    (1..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|p| mods.contains_key(p))
}

fn nested(a: &ModPath, b: &ModPath) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Module-level edges, without parent/child edges.
fn graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(
        mods.len() > 50,
        "found only {} modules under src/",
        mods.len()
    );
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, file) in &mods {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for path in paths_in(&code) {
            if let Some(t) = target(module, &path, &mods)
                && !nested(module, &t)
            {
                edges.entry(module.clone()).or_default().insert(t);
            }
        }
    }
    edges
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        out: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(v: &N, edges: &BTreeMap<N, BTreeSet<N>>, s: &mut State<N>) {
        let i = s.index.len();
        s.index.insert(v.clone(), i);
        s.low.insert(v.clone(), i);
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, edges, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(v, edges, &mut s);
        }
    }
    s.out
}

fn describe<N: Ord>(
    comp: &[N],
    edges: &BTreeMap<N, BTreeSet<N>>,
    name: impl Fn(&N) -> String,
) -> String {
    let mut lines = Vec::new();
    for a in comp {
        for b in edges.get(a).into_iter().flatten() {
            if comp.contains(b) {
                lines.push(format!("  {} -> {}", name(a), name(b)));
            }
        }
    }
    lines.join("\n")
}

#[test]
fn no_module_imports_in_a_cycle() {
    let edges = graph();
    let found = cycles(&edges);
    let text: Vec<String> = found
        .iter()
        .map(|c| describe(c, &edges, |m| m.join("::")))
        .collect();
    assert!(
        found.is_empty(),
        "import cycles in src/:\n{}",
        text.join("\n\n")
    );
}

#[test]
fn top_level_modules_form_layers() {
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, targets) in graph() {
        for b in targets {
            if let (Some(x), Some(y)) = (a.first(), b.first())
                && x != y
            {
                top.entry(x.clone()).or_default().insert(y.clone());
            }
        }
    }
    assert!(
        top.len() > 10,
        "only {} top-level modules import others",
        top.len()
    );
    let found = cycles(&top);
    let text: Vec<String> = found
        .iter()
        .map(|c| describe(c, &top, String::clone))
        .collect();
    assert!(
        found.is_empty(),
        "top-level modules importing each other (one of them reaches a layer above it):\n{}",
        text.join("\n\n")
    );
}

/// The run core: the modules every protocol's run goes through (the pipeline, the session and
/// its ticker, the link's shared vocabulary, descriptors, the exporter, judging, placement).
const RUN_CORE: &[&str] = &[
    "run::pipeline",
    "run::session",
    "run::ticker",
    "run::link",
    "run::link_ends",
    "run::link_state",
    "run::fds",
    "run::exporting",
    "run::judge",
    "run::placement",
    "run::verdict",
];

/// What the run core may import from the floors where protocols live (`run`, `sender`,
/// `sink`): the core itself and the protocol-free per-sender books. Everything else there is a
/// protocol's own (UDP's transport in `run/mod.rs`, its worker roots, every `tcp` module).
fn core_may_import(t: &ModPath) -> bool {
    let name = t.join("::");
    match t.first().map(String::as_str) {
        Some("run") => RUN_CORE
            .iter()
            .any(|c| name == *c || name.starts_with(&format!("{c}::"))),
        Some("sender") => false,
        Some("sink") => name == "sink::senders",
        _ => true,
    }
}

#[test]
fn the_run_core_imports_no_protocols_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let mut broken = Vec::new();
    for core in RUN_CORE {
        let module: ModPath = core.split("::").map(String::from).collect();
        let file = mods
            .get(&module)
            .unwrap_or_else(|| panic!("no module {core} under src/"));
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for path in paths_in(&code) {
            if let Some(t) = target(&module, &path, &mods)
                && !t.starts_with(&module)
                && !core_may_import(&t)
            {
                broken.push(format!("{core} -> {} ({})", t.join("::"), path.join("::")));
            }
        }
    }
    broken.sort();
    broken.dedup();
    assert!(
        broken.is_empty(),
        "the run core imports a protocol's files:\n{}",
        broken.join("\n")
    );
}

/// The traits `docs/design.md`'s "Adding a protocol" names, as `module::Trait` paths.
fn documented_seams() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = std::fs::read_to_string(root.join("docs/design.md")).unwrap();
    let section = design
        .split("### Adding a protocol")
        .nth(1)
        .expect("docs/design.md has an \"Adding a protocol\" section");
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            let last = span.rsplit("::").next().unwrap_or("");
            span.contains("::") && last.starts_with(|c: char| c.is_ascii_uppercase())
        })
        .map(String::from)
        .collect()
}

#[test]
fn adding_a_protocol_names_traits_that_both_protocols_implement() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let seams = documented_seams();
    assert!(seams.len() >= 5, "too few seams found: {seams:?}");
    let code: Vec<String> = mods
        .iter()
        .filter(|(m, _)| {
            m.last()
                .is_none_or(|l| l != "tests" && !l.ends_with("_tests"))
        })
        .map(|(_, f)| code_of(&std::fs::read_to_string(f).unwrap()))
        .collect();
    let mut wrong = Vec::new();
    for seam in &seams {
        let (module, name) = seam.rsplit_once("::").unwrap();
        let module: ModPath = module.split("::").map(String::from).collect();
        let Some(file) = mods.get(&module) else {
            wrong.push(format!("{seam}: no module {}", module.join("::")));
            continue;
        };
        let text = code_of(&std::fs::read_to_string(file).unwrap());
        if !text.contains(&format!("trait {name}")) {
            if text.contains(&format!("struct {name}")) {
                continue; // a shared type the section names, not a seam
            }
            wrong.push(format!("{seam}: no trait {name} there"));
            continue;
        }
        let impls = code
            .iter()
            .flat_map(|c| c.lines())
            .filter(|l| {
                let l = l.trim_start();
                l.starts_with("impl")
                    && (l.contains(&format!(" {name} for "))
                        || l.contains(&format!("::{name} for ")))
            })
            .count();
        if impls != 2 {
            wrong.push(format!(
                "{seam}: {impls} implementations outside tests, not one per protocol (2)"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/design.md's seams:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_use_trees_and_relative_paths() {
    let code = "use super::{a::B, c::{d, e::F}};\nfn f() { crate::x::y(); self::g::h(); }";
    let got: Vec<String> = paths_in(code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "super::a::B",
            "super::c::d",
            "super::c::e::F",
            "crate::x::y",
            "self::g::h"
        ]
    );
}
