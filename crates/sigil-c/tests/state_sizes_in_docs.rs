//! The docs quote the sizes of the caller-owned states (`SIGIL_DEVICE_SIZE`,
//! `SIGIL_DIET_NODE_SIZE`, …) as numbers; this fails when a quoted number is not what
//! `include/sigil.h` defines, so a state that grows cannot leave a page behind.
//! Forms checked: "`NAME`, 4,096 B", "`NAME` bytes (4,096)", "`NAME` = 8,192".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `#define SIGIL_X_SIZE …` evaluated: a number, or `(8 * SIGIL_X_WORDS)`.
fn defined_sizes() -> BTreeMap<String, u64> {
    let header = std::fs::read_to_string(root().join("crates/sigil-c/include/sigil.h")).unwrap();
    let mut raw = BTreeMap::new();
    for line in header.lines() {
        let mut parts = line.trim().splitn(3, ' ');
        if parts.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        raw.insert(name.to_string(), value.trim().to_string());
    }
    let eval = |v: &str| -> Option<u64> {
        let v = v.trim_matches(|c| c == '(' || c == ')');
        if let Ok(n) = v.parse() {
            return Some(n);
        }
        let (a, b) = v.split_once('*')?;
        let words = raw.get(b.trim())?.parse::<u64>().ok()?;
        Some(a.trim().parse::<u64>().ok()? * words)
    };
    raw.iter()
        .filter(|(k, _)| k.ends_with("_SIZE"))
        .filter_map(|(k, v)| Some((k.clone(), eval(v)?)))
        .collect()
}

fn number_after(text: &str) -> Option<u64> {
    let digits: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().ok()
}

#[test]
fn quoted_state_sizes_match_the_header() {
    let sizes = defined_sizes();
    assert!(
        sizes.contains_key("SIGIL_DIET_NODE_SIZE") && sizes.contains_key("SIGIL_DEVICE_SIZE"),
        "header sizes not found: {sizes:?}"
    );
    let pages = [
        "docs/c-api.md",
        "docs/device-costs.md",
        "tools/c-lib-size/section.md",
    ];
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        for (name, size) in &sizes {
            let quoted = format!("`{name}`");
            for (at, _) in text.match_indices(&quoted) {
                let rest = &text[at + quoted.len()..];
                let n = if let Some(r) = rest.strip_prefix(",") {
                    number_after(r)
                } else if let Some(r) = rest.strip_prefix(" bytes (") {
                    number_after(r)
                } else if let Some(r) = rest.strip_prefix(" = ") {
                    number_after(r)
                } else {
                    None
                };
                if let Some(n) = n {
                    checked += 1;
                    if n != *size {
                        wrong.push(format!("{page}: {name} quoted as {n}, sigil.h says {size}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 6, "only {checked} quoted sizes found");
}
