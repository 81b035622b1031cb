//! The app's top-level modules import each other without a cycle: a record type or helper that
//! two of them need lives below both, so each can be read, tested and later moved into a crate
//! of its own. Read from the source, as Cargo would enforce it between crates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What `crate::dag` re-exports from the engine (its `pub use viss_engine::{..}` lists): naming
/// them is depending on the engine, not on the app's `dag` module.
fn engine_through_dag(src: &Path) -> BTreeSet<String> {
    let dag = std::fs::read_to_string(src.join("dag.rs")).unwrap();
    let mut names = BTreeSet::new();
    for (at, _) in dag.match_indices("pub use viss_engine::{") {
        let list = &dag[at + "pub use viss_engine::{".len()..];
        let list = &list[..list.find('}').unwrap()];
        names.extend(
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(String::from),
        );
    }
    names
}

fn rust_files(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            rust_files(&entry.unwrap().path(), files);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        files.push(path.to_path_buf());
    }
}

/// The modules `file` names as `crate::<module>`, outside comments and its test module.
fn imports(file: &Path, modules: &BTreeSet<String>, engine: &BTreeSet<String>) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let code: String = text
        .lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let module: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if module == "dag" {
            let next = rest["dag::".len().min(rest.len())..].trim_start_matches('{');
            let name: String = next
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if engine.contains(&name) {
                continue;
            }
        }
        if modules.contains(&module) {
            found.insert(module);
        }
    }
    found
}

#[test]
fn the_apps_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_string();
            let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
            (module && !["main", "lib", "module_tests"].contains(&name.as_str())).then_some(name)
        })
        .collect();
    let engine = engine_through_dag(&src);
    assert!(
        engine.contains("store"),
        "dag.rs re-exports the engine: {engine:?}"
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files);
        rust_files(&src.join(format!("{module}.rs")), &mut files);
        let named = edges.entry(module.clone()).or_default();
        for file in files {
            named.extend(
                imports(&file, &modules, &engine)
                    .into_iter()
                    .filter(|m| m != module),
            );
        }
    }
    assert!(
        edges["workspace"].contains("stages"),
        "the scan finds imports: {edges:?}"
    );
    // Depth-first search for a path back to where it started.
    fn cycle_from(
        start: &str,
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        for next in &edges[at] {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if let Some(cycle) = cycle_from(start, next, edges, path, seen) {
                    return Some(cycle);
                }
                path.pop();
            }
        }
        None
    }
    for module in &modules {
        let mut path = vec![module.clone()];
        let cycle = cycle_from(module, module, &edges, &mut path, &mut BTreeSet::new());
        assert!(
            cycle.is_none(),
            "a module cycle: {}",
            cycle.unwrap().join(" -> ")
        );
    }
}
